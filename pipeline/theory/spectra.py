"""Spectra and fixed matrices of the two-layer linear setting: σ₁ > … > σ_d, U, V, U Σ_{:n} Vᵀ, ideal init."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pipeline.theory.config import spectrum_formula, spectrum_values

Array = np.ndarray


def mT(x: Array) -> Array:
    """Transpose of the last two axes (batched matrices)."""
    return np.swapaxes(x, -1, -2)


def make_spectrum(spec: Mapping[str, Any], d: int, name: str = "spectrum") -> Array:
    """σ₁ > … > σ_d from a spec as a float64 array: checked by config.spectrum_values (the kinds,
    their errors), computed by config.spectrum_formula with numpy's powers: the values the stage has
    always run on (Python's `**` can differ in the last bit, which the flow from e^-τ amplifies)."""
    spectrum_values(spec, d, name)
    if spec["kind"] == "values":
        return np.asarray(spec["values"], dtype=np.float64)
    return spectrum_formula(spec, np.arange(d, dtype=np.float64))


def misalignment_r(sigma_pre: Array, sigma_ft: Array, alpha: float) -> int:
    """Smallest r such that the tasks are (α, r)-misaligned (Def. 4.5): σ_ft,i > α σ_pre,i for all i > r."""
    ok = sigma_ft > alpha * sigma_pre
    r = len(sigma_pre)
    while r > 0 and ok[r - 1]:
        r -= 1
    return r


def random_orthogonal(d: int, rng: np.random.Generator) -> Array:
    """Haar-random orthogonal matrix (QR of a Gaussian matrix with the sign fix)."""
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))


def low_rank_target(U: Array, sigma: Array, V: Array, n: int) -> Array:
    """U Σ_{:n} Vᵀ: the best rank-n approximation, i.e. what θ(t_n) should be (Theorem 4.1)."""
    s = np.where(np.arange(len(sigma)) < n, sigma, 0.0)
    return (U * s) @ V.T


def ideal_init(U: Array, sigma: Array, V: Array, n_values: Array) -> tuple[Array, Array]:
    """Eqs. (7)-(8): W̄₁ = U Σ_{:n}^{1/2}, W̄₂ = Σ_{:n}^{1/2} Vᵀ, stacked over n -> (N, d, d) each."""
    d = len(sigma)
    root = np.sqrt(sigma)[None, :] * (np.arange(d)[None, :] < np.asarray(n_values)[:, None])  # (N, d)
    return U[None] * root[:, None, :], root[:, :, None] * V.T[None]
