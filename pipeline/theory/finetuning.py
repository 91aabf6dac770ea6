"""Fine-tuning (4.3, A.3-A.5): mini-batch GD from θ(t_n), Lemma A.7's closed form and its K → ∞ limit."""

from __future__ import annotations

import logging
import time

import numpy as np

from pipeline.theory.spectra import Array, mT

log = logging.getLogger(__name__)


def finetune_gd(
    W1: Array,
    W2: Array,
    A_ft: Array,
    lambdas: Array,
    eta: float,
    steps: int,
    batch_size: int | None,
    rngs: list[np.random.Generator],
    blowup: float = 1e6,
) -> tuple[Array, Array, Array]:
    """Mini-batch GD of eqs. (10)-(11) on Tr((θ − A_ft)ᵀ(θ − A_ft)Σ_k) + λ‖θ − θ(0)‖²_F.

    W1, W2: (S, N, d, d) start points (seeds × pre-training lengths); lambdas: (L,). Each step draws
    one batch x₁..x_m ~ N(0, I) per seed from rngs[s], Σ_k = (1/m)Σ xxᵀ, shared by every n and λ of that seed
    (the "same data order" of A.3). batch_size None = population gradient (Σ_k = I).
    The W₂ gradient is 2W₁ᵀ(θ − A)Σ_k (eq. (11) prints Σ_k on the other side; equal when Σ_k = I).
    Runs whose ‖θ‖_F exceeds `blowup` × (1 + ‖A_ft‖_F) or turn non-finite are marked diverged and
    frozen at NaN. Returns (W1, W2, diverged) with shapes (S, N, L, d, d) and (S, N, L).
    """
    S, N, d, _ = W1.shape
    lam = np.asarray(lambdas, dtype=np.float64)[None, None, :, None, None]
    W1 = np.broadcast_to(W1[:, :, None], (S, N, lam.shape[2], d, d)).copy()
    W2 = np.broadcast_to(W2[:, :, None], W1.shape).copy()
    theta0 = W1 @ W2
    A = np.broadcast_to(A_ft, (d, d)) if A_ft.ndim == 2 else A_ft
    limit = blowup * (1.0 + np.sqrt(np.sum(np.asarray(A) ** 2)))
    diverged = np.zeros(W1.shape[:3], dtype=bool)
    eye = np.eye(d)
    t0, report = time.perf_counter(), max(1, steps // 4)
    with np.errstate(over="ignore", invalid="ignore"):
        for k in range(steps):
            if batch_size is None:
                C = eye
            else:
                X = np.stack([rng.standard_normal((d, batch_size)) for rng in rngs])
                C = (X @ mT(X) / batch_size)[:, None, None]  # (S, 1, 1, d, d)
            theta = W1 @ W2
            G = 2.0 * ((theta - A) @ C + lam * (theta - theta0))  # ∂L/∂θ
            W1, W2 = W1 - eta * G @ mT(W2), W2 - eta * mT(W1) @ G
            norm = np.sqrt(np.sum((W1 @ W2) ** 2, axis=(-2, -1)))
            bad = ~np.isfinite(norm) | (norm > limit)
            if bad.any():
                diverged |= bad
                W1[bad], W2[bad] = np.nan, np.nan
            if (k + 1) % report == 0:
                el = time.perf_counter() - t0
                eta_s = el / (k + 1) * (steps - k - 1)
                log.info(
                    "fine-tuning: step %d/%d (%.0f steps/s, ETA %.1fs), %d/%d runs diverged",
                    k + 1,
                    steps,
                    (k + 1) / el,
                    eta_s,
                    diverged.sum(),
                    diverged.size,
                )
    return W1, W2, diverged


def finetune_closed_form(
    sigma_pre: Array, sigma_ft: Array, n_values: Array, lambdas: Array, eta: float, steps: int
) -> tuple[Array, Array]:
    """Lemma A.7: from the ideal init with the population gradient the dynamics stay diagonal,
    W₁ = U diag(x), W₂ = diag(x) Vᵀ, with x_i ← x_i − 2ηx_i(x_i² − σ_ft,i) − 2ηλx_i(x_i² − σ_pre,i)
    for learned features i ≤ n and x_i = 0 otherwise (f of eq. (18); its λ-term carries the factor x
    as in A.6). Returns (s = x² of shape (N, L, d), diverged (N, L)).
    """
    d = len(sigma_pre)
    learned = np.arange(d)[None, :] < np.asarray(n_values)[:, None]  # (N, d)
    anchor = np.where(learned, sigma_pre, 0.0)[:, None, :]  # (N, 1, d)
    x = np.sqrt(anchor) * np.ones((1, len(lambdas), 1))
    lam = np.asarray(lambdas, dtype=np.float64)[None, :, None]
    with np.errstate(over="ignore", invalid="ignore"):
        for _ in range(steps):
            x = x - 2 * eta * x * (x**2 - sigma_ft) - 2 * eta * lam * x * (x**2 - anchor)
            x = np.where(np.abs(x) > 1e6, np.nan, x)
    s = x**2
    return s, ~np.all(np.isfinite(s), axis=-1)


def fixed_point_pre_loss(sigma_pre: Array, sigma_ft: Array, lambdas: Array) -> Array:
    """K → ∞ limit of Theorem A.24's proof: feature i ≤ n settles at (σ_ft,i + λσ_pre,i)/(1 + λ), so
    L_pre(n) = Σ_{i≤n} ((σ_ft,i − σ_pre,i)/(1 + λ))² + Σ_{i>n} σ_pre,i². Returns (L, d) over n = 1..d."""
    lam = np.asarray(lambdas, dtype=np.float64)[:, None]
    moved = np.cumsum(((sigma_ft - sigma_pre)[None, :] / (1 + lam)) ** 2, axis=1)
    rest = np.concatenate([np.cumsum(sigma_pre[::-1] ** 2)[::-1][1:], [0.0]])
    return moved + rest[None, :]
