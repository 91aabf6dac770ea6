"""OLMo-architecture models from named size presets, and their initialisation statistics."""

from __future__ import annotations

from dataclasses import asdict

import torch
from transformers import Olmo2Config, Olmo2ForCausalLM, PretrainedConfig, PreTrainedModel

from pipeline.models.attention import use_small_head_attention
from pipeline.models.presets import SIZE_PRESETS


def model_config(preset: str, vocab_size: int, eos_token_id: int, pad_token_id: int) -> Olmo2Config:
    """The transformers config of a size preset for a tokenizer of `vocab_size`."""
    if preset not in SIZE_PRESETS:
        raise KeyError(f"model preset {preset!r} is unknown; expected one of {sorted(SIZE_PRESETS)}")
    p = SIZE_PRESETS[preset]
    return Olmo2Config(
        vocab_size=vocab_size,
        bos_token_id=eos_token_id,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        tie_word_embeddings=False,
        **asdict(p),
    )


def build_model(config: Olmo2Config, seed: int) -> Olmo2ForCausalLM:
    """A freshly initialised model; the same seed gives the same weights.

    Small attention heads (the CPU presets) get pipeline.models.attention's faster implementation.
    """
    torch.manual_seed(seed)
    model = Olmo2ForCausalLM(config)
    use_small_head_attention(model)
    return model


def init_std(model: torch.nn.Module) -> dict[str, float]:
    """Per-tensor standard deviation of a model's parameters (recorded at initialisation).

    Norm weights initialised to a constant have std 0 and so receive no Gaussian noise.
    """
    return {
        name: float(p.detach().float().std()) if p.numel() > 1 else 0.0
        for name, p in model.named_parameters()
    }


def init_std_from_config(model: PreTrainedModel, config: PretrainedConfig) -> dict[str, float]:
    """The family's initialisation distribution when the real init is unknown (hub checkpoints).

    HF causal LMs initialise every Linear / Embedding weight as N(0, initializer_range²)
    and norm weights/biases as constants (std 0).
    """
    std = float(getattr(config, "initializer_range", 0.02))
    out = {}
    for name, module in model.named_modules():
        for pname, _ in module.named_parameters(recurse=False):
            full = f"{name}.{pname}" if name else pname
            is_matrix = isinstance(module, (torch.nn.Linear, torch.nn.Embedding)) and pname == "weight"
            out[full] = std if is_matrix else 0.0
    return out


def count_parameters(model: torch.nn.Module, non_embedding: bool = False) -> int:
    n = sum(p.numel() for p in model.parameters())
    if non_embedding:
        n -= sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Embedding))
        out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        if out is not None:
            n -= out.weight.numel()
    return n


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The decoder layers of a transformers causal LM (`model.model.layers`), or of the language
    model inside a LLaVA model (`model.model.language_model.layers`)."""
    inner = getattr(model, "model", None)
    layers = getattr(getattr(inner, "language_model", inner), "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise ValueError(f"{type(model).__name__}: no decoder layers at model.model.layers")
    return layers
