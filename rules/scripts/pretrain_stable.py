"""Rule pretrain_stable: WSD's stable run of one (preset, pre-training seed) up to a branch step, from
the previous branch point's state; resumable, on the job's ranks (pipeline/train/pretrain_job.py)."""

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
    stable_steps=int(snakemake.wildcards.step),
)
run(job, snakemake.params.state + ".job.json")
