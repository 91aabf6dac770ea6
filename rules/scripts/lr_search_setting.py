"""Rule lr_search_setting: a finished search's (checkpoint, task, λ) as one record and one table
of its runs' metric rows and line rows (the aggregations read these, not the runs it chose)."""

import shutil

import pandas as pd

from pipeline.io import atomic_path, write_parquet
from pipeline.runtime import setup_logging

setup_logging(snakemake.log[0])
write_parquet(snakemake.output.runs, pd.concat([pd.read_parquet(f) for f in snakemake.input.runs]))
write_parquet(snakemake.output.lines, pd.concat([pd.read_parquet(f) for f in snakemake.input.lines]))
with atomic_path(snakemake.output.final) as tmp:
    shutil.copyfile(snakemake.input.final[0], tmp)
