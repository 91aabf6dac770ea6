"""Rule metrics: every job's rows in one tidy Parquet, stamped with provenance."""

import logging

from pipeline.io import write_parquet
from pipeline.runtime import setup_logging
from pipeline.tables import aggregate_metrics, provenance

setup_logging(snakemake.log[0])
df = aggregate_metrics(snakemake.input, provenance(snakemake.params.config, repo=snakemake.params.repo))
write_parquet(snakemake.output[0], df)
logging.info("%d rows from %d parts", len(df), len(snakemake.input))
