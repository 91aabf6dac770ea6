"""Rule vlm_tower: the frozen CLIP vision tower (pipeline/multimodal/tower.py): the hub's, or the
toy CLIP trained on the toy's training captions."""

from pipeline.multimodal.config import TowerConfig
from pipeline.multimodal.tower import hub_tower, toy_tower
from pipeline.runtime import set_threads, setup_logging

setup_logging(snakemake.log[0])
set_threads(snakemake.threads)
cfg = TowerConfig(**snakemake.params.tower)
if cfg.source == "hub":
    hub_tower(cfg, snakemake.output[0])
else:
    tokenizer = snakemake.input.tokenizer[0] if snakemake.input.tokenizer else None
    toy_tower(cfg, snakemake.input.data, tokenizer, snakemake.output[0])
