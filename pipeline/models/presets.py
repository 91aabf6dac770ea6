"""Model size presets, token budgets and job resources: light (no torch import), so the
Snakefile can use them at parse time."""

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
    # Table 3 (the paper also uses 0.1 residual/embedding dropout, which the HF Olmo2
    # architecture does not have; attention dropout is kept).
    "olmo-15m": SizePreset(192, 3, 3, 768, 1024, attention_dropout=0.1),
    "olmo-30m": SizePreset(384, 6, 6, 1536, 1024, attention_dropout=0.1),
    "olmo-90m": SizePreset(576, 9, 9, 2304, 1024, attention_dropout=0.1),
}


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
    )


# Table 4: the fine-tuning learning-rate grid of the paper's controlled experiments.
PAPER_FINETUNE_LRS: tuple[float, ...] = (
    4e-6,
    8e-6,
    1e-5,
    2e-5,
    4e-5,
    5e-5,
    6e-5,
    7e-5,
    8e-5,
    9e-5,
    1e-4,
    1.1e-4,
    1.2e-4,
    1.4e-4,
    1.6e-4,
    1.8e-4,
    2e-4,
    2.4e-4,
    4e-4,
    5e-4,
    6e-4,
    8e-4,
    1e-3,
    2e-3,
    3e-3,
    4e-3,
    6e-3,
)


# Table 2 (Appendix B.2): instruction tuning on Anthropic-HH, Alpaca and TULU.
INSTRUCT_FINETUNE_LRS: tuple[float, ...] = (1e-6, 5e-6, 1e-5, 5e-5, 8e-5, 1e-4, 2e-4)

# Named learning-rate grids: `finetune.learning_rates: paper | instruct`.
FINETUNE_LR_GRIDS: dict[str, tuple[float, ...]] = {
    "paper": PAPER_FINETUNE_LRS,
    "instruct": INSTRUCT_FINETUNE_LRS,
}

# Table 2's other settings as `finetune:` config keys (config/instruct.yaml applies them): batch
# 256 conversations (reach it with micro_batch_size), cosine, 20 warmup steps, AdamW, weight
# decay 0. Table 2 gives no epoch count: 2, as the TULU v1 recipe the paper's TULU comes from
# (Wang et al., 2023, open-instruct), with the pipeline's early stopping over epochs on the ID
# validation loss. AdamW betas, gradient clipping and the context are not in Table 2: the
# transformers / open-instruct defaults (0.9, 0.999), 1.0 and the model's context.
INSTRUCT_FINETUNE: dict[str, object] = {
    "learning_rates": "instruct",
    "batch_size": 256,
    "schedule": "cosine",
    "warmup_steps": 20,
    "weight_decay": 0.0,
    "epochs": 2,
    "max_steps": None,
    "betas": [0.9, 0.999],
    "grad_clip": 1.0,
    "seq_len": None,
}


def finetune_lr_grid(value: str | list[float] | tuple[float, ...]) -> tuple[float, ...]:
    """`finetune.learning_rates`: a list of values or the name of a grid in FINETUNE_LR_GRIDS."""
    if isinstance(value, str):
        if value not in FINETUNE_LR_GRIDS:
            raise ValueError(
                f"finetune.learning_rates: unknown grid {value!r}; "
                f"expected a list of numbers or one of {sorted(FINETUNE_LR_GRIDS)}"
            )
        return FINETUNE_LR_GRIDS[value]
    return tuple(value)


def format_hparam(x: float) -> str:
    """A grid value as it appears in file names: 0.003, 1e-05, 0 (6 significant digits)."""
    return f"{float(x):.6g}"


def steps_for_budget(budget: int, batch_size: int, seq_len: int) -> int:
    """Optimiser steps that fit in a token budget; a budget below one batch is an error."""
    per_step = batch_size * seq_len
    if budget < per_step:
        raise ValueError(
            f"pretrain.budgets: token budget {budget} is smaller than one batch "
            f"({batch_size} x {seq_len} = {per_step} tokens)"
        )
    return budget // per_step


def job_resources(preset: str, stage: str, device: str, params: int | None = None) -> dict[str, int]:
    """Scheduler resources (mem_mb, runtime in minutes, gpu count) of a job on a preset.

    Sized from the parameter count so a SLURM profile can place jobs; generous for the
    paper's presets, small for `tiny` so a workstation runs many at once. `params` (a hub
    checkpoint's parameter count, `pipeline/models/hub.py`) sizes the job from it instead of a preset.
    """
    if params is not None:
        return hub_job_resources(params, stage, device)
    p = SIZE_PRESETS.get(preset)
    params = 0 if p is None else 12 * p.num_hidden_layers * p.hidden_size**2 + 2 * 50304 * p.hidden_size
    gpu = int(device != "cpu")
    mem_mb = 2000 + params * 16 // 1_000_000 * 4  # fp32 weights + Adam moments + activations
    runtime = {"pretrain": 60, "perturb": 30, "finetune": 30}.get(stage, 30)
    if params > 20_000_000:
        runtime *= 24
    return {"mem_mb": int(mem_mb), "runtime": int(runtime), "gpu": gpu}


# Host-memory bytes per parameter of a job on a loaded (hub) checkpoint. On CPU everything is in
# host memory in fp32: perturbation keeps the weights and a copy to restore (8 B), fine-tuning
# the weights, gradients and two AdamW moments (16 B); +25% for activations and the loader. On
# GPU the host stages the weights while loading and perturbation keeps its restore copy there
# (pipeline/sweeps/noise.py; bf16, 2 B): 5 B covers both. The GPU itself is asked for by count (one
# per job; its type via set-resources).
HOST_BYTES_PER_PARAM = {
    "cpu": {"perturb": 10, "finetune": 20, "pretrain": 20},
    "cuda": {"perturb": 5, "finetune": 5, "pretrain": 5},
}


def hub_job_resources(params: int, stage: str, device: str) -> dict[str, int]:
    """Resources of a job on a checkpoint of `params` parameters, e.g. with `device: cuda` OLMo-1B
    ~10 GB host memory and 1.5 h, the 7B models ~40 GB and 7-7.5 h. Runtime grows with the size:
    the stage's base minutes times one per 500M parameters (rounded up), at most 48x."""
    gpu = int(device != "cpu")
    per_param = HOST_BYTES_PER_PARAM["cpu" if device == "cpu" else "cuda"].get(stage, 20)
    mem_mb = 4000 + params * per_param // 1_000_000
    base = {"pretrain": 60, "perturb": 30, "finetune": 30}.get(stage, 30)
    runtime = base * min(48, max(1, -(-params // 500_000_000)))
    return {"mem_mb": int(mem_mb), "runtime": int(runtime), "gpu": gpu}
