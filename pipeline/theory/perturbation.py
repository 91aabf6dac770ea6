"""Gaussian perturbation (4.2, A.2): perturbed loss in closed form and by Monte Carlo; Prop. 4.3, Thm. 4.4."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pipeline.theory.spectra import Array


def perturbed_loss_closed_form(W1: Array, W2: Array, A: Array, gammas: Array) -> Array:
    """E‖(W₁ + α)(W₂ + β) − A‖²_F for α, β with i.i.d. N(0, γ²) entries, for each γ (last axis).

    Expanding, every cross term has zero mean (α, β independent, zero mean), and
    E‖αW₂‖² = dγ²‖W₂‖², E‖W₁β‖² = dγ²‖W₁‖², E‖αβ‖² = d³γ⁴ (each of the d² entries of αβ is a sum
    of d products with variance γ⁴). So E = ‖W₁W₂ − A‖² + dγ²(‖W₁‖² + ‖W₂‖²) + d³γ⁴.
    """
    d = W1.shape[-1]
    g2 = np.asarray(gammas, dtype=np.float64) ** 2
    base = np.sum((W1 @ W2 - A) ** 2, axis=(-2, -1))[..., None]
    norms = (np.sum(W1**2, axis=(-2, -1)) + np.sum(W2**2, axis=(-2, -1)))[..., None]
    return base + d * g2 * norms + d**3 * g2**2


def perturbed_loss_mc(
    W1: Array, W2: Array, A: Array, gammas: Array, Z1: Array, Z2: Array
) -> tuple[Array, Array]:
    """Monte Carlo estimate (mean, standard error) of the perturbed loss with α = γZ₁, β = γZ₂.

    W1, W2, A: (..., d, d); Z1, Z2: (S, d, d) standard normal, shared by every θ and γ (common
    random numbers: differences across n and γ are much less noisy than the losses). Uses the exact
    expansion ‖E₀ + γP + γ²Q‖² with E₀ = W₁W₂ − A, P = Z₁W₂ + W₁Z₂, Q = Z₁Z₂, so all γ cost one pass.
    Returns arrays of shape (..., G).
    """
    E0 = (W1 @ W2 - A)[..., None, :, :]  # (..., 1, d, d)
    P = Z1 @ W2[..., None, :, :] + W1[..., None, :, :] @ Z2  # (..., S, d, d)
    Q = Z1 @ Z2  # (S, d, d)
    ip = lambda x, y: np.sum(x * y, axis=(-2, -1))  # noqa: E731
    c0, c1, c2 = ip(E0, E0), 2 * ip(E0, P), ip(P, P) + 2 * ip(E0, Q)
    c3, c4 = 2 * ip(P, Q), ip(Q, Q)  # (..., S)
    g = np.asarray(gammas, dtype=np.float64)
    samples = sum(c[..., None] * g**p for p, c in enumerate((c0, c1, c2, c3, c4)))  # (..., S, G)
    S = samples.shape[-2]
    return samples.mean(axis=-2), samples.std(axis=-2, ddof=1) / np.sqrt(S)


def prop43_increment(sigma: Array, gammas: Array) -> Array:
    """Proposition 4.3 / Lemma A.4: L̃(t_n) − L̃(t_{n−1}) ≥ (2dγ² − σ_n)σ_n, equal for the ideal init.

    Returns (G, d).
    """
    d = len(sigma)
    g2 = np.asarray(gammas, dtype=np.float64)[:, None] ** 2
    return (2 * d * g2 - sigma[None, :]) * sigma[None, :]


def inflection_point(losses: Array) -> tuple[Array, Array]:
    """Definition 4.2 along the last axis (n = 1..d): the smallest r with L(r) < L(r+1).

    Returns (r, found); where the loss never increases, r = d and found = False.
    """
    up = np.diff(losses, axis=-1) > 0
    found = up.any(axis=-1)
    r = np.where(found, np.argmax(up, axis=-1) + 1, losses.shape[-1])
    return r, found


def predicted_perturbation_inflection(sigma: Array, gammas: Array) -> tuple[Array, Array]:
    """Theorem 4.4 via Prop. 4.3: the loss rises at the first n with 2dγ² > σ_n (the paper's "inflection").

    Returns (n_first, r): n_first is that smallest n (d + 1 if none), and r the corresponding
    Definition-4.2 index (the last feature worth learning): r = max(n_first − 1, 1), or d if none.
    """
    d = len(sigma)
    g2 = np.asarray(gammas, dtype=np.float64)[:, None] ** 2
    over = 2 * d * g2 > sigma[None, :]
    n_first = np.where(over.any(axis=1), np.argmax(over, axis=1) + 1, d + 1)
    r = np.where(n_first <= d, np.maximum(n_first - 1, 1), d)
    return n_first, r
