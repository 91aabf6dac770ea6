"""Rule pretrain: one (preset, budget) run of the pre-training sweep, resumable."""

from pipeline.runtime import pick_device, set_threads, setup_logging
from pipeline.train.pretrain import pretrain_run

setup_logging(snakemake.log[0])
set_threads(snakemake.threads)
cfg = snakemake.config["pretrain"]
pretrain_run(
    train_tokens=snakemake.input.tokens,
    tokenizer_path=snakemake.input.tokenizer,
    preset=snakemake.wildcards.model,
    budget=int(snakemake.wildcards.budget),
    hp={
        **snakemake.params.hp,
        "checkpoint_every": cfg.get("checkpoint_every", 200),
        "log_every": cfg.get("log_every", 100),
    },
    out_dir=snakemake.output[0],
    state_path=snakemake.params.state,
    device=pick_device(snakemake.params.device),
)
