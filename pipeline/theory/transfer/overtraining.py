"""Why catastrophic overtraining needs depth: the pre-training loss after fine-tuning, one layer vs two.

Setting: the main paper's Section 4 (pipeline/theory/stage.py): A_pre = U Σ_pre Vᵀ, A_ft = U Σ_ft Vᵀ,
x ~ N(0, I_d), a start point θ₀ = θ(t) of the two-layer pre-training trajectory, and the pre-training
loss after fine-tuning, L_pre(θ_ft) = ‖θ_ft − A_pre‖²_F.

One layer (θ trained directly), fine-tuned by gradient descent on m < d fixed samples X ∈ ℝ^{d×m} to
convergence: the gradient (θX − A_ftX)Xᵀ never touches θP⊥ (P∥ = X(XᵀX)⁻¹Xᵀ, P⊥ = I − P∥), so
θ_ft = θ₀P⊥ + A_ftP∥, the two parts of θ_ft − A_pre are Frobenius-orthogonal, and with E P∥ = (m/d)I

    E L_pre(θ_ft) = (1 − m/d) L_pre(θ₀) + (m/d) ‖A_ft − A_pre‖²          (exact, any θ₀)

a fixed mixture: along any pre-training run that lowers L_pre it can only fall. With K steps of
the population gradient instead, θ_K = qθ₀ + (1 − q)A_ft with q = (1 − 2η)^K and L_pre(θ_K) =
‖q(θ₀ − A_pre) + (1 − q)(A_ft − A_pre)‖², which can rise with pre-training, but only through terms of
order q (it has forgotten θ₀ up to q). The two-layer network keeps the memory: features not yet
learned stay near zero through fine-tuning (main paper, Thm 4.6-4.7), which is what the stage shows.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from pipeline.theory.spectra import Array, mT

log = logging.getLogger(__name__)


def converged_one_layer_loss(pretrain_loss: Array, task_distance2: Array, m: int, d: int) -> Array:
    """Exact E L_pre after one-layer fine-tuning to convergence on m < d samples:
    (1 − m/d) L₀ + (m/d) ‖A_ft − A_pre‖²."""
    return (1.0 - m / d) * np.asarray(pretrain_loss) + (m / d) * np.asarray(task_distance2)


def population_one_layer_loss(theta0: Array, A_pre: Array, A_ft: Array, eta: float, steps: int) -> Array:
    """L_pre after K one-layer steps of the population gradient from θ₀ (exact, deterministic)."""
    q = (1.0 - 2.0 * eta) ** steps
    E = q * (theta0 - A_pre) + (1.0 - q) * (A_ft - A_pre)
    return np.sum(E * E, axis=(-2, -1))


def converged_one_layer_samples(theta0: Array, A_pre: Array, A_ft: Array, X: Array) -> Array:
    """Per-draw L_pre(θ₀P⊥ + A_ftP∥) for samples X (S, I, d, m), start points θ₀ (S, N, d, d): (S, I, N)."""
    P = X @ np.linalg.solve(mT(X) @ X, mT(X))  # (S, I, d, d): P∥
    E0 = (theta0 - A_pre[:, None])[:, None]  # (S, 1, N, d, d)
    Eft = (A_ft - A_pre)[:, None, None]  # (S, 1, 1, d, d)
    E = E0 - E0 @ P[:, :, None] + Eft @ P[:, :, None]
    return np.sum(E * E, axis=(-2, -1))


def converged_two_layer(
    W1: Array,
    W2: Array,
    A_ft: Array,
    X: Array,
    eta: float,
    tol: float,
    max_steps: int,
    check_every: int = 250,
) -> tuple[Array, int]:
    """Full-batch GD of θ = W₁W₂ on (1/m)‖θX − A_ftX‖²_F from each (W₁, W₂) until every training loss < tol.

    W1, W2: (B, d, d) start points, A_ft: (B, d, d), X: (B, d, m). Runs that have converged leave the
    batch (their iterates are final), so the cost follows the slow ones: directions a start point has
    not learned grow from its e^{−τ}-small init before the loss can reach zero. A run that turns
    non-finite, or has not converged by max_steps, is an error. Returns (θ (B, d, d), steps).
    """
    B, m = len(W1), X.shape[-1]
    S = X @ mT(X) / m
    theta = np.empty_like(W1)
    active = np.arange(B)
    V1, V2, Sa, Aa = W1.copy(), W2.copy(), S, A_ft
    t0 = time.perf_counter()
    for step in range(1, max_steps + 1):
        G = 2.0 * (V1 @ V2 - Aa) @ Sa
        V1, V2 = V1 - eta * G @ mT(V2), V2 - eta * mT(V1) @ G
        if step % check_every == 0 or step == max_steps:
            E = V1 @ V2 - Aa
            loss = np.einsum("bij,bjk,bik->b", E, Sa, E)
            if not np.all(np.isfinite(loss)):
                raise FloatingPointError(
                    "theory.transfer.overtraining.learning_rate: two-layer fine-tuning diverged "
                    f"at step {step}"
                )
            done = loss < tol
            theta[active[done]] = (V1 @ V2)[done]
            active, V1, V2, Sa, Aa = active[~done], V1[~done], V2[~done], Sa[~done], Aa[~done]
            if not len(active):
                break
    else:
        raise RuntimeError(
            f"theory.transfer.overtraining.max_steps: {len(active)}/{B} two-layer fine-tuning runs not "
            f"converged (training loss < {tol:g}) after {max_steps} steps"
        )
    log.info(
        "two-layer fine-tuning to convergence: %d runs, %d steps in %.2fs", B, step, time.perf_counter() - t0
    )
    return theta, step
