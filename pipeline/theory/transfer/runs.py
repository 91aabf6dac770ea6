"""What the transfer experiments share: seeded streams, teachers, gradient-descent runs, row blocks.

Every simulation draws from np.random.default_rng([theory.transfer.seed, stream, ...]) with its own
stream per experiment and grid point, so adding a grid point changes no other number. The source
teacher is θ_S = e₁ and the target ρ(cos θ e₁ + sin θ e₂): the law of a Gaussian design is
rotation invariant, so this is no loss of generality.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.theory.transfer.deep_linear import (
    Chain,
    balanced_init,
    gradient_descent,
    population_grad,
    sample_grad,
)
from pipeline.theory.transfer.one_layer import pinv_apply
from pipeline.theory.transfer.table import block, mean_se

if TYPE_CHECKING:
    import pandas as pd

    from pipeline.theory.spectra import Array

FAF, LT, BRIDGE = "features_are_fate", "linear_teachers", "bridge"


def rng(seed: int, *stream: int) -> np.random.Generator:
    return np.random.default_rng([seed, *stream])


def unit(d: int, i: int = 0) -> Array:
    e = np.zeros(d)
    e[i] = 1.0
    return e


def target(d: int, theta: Array | float, norm: Array | float = 1.0) -> Array:
    """θ_T = ρ(cos θ e₁ + sin θ e₂) for the source θ_S = e₁, shape (..., d)."""
    th, rho = np.asarray(theta, dtype=np.float64), np.asarray(norm, dtype=np.float64)
    out = np.zeros((*np.broadcast_shapes(th.shape, rho.shape), d))
    out[..., 0], out[..., 1] = rho * np.cos(th), rho * np.sin(th)
    return out


def sim_rows(samples: Array, **cols: object) -> pd.DataFrame:
    """Simulation rows: mean and standard error over the first axis (the draws) of `samples`."""
    m, se = mean_se(samples)
    return block(estimator="simulation", risk=m, risk_se=se, instances=samples.shape[0], **cols)


def cf_rows(risk: Array | float, limit: str, formula: str, **cols: object) -> pd.DataFrame:
    """Closed-form rows: `limit` exact (at this finite n, d) or asymptotic (n, d → ∞), `formula` cites it."""
    return block(estimator="closed_form", risk=risk, limit=limit, formula=formula, **cols)


def design_step(lr: float, n: int, d: int) -> float:
    """GD step for samples X ∈ ℝ^{n×d}: lr/(1 + √(d/n))², i.e. lr in units of 1/λ_edge, the top of the
    Marchenko-Pastur bulk of XᵀX/n (the fine-tuning loss's curvature scale; small n makes it large)."""
    return lr / (1.0 + np.sqrt(d / n)) ** 2


def pretrain(
    d: int, depth: int, batch: int, eta: float, gd: Mapping[str, Any], gen: np.random.Generator, key: str
) -> Chain:
    """Depth-L networks pre-trained by GD from the small balanced init on the population source loss
    ‖β − e₁‖², at step min(pretrain_step_ratio·η, 1/(2L)) (the loss's curvature at the end is ~2L)."""
    init = balanced_init(batch, d, depth, gd["init_scale"], gen)
    if depth == 1:
        return Chain(np.tile(unit(d), (batch, 1)), np.zeros((batch, 0)))
    eta_pre = min(eta * gd["pretrain_step_ratio"], 1.0 / (2 * depth))
    res = gradient_descent(
        init,
        population_grad(unit(d)),
        eta_pre,
        gd["tolerance"],
        gd["max_steps"],
        name=f"{key} pre-training",
        lr_key=key,
    )
    return res.chain


def finetune(
    pre: Chain, X: Array, y: Array, eta: float, gd: Mapping[str, Any], key: str, train_first: bool = True
) -> tuple[Array, int]:
    """GD of the pre-trained chains (tiled to the batch of X) on (1/n)‖Xβ − y‖² until converged: (β, steps).
    train_first = False: the first layer stays frozen."""
    reps = len(X) // len(pre.a)
    start = Chain(np.tile(pre.a, (reps, 1)), np.tile(pre.s, (reps, 1)))
    res = gradient_descent(
        start, sample_grad(X, y), eta, gd["tolerance"], gd["max_steps"], train_first, name=key, lr_key=key
    )
    return res.chain.beta, res.steps


def projections(X: Array, y: Array, source: Array) -> tuple[Array, Array]:
    """(P⊥θ_S, X⁺y) per draw: the two parts of Thm 5.2's limit point (linear teachers)."""
    fit = pinv_apply(X, y[..., None])[..., 0]
    perp = source - pinv_apply(X, (X @ source)[..., None])[..., 0]
    return perp, fit
