"""OLMo-architecture models from named size presets, and their initialisation statistics."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from transformers import Olmo2Config, Olmo2ForCausalLM, PretrainedConfig, PreTrainedModel


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
    # Table 3 (the paper also uses 0.1 residual/embedding dropout, which the HF Olmo2
    # architecture does not have; attention dropout is kept).
    "olmo-15m": SizePreset(192, 3, 3, 768, 1024, attention_dropout=0.1),
    "olmo-30m": SizePreset(384, 6, 6, 1536, 1024, attention_dropout=0.1),
    "olmo-90m": SizePreset(576, 9, 9, 2304, 1024, attention_dropout=0.1),
}


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
    """A freshly initialised model; the same seed gives the same weights."""
    torch.manual_seed(seed)
    model = Olmo2ForCausalLM(config)
    return model


def init_std(model: torch.nn.Module) -> dict[str, float]:
    """Per-tensor standard deviation of a model's parameters (recorded at initialisation).

    Norm weights initialised to a constant have std 0 and so receive no Gaussian noise.
    """
    return {name: float(p.detach().float().std()) if p.numel() > 1 else 0.0 for name, p in model.named_parameters()}


def init_std_from_config(model: PreTrainedModel, config: PretrainedConfig) -> dict[str, float]:
    """The family's initialisation distribution when the real init is unknown (hub checkpoints).

    HF causal LMs initialise every Linear / Embedding weight as N(0, initializer_range²)
    and norm weights/biases as constants (std 0).
    """
    std = float(getattr(config, "initializer_range", 0.02))
    out = {}
    for name, module in model.named_modules():
        for pname, p in module.named_parameters(recurse=False):
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


def job_resources(preset: str, stage: str, device: str) -> dict[str, int]:
    """Scheduler resources (mem_mb, runtime in minutes, gpu count) of a job on a preset.

    Sized from the parameter count so a SLURM profile can place jobs; generous for the
    paper's presets, small for `tiny` so a workstation runs many at once.
    """
    p = SIZE_PRESETS.get(preset)
    params = 0 if p is None else 12 * p.num_hidden_layers * p.hidden_size**2 + 2 * 50304 * p.hidden_size
    gpu = int(device != "cpu")
    mem_mb = 2000 + params * 16 // 1_000_000 * 4  # fp32 weights + Adam moments + activations
    runtime = {"pretrain": 60, "perturb": 30}.get(stage, 30)
    if params > 20_000_000:
        runtime *= 24
    return {"mem_mb": int(mem_mb), "runtime": int(runtime), "gpu": gpu}
