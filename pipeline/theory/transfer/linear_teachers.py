"""Closed forms of "A Theoretical Analysis of Fine-tuning with Linear Teachers" (Shachaf, Brutzkus,
Globerson, NeurIPS 2021, arXiv:2107.01641), for n < d target samples x ~ N(0, Σ).

* Thm 4.1 (depth 1): fine-tuning from θ_S converges to P⊥θ_S + P∥θ_T, risk ‖Σ^{1/2}P⊥(θ_T − θ_S)‖²;
  for Σ = I its expectation is exactly (1 − n/d)‖θ_T − θ_S‖² (`finetune_risk`), for an anisotropic Σ
  `interpolation_bias_asymptotic` gives the deterministic equivalent (an n, d → ∞ limit).
* Thm 5.2 (depth L, 0-balanced start): β∞ = (‖β∞‖/‖θ_S‖)^{(L−1)/L} P⊥θ_S + P∥θ_T, an implicit equation
  in ‖β∞‖ solved per draw by `limit_point` (L = ∞: eq. 6). With label noise the proof goes through
  with P∥θ_T replaced by the interpolated X⁺y (gradient flow still interpolates when n < d); the
  features-are-fate fine-tuning of depth ≥ 2 uses that form.
* Thm 5.5 (first layer(s) frozen): the model stays c⟨x, θ_S⟩; with c fitted on the sample the
  expected risk is exact, ρ² sin²θ + (ρ² sin²θ + σ²)/(n − 2) (`frozen_risk`: features-are-fate
  Thm 3.7 with a target of norm ρ).
* `deep_finetune_risk_asymptotic`: Thm 5.2 with the norms replaced by their concentrated values, the
  n, d → ∞ limit at fixed n/d of E R for any depth (exact at depth 1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pipeline.theory.transfer.design_moments import inverse_chi2_mean, inverse_wishart_trace, null_fraction

if TYPE_CHECKING:
    from pipeline.theory.spectra import Array


def _coefficient(a2: Array, b2: Array, s2: Array, depth: float) -> Array:
    """The factor c = (‖β∞‖/‖θ_S‖)^{(L−1)/L} of Thm 5.2 from A = ‖P⊥θ_S‖², B = ‖P∥ part‖², s² = ‖θ_S‖².

    With x = c^{2/(L−1)}, ‖β∞‖² = c²A + B reads s²x^L − A x^{L−1} − B = 0, which has exactly one
    positive root (one sign change); it lies in (0, A/s² + (B/s²)^{1/L}] and is found by bisection
    (vectorised, to machine precision). L = 1: c = 1. L = ∞: c = √(B/(s² − A)) (eq. 6).
    """
    a2, b2, s2 = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (a2, b2, s2)))
    if depth == 1:
        return np.ones_like(a2)
    if np.isinf(depth):
        return np.sqrt(b2 / (s2 - a2))
    L = int(depth)
    lo, hi = np.zeros_like(a2), a2 / s2 + (b2 / s2) ** (1.0 / L)
    with np.errstate(over="ignore", divide="ignore"):
        for _ in range(200):  # the sign of f/x^{L−1} = s²x − A − B x^{1−L} (increasing in x, no overflow)
            mid = 0.5 * (lo + hi)
            f = s2 * mid - a2 - b2 * mid ** (1.0 - L)
            lo, hi = np.where(f < 0, mid, lo), np.where(f < 0, hi, mid)
    return (0.5 * (lo + hi)) ** ((L - 1) / 2)


def limit_point(perp_source: Array, fit: Array, source_norm: Array | float, depth: float) -> Array:
    """Thm 5.2's β∞ = c P⊥θ_S + P∥-fit per draw: perp_source = P⊥θ_S (B, d), fit = X⁺y (B, d)."""
    c = _coefficient(
        np.sum(perp_source**2, axis=-1), np.sum(fit**2, axis=-1), np.asarray(source_norm) ** 2, depth
    )
    return c[..., None] * perp_source + fit


def finetune_risk(
    n: Array | float, d: int, theta: float, sigma: float, target_norm: float = 1.0, source_norm: float = 1.0
) -> Array:
    """Exact E R of depth-1 fine-tuning (Thm 4.1, Σ = I, with label noise):
    (1 − n/d)‖θ_T − θ_S‖² + σ² n/(d − n − 1)."""
    dist2 = target_norm**2 + source_norm**2 - 2 * target_norm * source_norm * np.cos(theta)
    noise = sigma**2 * inverse_wishart_trace(n, d) if sigma > 0 else 0.0
    return null_fraction(n, d) * dist2 + noise


