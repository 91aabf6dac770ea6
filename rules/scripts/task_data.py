"""Rule task_data: one fine-tuning task's train/validation/test splits as a table."""

import logging

from pipeline.data.encode import task_frame
from pipeline.data.task_loading import load_task, task_stats
from pipeline.io import write_parquet
from pipeline.runtime import setup_logging

setup_logging(snakemake.log[0])
task = load_task(snakemake.wildcards.task, snakemake.params.cfg)
df = task_frame(task)
write_parquet(snakemake.output[0], df)
logging.info("task %s: %s", task.name, task_stats(task))
