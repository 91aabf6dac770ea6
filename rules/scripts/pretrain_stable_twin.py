"""Rule pretrain_stable_twin: WSD's stable run at a budget's tokens as a checkpoint, the undecayed twin
of the budget's decayed branch (pretrain.stable_twins; pipeline/train/pretrain.py, stable_twin)."""

from pipeline.runtime import setup_logging
from pipeline.train.pretrain import stable_twin
from pipeline.train.pretrain_job import rule_job

setup_logging(snakemake.log[0])
stable_twin(rule_job(snakemake))
