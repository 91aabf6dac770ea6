"""Model size presets, token budgets and job resources: light (no torch import), so the
Snakefile can use them at parse time."""

from __future__ import annotations

from dataclasses import dataclass


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


# Table 4: the fine-tuning learning-rate grid of the paper's controlled experiments.
PAPER_FINETUNE_LRS: tuple[float, ...] = (
    4e-6, 8e-6, 1e-5, 2e-5, 4e-5, 5e-5, 6e-5, 7e-5, 8e-5, 9e-5, 1e-4, 1.1e-4, 1.2e-4, 1.4e-4,
    1.6e-4, 1.8e-4, 2e-4, 2.4e-4, 4e-4, 5e-4, 6e-4, 8e-4, 1e-3, 2e-3, 3e-3, 4e-3, 6e-3,
)


def format_hparam(x: float) -> str:
    """A grid value as it appears in file names: 0.003, 1e-05, 0 (6 significant digits)."""
    return f"{float(x):.6g}"


def steps_for_budget(budget: int, batch_size: int, seq_len: int) -> int:
    """Optimiser steps that fit in a token budget; a budget below one batch is an error."""
    per_step = batch_size * seq_len
    if budget < per_step:
        raise ValueError(f"pretrain.budgets: token budget {budget} is smaller than one batch ({batch_size} x {seq_len} = {per_step} tokens)")
    return budget // per_step


def job_resources(preset: str, stage: str, device: str) -> dict[str, int]:
    """Scheduler resources (mem_mb, runtime in minutes, gpu count) of a job on a preset.

    Sized from the parameter count so a SLURM profile can place jobs; generous for the
    paper's presets, small for `tiny` so a workstation runs many at once.
    """
    p = SIZE_PRESETS.get(preset)
    params = 0 if p is None else 12 * p.num_hidden_layers * p.hidden_size**2 + 2 * 50304 * p.hidden_size
    gpu = int(device != "cpu")
    mem_mb = 2000 + params * 16 // 1_000_000 * 4  # fp32 weights + Adam moments + activations
    runtime = {"pretrain": 60, "perturb": 30, "finetune": 30}.get(stage, 30)
    if params > 20_000_000:
        runtime *= 24
    return {"mem_mb": int(mem_mb), "runtime": int(runtime), "gpu": gpu}