def scratch_risk(n: Array | float, d: int, sigma: float, target_norm: float = 1.0) -> Array:
    """Exact E‖X⁺y − θ_T‖² (the α → 0 limit of training from the small init, any depth)."""
    noise = sigma**2 * inverse_wishart_trace(n, d) if sigma > 0 else 0.0
    return null_fraction(n, d) * target_norm**2 + noise


def frozen_risk(n: Array | float, theta: float, sigma: float, target_norm: float = 1.0) -> Array:
    """Thm 5.5's model c⟨x, θ_S⟩ with c the least-squares fit: exactly ρ²sin²θ + (ρ²sin²θ + σ²)/(n − 2)."""
    s2 = target_norm**2 * np.sin(theta) ** 2
    return s2 + (s2 + sigma**2) * inverse_chi2_mean(n)


def deep_finetune_risk_asymptotic(
    n: Array | float,
    d: int,
    theta: float,
    sigma: float,
    depth: float,
    target_norm: float = 1.0,
    source_norm: float = 1.0,
) -> Array:
    """E R of Thm 5.2's β∞ with ‖P⊥θ_S‖², ‖X⁺y‖² and P⊥θ_S·P⊥θ_T at their concentrated values
    (1 − n/d)s², (n/d)ρ² + σ²n/(d − n − 1), (1 − n/d)sρ cos θ: the n, d → ∞ limit at fixed n/d,
    (1 − n/d)(c²s² − 2cρs cos θ + ρ²) + σ²n/(d − n − 1). Exact at depth 1 (c = 1)."""
    frac = null_fraction(n, d)
    noise = sigma**2 * inverse_wishart_trace(n, d) if sigma > 0 else np.zeros_like(frac)
    s2 = source_norm**2
    c = _coefficient(frac * s2, (1 - frac) * target_norm**2 + noise, s2, depth)
    rho, s = target_norm, source_norm
    return frac * (c * c * s2 - 2 * c * rho * s * np.cos(theta) + rho * rho) + noise


def deep_finetune_boundary(n: Array | float, d: int, sigma: float, depth: float) -> Array:
    """The angle where depth-L fine-tuning stops beating scratch (unit teachers, concentrated norms):
    T = E R_sc − E R = (1 − n/d)(2c cos θ − c²) vanishes at cos θ = c/2, so θ* = arccos(c/2) (NaN if c > 2).
    Depth 1 (c = 1) gives features-are-fate's π/3; label noise makes c > 1 at depth ≥ 2 and θ* < π/3."""
    frac = null_fraction(n, d)
    noise = sigma**2 * inverse_wishart_trace(n, d) if sigma > 0 else np.zeros_like(frac)
    c = _coefficient(frac, (1 - frac) + noise, 1.0, depth)
    with np.errstate(invalid="ignore"):
        return np.arccos(c / 2)


def interpolation_bias_asymptotic(eigenvalues: Array, delta: Array, n: int) -> float:
    """Deterministic equivalent of E‖Σ^{1/2}P⊥Δ‖² (depth-1 fine-tuning risk, rows x ~ N(0, Σ), n < d):

    κ² Σ_i λ_iΔ_i²/(λ_i + κ)² / (1 − (1/n) Σ_i λ_i²/(λ_i + κ)²), κ > 0 solving Σ_i λ_i/(λ_i + κ) = n
    (the ridgeless bias of Hastie, Montanari, Rosset, Tibshirani 2022, arXiv:1903.08560, with the
    pre-trained θ_S as the origin); an n, d → ∞ limit, exact in expectation for Σ = I.
    """
    lam = np.asarray(eigenvalues, dtype=np.float64)
    lo, hi = 0.0, float(lam.max()) * len(lam) / n
    for _ in range(200):  # Σ λ/(λ + κ) decreases in κ from d to 0: bisection
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if np.sum(lam / (lam + mid)) > n else (lo, mid)
    k = 0.5 * (lo + hi)
    num = k * k * np.sum(lam * delta**2 / (lam + k) ** 2)
    return float(num / (1.0 - np.sum(lam**2 / (lam + k) ** 2) / n))
