"""Rule sweep_plan: the study's checkpoints as planned, one row each (pipeline/workflow/targets.py)."""

import logging

import pandas as pd

from pipeline.io import write_parquet
from pipeline.runtime import setup_logging

setup_logging(snakemake.log[0])
write_parquet(snakemake.output[0], pd.DataFrame(snakemake.params.rows))
logging.info("%d checkpoints planned", len(snakemake.params.rows))
