"""Spectra and fixed matrices of the two-layer linear setting: σ₁ > … > σ_d, U, V, U Σ_{:n} Vᵀ, ideal init."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

Array = np.ndarray
SPECTRUM_KINDS = ("geometric", "power", "values")


def mT(x: Array) -> Array:
    """Transpose of the last two axes (batched matrices)."""
    return np.swapaxes(x, -1, -2)


def validate_spectrum(sigma: Iterable[float], name: str = "spectrum") -> Array:
    """Singular values must be finite, > 0 and strictly decreasing (the theorems assume it)."""
    s = np.asarray(list(sigma), dtype=np.float64)
    if s.ndim != 1 or s.size < 2:
        raise ValueError(f"{name}: need a 1-D spectrum with d >= 2 values, got shape {s.shape}")
    if not np.all(np.isfinite(s)):
        raise ValueError(f"{name}: spectrum has non-finite values {s.tolist()}")
    if np.any(s <= 0):
        raise ValueError(f"{name}: singular values must be > 0, got {s.tolist()}")
    if np.any(np.diff(s) >= 0):
        raise ValueError(f"{name}: singular values must be strictly decreasing, got {s.tolist()}")
    return s


def make_spectrum(spec: Mapping[str, Any], d: int, name: str = "spectrum") -> Array:
    """σ₁ > … > σ_d from a spec.

    {kind: geometric, top, ratio} | {kind: power, top, exponent} | {kind: values, values}.
    """
    if d < 2:
        raise ValueError(f"{name}: d must be >= 2, got {d}")
    kind = spec.get("kind")
    i = np.arange(d, dtype=np.float64)
    if kind == "geometric":
        ratio = float(spec["ratio"])
        if not 0.0 < ratio < 1.0:
            raise ValueError(f"{name}: geometric ratio must be in (0, 1), got {ratio}")
        s = float(spec.get("top", 1.0)) * ratio**i
    elif kind == "power":
        exponent = float(spec["exponent"])
        if exponent <= 0:
            raise ValueError(f"{name}: power exponent must be > 0, got {exponent}")
        s = float(spec.get("top", 1.0)) * (i + 1.0) ** (-exponent)
    elif kind == "values":
        s = np.asarray(spec["values"], dtype=np.float64)
        if s.shape != (d,):
            raise ValueError(f"{name}: {s.size} values given for d = {d}")
    else:
        raise ValueError(f"{name}: unknown spectrum kind {kind!r}; expected one of {SPECTRUM_KINDS}")
    return validate_spectrum(s, name)


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
