"""Rule pretrain: one (preset, pre-training seed, budget) run of the pre-training sweep (under WSD its
decay, from the stable run's state), resumable, on the job's ranks (pipeline/train/pretrain_job.py)."""

from pipeline.runtime import setup_logging
from pipeline.train.pretrain_job import rule_job, run

setup_logging(snakemake.log[0])
run(rule_job(snakemake), snakemake.params.state + ".job.json")
