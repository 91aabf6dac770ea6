"""Depth-1 (and frozen-feature) transfer simulated by linear algebra on fixed Gaussian samples.

The fitted models of the features-are-fate methods are linear in the labels y = Xβ_t + σε₀, so one
draw of (X, ε₀) gives every method's risk at every (θ, σ, λ) through a few inner products (common
random numbers across the grid: differences between methods and neighbouring grid points are far
less noisy than the risks). By the rotation invariance of X's law the source is β_s = e₁ and the
target β_t = cos θ e₁ + sin θ e₂ without loss of generality. With P = X⁺X:

* scratch X⁺y − β_t = cos θ a + sin θ b + σ q,   a = (P − I)e₁, b = (P − I)e₂, q = X⁺ε₀;
* depth-1 fine-tuning P⊥β_s + X⁺y − β_t = −(1 − cos θ) a + sin θ b + σ q;
* (ridge) linear transfer β̂ = b β_s with b = zᵀy/(‖z‖² + nλ), z = Xe₁: needs ‖z‖², zᵀXe₂, zᵀε₀.

`lt_alignment_risk` is the linear-teachers counterpart: ‖Σ^{1/2}P⊥Δ‖² for rows x ~ N(0, Σ).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.theory.spectra import Array, mT


def pinv_apply(X: Array, V: Array) -> Array:
    """X⁺V for a batch of full-rank X (..., n, d) and V (..., n, k), through the smaller Gram matrix."""
    n, d = X.shape[-2:]
    if n <= d:
        return mT(X) @ np.linalg.solve(X @ mT(X), V)
    return np.linalg.solve(mT(X) @ X, mT(X) @ V)


@dataclass
class FeatureDraws:
    """Sufficient statistics of `instances` draws of (X ∈ ℝ^{n×d}, ε₀ ∈ ℝⁿ) for the methods above."""

    n: int
    d: int
    gram: Array  # (I, 3, 3): Gram matrix of a, b, q
    zz: Array  # (I,) ‖Xe₁‖²
    zw: Array  # (I,) (Xe₁)ᵀ(Xe₂)
    ze: Array  # (I,) (Xe₁)ᵀε₀


def draw_features(n: int, d: int, instances: int, rng: np.random.Generator) -> FeatureDraws:
    """Draw X and ε₀ and reduce them to the statistics every method needs (one batched solve)."""
    X = rng.standard_normal((instances, n, d))
    eps = rng.standard_normal((instances, n))
    rhs = np.stack([X[:, :, 0], X[:, :, 1], eps], axis=-1)  # (I, n, 3): Xe₁, Xe₂, ε₀
    sol = pinv_apply(X, rhs)  # (I, d, 3): Pe₁, Pe₂, X⁺ε₀
    sol[:, 0, 0] -= 1.0
    sol[:, 1, 1] -= 1.0
    if n >= d:  # P = I exactly: drop the roundoff
        sol[:, :, :2] = 0.0
    z, w = X[:, :, 0], X[:, :, 1]
    return FeatureDraws(
        n=n,
        d=d,
        gram=mT(sol) @ sol,
        zz=np.sum(z * z, axis=1),
        zw=np.sum(z * w, axis=1),
        ze=np.sum(z * eps, axis=1),
    )


def _quadratic(gram: Array, coef: Array) -> Array:
    """coefᵀ G coef for G (I, 3, 3) and coefficients (..., 3) broadcast to (I, ...)."""
    return np.einsum("...i,Iij,...j->I...", coef, gram, coef)


def _coefficients(theta: Array, sigma: Array, first: Array) -> Array:
    """(T, S, 3) coefficient vectors (first(θ), sin θ, σ)."""
    T, S = len(theta), len(sigma)
    out = np.empty((T, S, 3))
    out[..., 0] = first[:, None]
    out[..., 1] = np.sin(theta)[:, None]
    out[..., 2] = sigma[None, :]
    return out


def scratch_risks(draws: FeatureDraws, theta: Array, sigma: Array) -> Array:
    """Per-draw ‖X⁺y − β_t‖², shape (I, T, S)."""
    return _quadratic(draws.gram, _coefficients(theta, sigma, np.cos(theta)))


def finetune_risks(draws: FeatureDraws, theta: Array, sigma: Array) -> Array:
    """Per-draw ‖P⊥β_s + X⁺y − β_t‖² (depth-1 fine-tuning to convergence), shape (I, T, S)."""
    return _quadratic(draws.gram, _coefficients(theta, sigma, -(1.0 - np.cos(theta))))


def ridge_transfer_risks(draws: FeatureDraws, theta: Array, sigma: Array, ridge: float = 0.0) -> Array:
    """Per-draw risk of ridge linear transfer, (b − cos θ)² + sin²θ, (I, T, S); λ = 0: linear transfer."""
    c, s = np.cos(theta)[None, :, None], np.sin(theta)[None, :, None]
    zz, zw, ze = (v[:, None, None] for v in (draws.zz, draws.zw, draws.ze))
    coef = (c * zz + s * zw + sigma[None, None, :] * ze) / (zz + draws.n * ridge)
    return (coef - c) ** 2 + s**2


def lt_alignment_risk(
    n: int, eigenvalues: Array, delta: Array, instances: int, rng: np.random.Generator
) -> Array:
    """Per-draw ‖Σ^{1/2}P⊥Δ‖² (linear teachers Thm 4.1) for rows x ~ N(0, diag(eigenvalues)), shape (I,).

    Depth-1 fine-tuning from θ_S on noiseless labels Xθ_T converges to P⊥θ_S + P∥θ_T, whose risk
    depends on Δ = θ_T − θ_S only through its null-space part.
    """
    d = len(eigenvalues)
    X = rng.standard_normal((instances, n, d)) * np.sqrt(eigenvalues)
    perp = delta - pinv_apply(X, (X @ delta)[..., None])[..., 0]
    return np.sum(eigenvalues * perp**2, axis=-1)
