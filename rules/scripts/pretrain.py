"""Rule pretrain: one (preset, pre-training seed, budget) run of the pre-training sweep (under WSD its
decay, from the stable run's state), resumable, on the job's ranks (pipeline/train/pretrain_job.py)."""

from pipeline.runtime import setup_logging
from pipeline.train.pretrain_job import pretrain_job, run

setup_logging(snakemake.log[0])
job = pretrain_job(
    snakemake.params.hp,
    snakemake.config["pretrain"],
    snakemake.input,
    snakemake.wildcards,
    out=snakemake.output[0],
    state_path=snakemake.params.state,
    device=snakemake.params.device,
    ranks=snakemake.resources.ranks,
    threads=snakemake.threads,
    budget=int(snakemake.wildcards.budget),
    allow_repeat=snakemake.params.allow_repeat,
)
run(job, snakemake.params.state + ".job.json")
