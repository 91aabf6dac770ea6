"""Closed forms of "Features are fate" (Tahir, Ganguli, Rotskoff, arXiv:2410.08194), Section 3.

Setting: x ~ N(0, I_d), unit teachers β_s, β_t with β_sᵀβ_t = cos θ, target labels y = β_tᵀx + ε,
ε ~ N(0, σ²), n target samples, γ = n/d; risk R = ‖β̂ − β_t‖² (the excess test risk). Pre-training
on the population source loss from a small balanced init leaves rank-one features Φ = β_s vᵀ
(their Thm 3.4). Methods:

* scratch: the min-norm least-squares fit X⁺y (their Thm 3.5: gradient flow from α → 0);
* linear transfer: the head trained on the frozen features, β̂ = (zᵀy/‖z‖²) β_s with z = Xβ_s;
* ridge transfer: the same with (λ/2)‖W_L‖², β̂ = (zᵀy/(‖z‖² + nλ)) β_s (their eq. 126);
* fine-tuning at depth 1: gradient descent from β_s to convergence, β̂ = P⊥β_s + X⁺y.

Each has an exact finite-(n, d) expectation (the `*_risk` functions, via design_moments) next to
the paper's n, d → ∞ limit at fixed γ (the `*_asymptotic` functions, eqs. 10, 12, 13, 15-17). The
paper's Thm 3.7 is already exact (E 1/‖z‖² = 1/(n − 2)); eq. 10 and Thm 3.9 are the limits of the
exact forms here; Thm 3.8 is an n → ∞ limit, and at any finite n its risk is not increasing in λ
(see `ridge_transfer_risk`). Thm 3.9 is exact for depth 1; for depth ≥ 2 the fine-tuned model
is the limit point of "Fine-tuning with linear teachers" Thm 5.2 instead (pipeline/theory/
linear_teachers.py), which rescales the P⊥β_s part.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pipeline.theory.transfer.design_moments import (
    chi2_expectation,
    inverse_chi2_mean,
    inverse_wishart_trace,
    null_fraction,
)

if TYPE_CHECKING:
    from pipeline.theory.spectra import Array


def scratch_risk(n: Array | float, d: int, sigma: Array | float) -> Array:
    """Exact E‖X⁺y − β_t‖² = (1 − min(n,d)/d)·‖β_t‖² + σ² E tr (XᵀX)⁺ (inf at |n − d| ≤ 1 when σ > 0)."""
    noise = np.where(np.asarray(sigma) > 0, np.asarray(sigma, dtype=np.float64) ** 2, 0.0)
    with np.errstate(invalid="ignore"):
        var = np.where(noise > 0, noise * inverse_wishart_trace(n, d), 0.0)
    return null_fraction(n, d) + var


def scratch_risk_asymptotic(gamma: Array | float, sigma: Array | float) -> Array:
    """Eq. (10) / Thm 3.6: ((1 − γ)² + γσ²)/(1 − γ) for γ < 1, σ²/(γ − 1) for γ > 1."""
    g, s2 = np.asarray(gamma, dtype=np.float64), np.asarray(sigma, dtype=np.float64) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(g < 1, ((1 - g) ** 2 + g * s2) / (1 - g), s2 / (g - 1))


def linear_transfer_risk(n: Array | float, theta: Array | float, sigma: Array | float) -> Array:
    """Thm 3.7, exact for n ≥ 3: sin²θ + (sin²θ + σ²)/(n − 2), whatever d (conditional on z = Xβ_s
    the fitted coefficient is cos θ + N(0, (sin²θ + σ²)/‖z‖²), and E 1/‖z‖² = 1/(n − 2))."""
    s2 = np.sin(np.asarray(theta, dtype=np.float64)) ** 2
    return s2 + (s2 + np.asarray(sigma, dtype=np.float64) ** 2) * inverse_chi2_mean(n)


def linear_transfer_risk_asymptotic(theta: Array | float) -> Array:
    """The n → ∞ limit of Thm 3.7, used by eq. (13): sin²θ."""
    return np.sin(np.asarray(theta, dtype=np.float64)) ** 2


def ridge_transfer_risk(n: int, theta: float, sigma: float, ridge: float) -> float:
    """Exact E R of ridge linear transfer (their eq. 128 before the large-n saddle point):

    with r = ‖z‖² ~ χ²_n, b − cos θ = (√r ξ − nλ cos θ)/(r + nλ), ξ ~ N(0, sin²θ + σ²) independent of r,
    E R = sin²θ + cos²θ (nλ)² E (r + nλ)⁻² + (sin²θ + σ²) E r (r + nλ)⁻².
    Its derivative in λ at λ = 0 is −2n(sin²θ + σ²) E r⁻² < 0: at finite n some ridge always helps
    (unless θ = σ = 0), unlike the n → ∞ limit of Thm 3.8, which is increasing in λ.
    """
    c2, s2 = np.cos(theta) ** 2, np.sin(theta) ** 2
    u = n * ridge
    if u == 0:
        return float(linear_transfer_risk(n, theta, sigma))
    bias = chi2_expectation(lambda r: u * u / (r + u) ** 2, n)
    var = chi2_expectation(lambda r: r / (r + u) ** 2, n)
    return float(s2 + c2 * bias + (s2 + sigma**2) * var)


def ridge_transfer_risk_asymptotic(theta: Array | float, ridge: Array | float) -> Array:
    """Thm 3.8 (n → ∞): 1 − cos²θ (1 + 2λ)/(1 + λ)²."""
    lam = np.asarray(ridge, dtype=np.float64)
    return 1.0 - np.cos(np.asarray(theta, dtype=np.float64)) ** 2 * (1 + 2 * lam) / (1 + lam) ** 2


def finetune_risk(n: Array | float, d: int, theta: Array | float, sigma: Array | float) -> Array:
    """Exact E R of depth-1 fine-tuning, β̂ = P⊥β_s + X⁺y: (1 − n/d)‖β_s − β_t‖² + σ² E tr (XᵀX)⁺;
    for n > d it is the scratch risk (P⊥ = 0)."""
    dist2 = 2.0 - 2.0 * np.cos(np.asarray(theta, dtype=np.float64))
    return scratch_risk(n, d, sigma) + null_fraction(n, d) * (dist2 - 1.0)


def finetune_risk_asymptotic(gamma: Array | float, theta: Array | float, sigma: Array | float) -> Array:
    """Eq. (16) / Thm 3.9: E R_sc + (1 − γ)(1 − 2 cos θ) for γ ≤ 1, E R_sc for γ > 1."""
    g = np.asarray(gamma, dtype=np.float64)
    shift = np.where(g < 1, (1 - g) * (1 - 2 * np.cos(np.asarray(theta, dtype=np.float64))), 0.0)
    return scratch_risk_asymptotic(g, sigma) + shift


def negative_transfer_interval(theta: Array | float, sigma: Array | float) -> tuple[Array, Array]:
    """Eq. (13), γ < 1: linear transfer hurts for γ ∈ (γ₋, γ₊), γ± = ½[(1 + cos²θ − σ²) ± √(… − 4cos²θ)];
    NaN where the interval is empty (θ ≤ arccos(1 − σ), which includes every σ ≥ 1)."""
    c2 = np.cos(np.asarray(theta, dtype=np.float64)) ** 2
    b = 1 + c2 - np.asarray(sigma, dtype=np.float64) ** 2
    disc = b * b - 4 * c2
    ok = (disc >= 0) & (b > 0)
    root = np.sqrt(np.where(ok, disc, 0.0))
    return np.where(ok, (b - root) / 2, np.nan), np.where(ok, (b + root) / 2, np.nan)


def linear_transfer_boundary_sigma(gamma: Array | float, theta: Array | float) -> Array:
    """Eq. (13) solved for the noise at which T_lt = 0: transfer hurts for σ below it.

    γ > 1: σ² = (γ − 1) sin²θ; γ < 1: σ² = (1 − γ)(sin²θ − (1 − γ))/γ (NaN where T_lt > 0 at σ = 0).
    """
    g = np.asarray(gamma, dtype=np.float64)
    s2 = np.sin(np.asarray(theta, dtype=np.float64)) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        sig2 = np.where(g > 1, (g - 1) * s2, (1 - g) * (s2 - (1 - g)) / g)
    return np.where(sig2 >= 0, np.sqrt(np.maximum(sig2, 0.0)), np.nan)


def linear_transfer_boundary_sigma_exact(n: Array | float, d: int, theta: Array | float) -> Array:
    """The exact finite-(n, d) counterpart: E R_sc = E R_lt is linear in σ², solved for σ (NaN if none)."""
    s2 = np.sin(np.asarray(theta, dtype=np.float64)) ** 2
    k_sc, k_lt = inverse_wishart_trace(n, d), inverse_chi2_mean(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        sig2 = (s2 * (1 + k_lt) - null_fraction(n, d)) / (k_sc - k_lt)
    return np.where(sig2 >= 0, np.sqrt(np.maximum(sig2, 0.0)), np.nan)


def kl_divergence(theta: Array | float, sigma: Array | float) -> Array:
    """D_KL(p_s ‖ p_t) = ‖β_s − β_t‖²/(2σ²) = (1 − cos θ)/σ² (their App. B.1), inf at σ = 0."""
    s2 = np.asarray(sigma, dtype=np.float64) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        return (1 - np.cos(np.asarray(theta, dtype=np.float64))) / s2
