"""Rule pretrain_stable_twin: WSD's stable run at a budget's tokens as a checkpoint, the undecayed twin
of the budget's decayed branch (pretrain.stable_twins; pipeline/train/pretrain.py, stable_twin)."""

from pipeline.data.token_shards import pretrain_shards
from pipeline.runtime import setup_logging
from pipeline.train.config import PretrainConfig, execution
from pipeline.train.pretrain import stable_twin

setup_logging(snakemake.log[0])
section, wc = snakemake.config["pretrain"], snakemake.wildcards
shards = pretrain_shards(section, snakemake.input.tokens)
stable_twin(
    train_tokens=None if shards else snakemake.input.tokens,
    tokenizer_path=snakemake.input.tokenizer,
    preset=wc.model,
    budget=int(wc.budget),
    seed=int(wc.pretrain_seed),
    cfg=PretrainConfig(**snakemake.params.hp, **execution(PretrainConfig, section)),
    state=snakemake.input.state,
    out_dir=snakemake.output[0],
    token_shards=shards,
)
