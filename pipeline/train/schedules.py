"""Learning-rate schedules: the multiplier of the peak rate at each optimiser step.

The same arithmetic as transformers' get_cosine_schedule_with_warmup / get_constant_schedule(_with_warmup)
(tests/train/test_schedules.py checks them equal step by step), written here because importing
transformers.optimization pulls in transformers.trainer_utils and peft: 3 s of import in every
job (bench/bench_imports.py).
"""

from __future__ import annotations

import math
from functools import partial

import torch


def warmup_cosine(step: int, *, warmup: int, total: int) -> float:
    """Linear warmup from 0 over `warmup` steps, then half a cosine down to exactly 0 at `total`."""
    if step < warmup:
        return float(step) / float(max(1, warmup))
    progress = float(step - warmup) / float(max(1, total - warmup))
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * progress)))


def warmup_constant(step: int, *, warmup: int) -> float:
    """Linear warmup from 0 over `warmup` steps, then the peak rate."""
    if step < warmup:
        return float(step) / float(max(1.0, warmup))
    return 1.0


def constant(step: int) -> float:
    return 1.0


def warmup_stable_decay(step: int, *, warmup: int, total: int, decay: int, shape: str = "linear") -> float:
    """Warmup-stable-decay (Hägele et al. 2024, arXiv:2405.18392, Section 3): linear warmup over
    `warmup` steps (as `warmup_constant`, so a stable run's rates are these bit for bit), the peak
    rate, then over the last `decay` steps down to exactly 0 at `total`: linearly, or as 1 - sqrt
    (their better cooldown)."""
    start = total - decay
    if step <= start:
        return warmup_constant(step, warmup=warmup)
    progress = min(1.0, float(step - start) / float(decay))
    return 1.0 - (math.sqrt(progress) if shape == "1-sqrt" else progress)


def lambda_schedule(
    optimizer: torch.optim.Optimizer,
    name: str,
    warmup: int,
    total: int,
    decay: int | None = None,
    shape: str = "linear",
) -> torch.optim.lr_scheduler.LambdaLR:
    """The named schedule (cosine | constant_with_warmup | constant | wsd, whose last `decay` steps
    decay with `shape`) over `total` steps."""
    factors = {
        "cosine": partial(warmup_cosine, warmup=warmup, total=total),
        "constant_with_warmup": partial(warmup_constant, warmup=warmup),
        "constant": constant,
        "wsd": partial(warmup_stable_decay, warmup=warmup, total=total, decay=decay, shape=shape),
    }
    if name not in factors:
        raise ValueError(f"schedule {name!r} is unknown; expected one of {sorted(factors)}")
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factors[name])
