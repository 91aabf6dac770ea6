"""Rule curvature_lines: every line table of the study in one, and one summary row per line."""

import logging

import pandas as pd

from pipeline.curvature.summary import summary_table
from pipeline.io import write_parquet
from pipeline.runtime import setup_logging

setup_logging(snakemake.log[0])
lines = pd.concat([pd.read_parquet(p) for p in snakemake.input], ignore_index=True)
summary = summary_table(lines)
write_parquet(snakemake.output.lines, lines)
write_parquet(snakemake.output.summary, summary)
logging.info("%d line points, %d lines, from %d parts", len(lines), len(summary), len(snakemake.input))
with pd.option_context("display.width", 200, "display.max_columns", 20):
    logging.info("\n%s", summary.drop(columns=["study", "model"]).to_string(index=False))
