"""The pre-training sweep's DAG under WSD, and what the sweep costs under each schedule.

Under `pretrain.schedule: wsd` every (preset, seed) has one stable run, cut into jobs at the budgets'
branch steps (the step where a budget's decay leaves it): job `pretrain_stable` at step k goes on
from the state of the branch step before k. Each budget's `pretrain` job is then only its decay,
from the stable state at its branch step. A new budget adds its decay job and, where its branch
step is new, one stable segment (the segment after it then starts from the new one's state: the
same numbers, recomputed). With `pretrain.stable_twins` the stable run is also cut at each budget's
last step, and job `pretrain_stable_twin` writes the stable run's weights there as a checkpoint: the
undecayed twin of the budget's decayed branch, at equal tokens (the rival explanation of the
sensitivity: tokens, or the learning-rate decay). Light: the Snakefile calls it at parse time.
"""

from __future__ import annotations

import math

from pipeline import layout
from pipeline.models.presets import preset_shape
from pipeline.train.config import PretrainConfig, hyperparameters, resolve_precision, steps_for_budget
from pipeline.train.memory import GIB, GpuSettings, PlanError, estimate, gpu_counts, usable_bytes


def pretrain_config(config: dict) -> PretrainConfig:
    return PretrainConfig(**hyperparameters(PretrainConfig, config["pretrain"]))


def is_wsd(config: dict) -> bool:
    return pretrain_config(config).schedule == "wsd"


def branch_steps(config: dict) -> list[int]:
    """WSD: the steps where the stable run is cut into jobs, ascending: each budget's branch step (two
    budgets may share one) and, with `pretrain.stable_twins`, each budget's last step (its twin)."""
    cfg, pt = pretrain_config(config), config["pretrain"]
    twins = [twin_step(config, b) for b in pt["budgets"]] if has_twins(config) else []
    return sorted({cfg.branch_step(b) for b in pt["budgets"]} | set(twins))


def has_twins(config: dict) -> bool:
    """WSD with `pretrain.stable_twins`: every budget also has its stable (undecayed) checkpoint."""
    return is_wsd(config) and bool(config["pretrain"].get("stable_twins", False))


def twin_step(config: dict, budget: int) -> int:
    """The stable run's step with the budget's tokens: where its undecayed twin is cut."""
    pt = config["pretrain"]
    return steps_for_budget(budget, pt["batch_size"], pt["seq_len"])


def twin_inputs(config: dict, model: str, seed: str, budget: int) -> dict[str, str]:
    """Rule pretrain_stable_twin's input: the stable state at the budget's last step (the job record's
    branch point)."""
    return {"branch": stable_state(config, model, seed, twin_step(config, budget))}


def stable_state(config: dict, model: str, seed: int | str, step: int) -> str:
    return layout.study_path(
        config["study"], layout.PRETRAIN_STABLE, model=model, pretrain_seed=seed, step=step
    )


def previous_branch(config: dict, step: int) -> int | None:
    """The branch step the stable segment to `step` goes on from (None: from initialisation)."""
    earlier = [s for s in branch_steps(config) if s < step]
    return earlier[-1] if earlier else None


def stable_inputs(config: dict, model: str, seed: str, step: int) -> dict[str, str]:
    """Rule pretrain_stable's state input: the previous branch point's state, if any."""
    before = previous_branch(config, step)
    return {} if before is None else {"branch": stable_state(config, model, seed, before)}


def decay_inputs(config: dict, model: str, seed: str, budget: int) -> dict[str, str]:
    """Rule pretrain's state input under WSD: the stable state at the budget's branch step."""
    if not is_wsd(config):
        return {}
    return {"branch": stable_state(config, model, seed, pretrain_config(config).branch_step(budget))}


def sweep_steps(config: dict) -> dict[str, int]:
    """Optimiser steps of one (preset, seed)'s sweep: cosine trains every budget from scratch; WSD
    the stable run to its last cut (a branch step, or the largest budget's twin), plus every budget's
    decay."""
    pt, cfg = config["pretrain"], pretrain_config(config)
    steps = [steps_for_budget(b, pt["batch_size"], pt["seq_len"]) for b in pt["budgets"]]
    return {
        "cosine": sum(steps),
        "wsd": max(branch_steps(config)) + sum(cfg.decay_steps(s) for s in steps),
    }


def flops_per_token(preset: str, vocab: int, seq_len: int) -> float:
    """Training FLOPs per token of a size preset (ModelShape.train_flops_per_token)."""
    return preset_shape(preset, vocab).train_flops_per_token(seq_len)


