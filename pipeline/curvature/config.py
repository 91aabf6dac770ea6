"""The `curvature:` config section (Appendix D): λ grids, probe counts and the token budget, with
their defaults and cross-key checks (the one place they live; config/schema/curvature.yaml has the
keys' types and ranges, a test checks they agree). Every field changes the numbers
(pipeline/fields.py: NUMBERS); a tag says which jobs read it.
Torch-free: the Snakefile builds it at parse time, and a λ grid without 0 fails before any job runs.

λ is in units of the direction: a Gaussian ε is the noise of γ = 1 (per-tensor init std, as the
perturbation stage draws it), so λ = γ; a fine-tuning direction is θ_ft − θ_pre, so λ = 1 is the
fine-tuned model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from pipeline.fields import NEITHER, NUMBERS, meta

DTYPES = ("float64", "float32")
# where a field goes: SHARED also to the fine-tuning jobs (their lines along θ_ft − θ_pre), FINETUNE_ONLY
# only there (rule curvature's params leave it out: changing it reruns no Gaussian job)
SHARED = meta(NUMBERS, finetune=True)
FINETUNE_ONLY = meta(NUMBERS, finetune=True, gaussian=False)
# read by rule ntk only (the empirical NTK per checkpoint and task; pipeline/curvature/ntk.py)
NTK_ONLY = meta(NUMBERS, gaussian=False, ntk=True)
GRIDS = ("lambdas_small", "lambdas_wide", "finetune_lambdas_small", "finetune_lambdas_wide")


@dataclass(frozen=True)
class CurvatureConfig:
    """Settings of the curvature stage (config `curvature:`)."""

    OTHER_KEYS: ClassVar[dict[str, str]] = {
        "enabled": "whether the study runs the stage",
        "threads": "job threads (cannot change a number)",
    }

    # Gaussian direction: a fine grid near 0 (the quadratic regime) and a wide one (γ of the sweep)
    lambdas_small: tuple[float, ...] = (-0.2, -0.1, -0.05, -0.02, 0.0, 0.02, 0.05, 0.1, 0.2)
    lambdas_wide: tuple[float, ...] = (-6.0, -4.0, -3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0, 6.0)
    # fine-tuning direction θ_ft − θ_pre (λ = 1: the fine-tuned model)
    finetune_lambdas_small: tuple[float, ...] = field(
        default=(-0.02, -0.01, 0.0, 0.01, 0.02), metadata=FINETUNE_ONLY
    )
    finetune_lambdas_wide: tuple[float, ...] = field(
        default=(-1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0), metadata=FINETUNE_ONLY
    )
    seeds: tuple[int, ...] | None = None  # Gaussian directions; None: perturb.seeds (the same ε as γ·ε there)
    probes: int = 8  # Hutchinson Rademacher probes (per trace)
    power_iters: int = 8  # power-iteration steps for the top eigenvalue
    max_tokens: int = field(default=512, metadata=SHARED)  # held-out tokens (whole documents)
    batch_size: int = field(default=16, metadata=SHARED)  # windows per forward/backward
    dtype: str = field(
        default="float64", metadata=SHARED
    )  # of the lines (small-λ differences); sharpness: float32

    # the empirical NTK on this many training examples of each fine-tuning task (0: not computed)
    ntk_examples: int = field(default=0, metadata=NTK_ONLY)
    # σ of κ(K + σI) and of the kernel-ridge residual, as multiples of tr K / n
    ntk_sigma_scales: tuple[float, ...] = field(default=(1e-4, 1e-2, 1.0), metadata=NTK_ONLY)
    # per-example gradients held at once (GiB): the kernel is computed in blocks of parameter groups
    ntk_block_gib: float = field(default=2.0, metadata=meta(NEITHER, ntk=True, gaussian=False))

    def __post_init__(self) -> None:
        if self.ntk_examples < 0 or self.ntk_examples == 1:
            raise ValueError(f"curvature.ntk_examples: need 0 (off) or >= 2, got {self.ntk_examples}")
        if not self.ntk_sigma_scales or min(self.ntk_sigma_scales) <= 0:
            raise ValueError(
                f"curvature.ntk_sigma_scales: need positive values, got {list(self.ntk_sigma_scales)}"
            )
        for name in GRIDS:
            grid = [float(x) for x in getattr(self, name)]
            if not grid or not all(math.isfinite(x) for x in grid) or len(set(grid)) != len(grid):
                raise ValueError(f"curvature.{name}: need distinct finite values, got {grid}")
            if 0.0 not in grid:
                raise ValueError(
                    f"curvature.{name}: a λ grid must contain 0 (the unperturbed model, where the "
                    f"quadratic is expanded), got {grid}"
                )
            if len(grid) < 2:
                raise ValueError(f"curvature.{name}: need a value besides 0, got {grid}")
        if self.probes < 2 or self.power_iters < 1 or self.max_tokens < 1 or self.batch_size < 1:
            raise ValueError("curvature.probes must be >= 2; power_iters, max_tokens, batch_size >= 1")
        if self.dtype not in DTYPES:
            raise ValueError(f"curvature.dtype: {self.dtype!r} is unknown; expected one of {DTYPES}")

    def grids(self, kind: str) -> dict[str, list[float]]:
        """{"small": [...], "wide": [...]} of a direction kind (gaussian | finetune), sorted."""
        prefix = "" if kind == "gaussian" else "finetune_"
        return {g: sorted(map(float, getattr(self, f"{prefix}lambdas_{g}"))) for g in ("small", "wide")}
