"""Exact moments of a Gaussian design X ∈ ℝ^{n×d} (i.i.d. N(0, 1) entries) that the transfer risks need.

Every closed form of the transfer stage reduces to three facts, exact at finite n and d:

* row(X) is a Haar-uniform min(n, d)-dimensional subspace, so E P∥ = (min(n, d)/d) I for the
  projector onto it (P⊥ = I − P∥);
* E tr (XXᵀ)⁻¹ = n/(d − n − 1) for n ≤ d − 2 and E tr (XᵀX)⁻¹ = d/(n − d − 1) for n ≥ d + 2
  (the mean of an inverse Wishart matrix); at |n − d| ≤ 1 it is infinite, the min-norm
  interpolator's noise term blows up (the "double descent" peak);
* ‖Xβ‖² ~ χ²_n for a unit β, E 1/χ²_n = 1/(n − 2) (n ≥ 3), and any other expectation over χ²_n is
  one integral against its density, done here by adaptive quadrature (exact to ~1e-12).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from scipy import integrate, special

if TYPE_CHECKING:
    from pipeline.theory.spectra import Array


def null_fraction(n: Array | float, d: int) -> Array:
    """E‖P⊥v‖²/‖v‖² = 1 − min(n, d)/d for any fixed v (P⊥: projector onto the null space of X)."""
    return 1.0 - np.minimum(np.asarray(n, dtype=np.float64), d) / d


def inverse_wishart_trace(n: Array | float, d: int) -> Array:
    """E tr (XᵀX)⁺ = E‖X⁺ε‖² for a standard normal ε: min(n, d)/(|n − d| − 1); inf where |n − d| ≤ 1."""
    n = np.asarray(n, dtype=np.float64)
    gap = np.abs(n - d) - 1.0
    with np.errstate(divide="ignore"):
        return np.where(gap > 0, np.minimum(n, d) / np.where(gap > 0, gap, 1.0), np.inf)


def inverse_chi2_mean(n: Array | float) -> Array:
    """E 1/χ²_n = 1/(n − 2) for n ≥ 3 (inf otherwise)."""
    n = np.asarray(n, dtype=np.float64)
    return np.where(n > 2, 1.0 / np.where(n > 2, n - 2.0, 1.0), np.inf)


def chi2_expectation(f, n: int) -> float:
    """E f(r) for r ~ χ²_n, by quadrature of f against the χ²_n density (f smooth on (0, ∞))."""
    log_norm = -(n / 2) * np.log(2.0) - special.gammaln(n / 2)

    def integrand(r: float) -> float:
        return f(r) * np.exp(log_norm + (n / 2 - 1) * np.log(r) - r / 2) if r > 0 else 0.0

    # the density's mass sits around r = n ± a few √(2n); split there so quad sees the bulk
    mid = float(n)
    lo, _ = integrate.quad(integrand, 0.0, mid, epsabs=0.0, epsrel=1e-12, limit=200)
    hi, _ = integrate.quad(integrand, mid, np.inf, epsabs=0.0, epsrel=1e-12, limit=200)
    return lo + hi
