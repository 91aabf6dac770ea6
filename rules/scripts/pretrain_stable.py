"""Rule pretrain_stable: WSD's stable run of one (preset, pre-training seed) up to a branch step, from
the previous branch point's state; resumable, on the job's ranks (pipeline/train/pretrain_job.py)."""

from pipeline.runtime import setup_logging
from pipeline.train.pretrain_job import rule_job, run

setup_logging(snakemake.log[0])
run(rule_job(snakemake), snakemake.params.state + ".job.json")
