"""Rule pretrain: one (preset, pre-training seed, budget) run of the pre-training sweep, resumable."""

from pipeline.runtime import pick_device, set_threads, setup_logging
from pipeline.train.config import PretrainConfig, execution
from pipeline.train.pretrain import pretrain_run

setup_logging(snakemake.log[0])
set_threads(snakemake.threads)
# how the run executes (logging / resume cadence, activation checkpointing) is read from the
# config, not params: changing it reruns nothing
cfg = PretrainConfig(**snakemake.params.hp, **execution(PretrainConfig, snakemake.config["pretrain"]))
pretrain_run(
    train_tokens=snakemake.input.tokens,
    tokenizer_path=snakemake.input.tokenizer,
    preset=snakemake.wildcards.model,
    budget=int(snakemake.wildcards.budget),
    seed=int(snakemake.wildcards.pretrain_seed),
    cfg=cfg,
    out_dir=snakemake.output[0],
    state_path=snakemake.params.state,
    device=pick_device(snakemake.params.device),
    allow_repeat=snakemake.params.allow_repeat,
)