def gpu_hours(config: dict, preset: str, tokens: float) -> float:
    """GPU-hours to train `preset` on `tokens` at the `gpu.tflops` one GPU delivers."""
    gpu, pt = GpuSettings(**config["gpu"]), config["pretrain"]
    flops = flops_per_token(preset, config["tokenizer"]["vocab_size"], pt["seq_len"])
    return tokens * flops / (gpu.tflops * 1e12) / 3600


def job_tokens(config: dict, budget: int | None = None, stable_step: int | None = None) -> int:
    """Tokens one pre-training job trains: a budget's run (cosine: all of it; WSD: its decay), or
    a WSD stable segment (from the branch step before `stable_step`)."""
    pt, cfg = config["pretrain"], pretrain_config(config)
    per_step = pt["batch_size"] * pt["seq_len"]
    if stable_step is not None:
        return (stable_step - (previous_branch(config, stable_step) or 0)) * per_step
    steps = steps_for_budget(budget, pt["batch_size"], pt["seq_len"])
    return (cfg.decay_steps(steps) if is_wsd(config) else steps) * per_step


# the time limit asked of a GPU pre-training job, over its cost model's estimate (gpu.tflops was
# measured on one GPU on one preset: other presets, rank counts and nodes vary around it)
RUNTIME_MARGIN = 1.5


def pretrain_ranks(config: dict, preset: str) -> int:
    """Processes (GPUs with device cuda) of one pre-training job of `preset`: `pretrain.ranks` when
    set; unset, on CUDA the memory planner's fewest GPUs of a node on which the step fits
    (pipeline/train/memory.py `estimate`; each rank runs its share of the global batch at once, as
    pre-training has no micro-batches), so a small preset's budget jobs run on one GPU each, side
    by side; on the CPU one. PlanError naming the keys when no count of a node fits."""
    pt = config["pretrain"]
    if pt["ranks"] is not None:
        return int(pt["ranks"])
    if config["device"] != "cuda":
        return 1
    shape = preset_shape(preset, config["tokenizer"]["vocab_size"])
    gpu = GpuSettings(**config["gpu"])
    usable = usable_bytes(gpu.memory_gb, gpu.headroom)
    precision = resolve_precision(pt.get("precision"), "cuda")
    recompute = bool(pt.get("activation_checkpointing"))
    counts = [n for n in gpu_counts(gpu.per_node) if pt["batch_size"] % n == 0]
    for n in counts:
        need = estimate(shape, n, pt["batch_size"] // n, pt["seq_len"], precision, recompute)
        if need.total <= usable:
            return n
    raise PlanError(
        f"pretrain.ranks: a pre-training step of {preset} (pretrain.batch_size {pt['batch_size']} x "
        f"pretrain.seq_len {pt['seq_len']}) fits on none of {counts} GPUs of gpu.memory_gb "
        f"{gpu.memory_gb:g} ({need.describe()} per GPU on {n}, {usable / GIB:.1f} GiB usable); turn on "
        "pretrain.activation_checkpointing or lower pretrain.batch_size"
    )


def runtime_minutes(config: dict, preset: str, tokens: int) -> int:
    """Wall-clock minutes to ask for a pre-training job on its GPUs (`pretrain_ranks`): the cost
    model's hours (`gpu_hours`) shared by the ranks, times RUNTIME_MARGIN."""
    hours = gpu_hours(config, preset, tokens) / pretrain_ranks(config, preset)
    return math.ceil(hours * 60 * RUNTIME_MARGIN)


def sweep_cost(config: dict) -> str:
    """The sweep's tokens and GPU-hours under cosine and under WSD (shown at start-up, dry runs too)."""
    pt = config["pretrain"]
    per_step = pt["batch_size"] * pt["seq_len"]
    steps = sweep_steps(config)
    gpu = GpuSettings(**config["gpu"])
    runs = len(pt["seeds"])
    lines = [
        f"pre-training sweep ({len(pt['budgets'])} budgets x {runs} seed(s) per preset), "
        f"schedule {pretrain_config(config).schedule}:"
    ]
    for preset in pt["presets"]:
        cells = []
        for name in ("cosine", "wsd"):
            tokens = steps[name] * per_step * runs
            hours = gpu_hours(config, preset, tokens)
            cells.append(f"{name} {tokens:,} tokens, {hours:,.3g} GPU-hours")
        lines.append(
            f"  {preset}: " + "; ".join(cells) + f" (WSD/cosine {steps['wsd'] / steps['cosine']:.2f})"
        )
    lines.append(f"  GPU-hours at {gpu.tflops:g} TFLOP/s delivered per GPU (gpu.tflops)")
    return "\n".join(lines)
