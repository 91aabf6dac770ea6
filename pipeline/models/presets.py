"""Model size presets (the architectures of the pre-training sweep): light (no torch import), so
the Snakefile can use them at parse time."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.models.shapes import ModelShape


@dataclass(frozen=True)
class SizePreset:
    """Architecture of one model size (Table 3 of the paper for the olmo-* presets)."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int
    attention_dropout: float = 0.0
    initializer_range: float = 0.02


SIZE_PRESETS: dict[str, SizePreset] = {
    # CPU default: the toy scale at which the effect shows on ~8M tokens in minutes.
    "tiny": SizePreset(32, 2, 4, 128, 128),
    # the multimodal demo (config/vlm-demo.yaml): LLaVA's v1 template, 16 image tokens and the toy
    # benchmarks' prompts take up to ~170 tokens, more than tiny's 128 positions
    "small": SizePreset(64, 2, 4, 256, 256),
    # Table 3 (the paper also uses 0.1 residual/embedding dropout, which the HF Olmo2
    # architecture does not have; attention dropout is kept).
    "olmo-15m": SizePreset(192, 3, 3, 768, 1024, attention_dropout=0.1),
    "olmo-30m": SizePreset(384, 6, 6, 1536, 1024, attention_dropout=0.1),
    "olmo-90m": SizePreset(576, 9, 9, 2304, 1024, attention_dropout=0.1),
}


# the preset muP transfers each preset's hyperparameters from (pipeline/models/mup.py); a preset not
# listed has no muP base
SIZE_MUP_BASE: dict[str, str] = {
    # the paper does not state its muP base width: the smallest model of Table 3's family, so the
    # base model is the standard one and Table 3's single learning rate is its own
    "olmo-15m": "olmo-15m",
    "olmo-30m": "olmo-15m",
    "olmo-90m": "olmo-15m",
}


def mup_base(preset: str) -> SizePreset:
    """The base preset muP transfers `preset`'s hyperparameters from; an error naming the presets
    that have one when it has none."""
    if preset not in SIZE_MUP_BASE:
        raise ValueError(
            f"pretrain.parameterization: mup needs a base width, and preset {preset!r} has none; "
            f"expected one of {sorted(SIZE_MUP_BASE)} (pipeline/models/presets.py SIZE_MUP_BASE), or "
            "parameterization: standard"
        )
    return SIZE_PRESETS[SIZE_MUP_BASE[preset]]


def preset_shape(preset: str, vocab: int) -> ModelShape:
    """The shape of a size preset's model for a tokenizer of `vocab` tokens (untied, full attention)."""
    p = SIZE_PRESETS[preset]
    heads = p.num_attention_heads
    return ModelShape(
        p.num_hidden_layers,
        p.hidden_size,
        p.intermediate_size,
        heads,
        heads,
        vocab,
        False,
        p.max_position_embeddings,
        p.attention_dropout,
    )
