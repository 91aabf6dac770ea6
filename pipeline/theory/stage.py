"""Theory track: two-layer linear networks that reproduce Section 4 / Appendix A numerically.

Setting (paper, Section 4.1). θ = W₁W₂ with W₁, W₂ ∈ ℝ^{d×d}, x ~ N(0, I), population loss
L_pre(θ) = ‖θ − A_pre‖²_F with A_pre = U Σ_pre Vᵀ. Pre-training is gradient flow from the small
initialisation W₁(0) = W₂(0) = e^{−τ} I, integrated with fixed-step RK4 on the full matrices.
The model learns the singular values ("features") one at a time; the feature-learning times
t₁ < … < t_d are read off the trajectory as the plateaus of the loss (minima of ‖∇L‖² between
consecutive learning events), and θ(t_n) is compared with the rank-n target U Σ_{:n} Vᵀ.

Post-training modifications of θ(t_n), n = 1..d:
  * Gaussian perturbation (4.2, A.2): (W₁ + α)(W₂ + β), α, β i.i.d. N(0, γ²). Expected loss in
    closed form, E = ‖W₁W₂ − A‖² + dγ²(‖W₁‖² + ‖W₂‖²) + d³γ⁴, and by Monte Carlo; increments vs
    Proposition 4.3's (2dγ² − σ_n)σ_n; the inflection (Definition 4.2) vs Theorem 4.4.
  * Fine-tuning (4.3, A.3-A.5): mini-batch GD on ‖θ − A_ft‖² (estimated from m samples x) plus
    λ‖θ − θ(t_n)‖², A_ft = U Σ_ft Vᵀ, compared with the closed-form ideal-initialisation,
    population-gradient dynamics of Lemma A.7; Δ_pre (Theorem 4.6), the pre-training loss after
    fine-tuning (Theorem 4.7.1) and the λ sweep (Theorem 4.7.2).

Everything is float64 numpy, vectorised over spectra, seeds, n, γ and λ with batch dimensions;
the only Python loops are over time steps (an ODE / GD is sequential) and over output rows.
`run_theory(cfg, study)` runs the whole stage and returns the tidy metrics rows;
`plot_theory(df, figures_dir)` draws its four figures. docs/theory.md states the claims,
their assumptions and the tolerances the tests use.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.signal import find_peaks

from pipeline.tables import metric_row, metrics_frame
from pipeline.workflow.figures import figure_names

log = logging.getLogger(__name__)

Array = np.ndarray
SPECTRUM_KINDS = ("geometric", "power", "values")


# ----------------------------------------------------------------------------- spectra


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
    """σ₁ > … > σ_d from a spec: {kind: geometric, top, ratio} | {kind: power, top, exponent} | {kind: values, values}."""
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


# ----------------------------------------------------------------------------- pre-training


def _mT(x: Array) -> Array:
    return np.swapaxes(x, -1, -2)


def _flow(W1: Array, W2: Array, A: Array) -> tuple[Array, Array, Array]:
    """Gradient-flow velocity, eqs. (5)-(6): Ẇ₁ = −2(θ − A)W₂ᵀ, Ẇ₂ = −2W₁ᵀ(θ − A); also θ − A."""
    E = W1 @ W2 - A
    return -2.0 * E @ _mT(W2), -2.0 * _mT(W1) @ E, E


def _rk4(W1: Array, W2: Array, A: Array, dt: float) -> tuple[Array, Array, Array, Array]:
    """One classical RK4 step; also returns L_pre and ‖∇L‖² (= −dL/dt) at the start of the step."""
    a1, b1, E = _flow(W1, W2, A)
    a2, b2, _ = _flow(W1 + 0.5 * dt * a1, W2 + 0.5 * dt * b1, A)
    a3, b3, _ = _flow(W1 + 0.5 * dt * a2, W2 + 0.5 * dt * b2, A)
    a4, b4, _ = _flow(W1 + dt * a3, W2 + dt * b3, A)
    W1n = W1 + dt / 6.0 * (a1 + 2 * a2 + 2 * a3 + a4)
    W2n = W2 + dt / 6.0 * (b1 + 2 * b2 + 2 * b3 + b4)
    loss = np.sum(E * E, axis=(-2, -1))
    gnorm2 = np.sum(a1 * a1, axis=(-2, -1)) + np.sum(b1 * b1, axis=(-2, -1))
    return W1n, W2n, loss, gnorm2


def logistic_feature(sigma: Array, tau: float, t: Array) -> Array:
    """Exact decoupled solution when U = V: s(t) = σ / (1 + (σ/s₀ − 1) e^{−4σt}), s₀ = e^{−2τ}.

    With W₁(0) = W₂(0) = e^{−τ}I and a symmetric target the flow stays diagonal in the U basis and
    each singular value follows ṡ = 4s(σ − s). Used to check the integrator.
    """
    t = np.asarray(t, dtype=np.float64)[..., None]
    log_ratio = np.log(sigma) + 2.0 * tau  # log(σ / s₀)
    # σ / (1 + (σ/s₀ − 1) e^{−4σt}), written to avoid overflow of σ/s₀ for large τ
    z = np.log(np.expm1(log_ratio)) - 4.0 * sigma * t
    return sigma * np.exp(-np.logaddexp(0.0, z))


def detect_feature_times(gnorm2: Array, d: int, prominence: float = 1.0) -> Array | None:
    """Step indices of the d plateaus of one gradient-flow trajectory, or None if not yet resolved.

    Each feature is learned in a burst: ‖∇L‖² = −dL/dt has one peak per feature (found on log ‖∇L‖²
    with the given prominence, in nats). t_n for n < d is the flattest point (minimum of ‖∇L‖²)
    between peaks n and n+1: the saddle near U Σ_{:n} Vᵀ. t_d is the first time after the last peak
    at which ‖∇L‖² has fallen below its value at t_{d−1} (as converged as the previous plateau).
    ‖∇L‖² is floored at 1e-24 × its maximum so roundoff noise after convergence makes no peaks.
    """
    logg = np.log(np.maximum(gnorm2, 1e-24 * gnorm2.max()))
    peaks, _ = find_peaks(logg, prominence=prominence)
    if len(peaks) > d:
        raise RuntimeError(
            f"found {len(peaks)} learning events for d = {d}: the trajectory is not incremental"
        )
    if len(peaks) < d:
        return None
    idx = [int(peaks[n] + np.argmin(gnorm2[peaks[n] : peaks[n + 1]])) for n in range(d - 1)]
    below = np.nonzero(gnorm2[peaks[-1] :] <= gnorm2[idx[-1]])[0]
    if len(below) == 0:
        return None
    idx.append(int(peaks[-1] + below[0]))
    return np.asarray(idx)


@dataclass
class PretrainResult:
    """Gradient-flow pre-training of B targets, snapshotted at the detected feature-learning times."""

    times: Array  # (B, d) t_1 < ... < t_d
    W1: Array  # (B, d, d, d): W1[b, n-1] = W₁(t_n)
    W2: Array  # (B, d, d, d)
    loss_curve: Array  # (T, B) L_pre on the step grid
    dt: float
    snapshots: tuple[
        Array, Array, Array
    ]  # (step indices (S,), W1 (S, B, d, d), W2 (S, B, d, d)), every `stride` steps

    @property
    def theta(self) -> Array:
        return self.W1 @ self.W2


def pretrain_gradient_flow(
    A: Array,
    d: int,
    tau: float,
    dt: float,
    max_time: float,
    chunk_steps: int = 5000,
    stride: int = 20,
    prominence: float = 1.0,
) -> PretrainResult:
    """Integrate eqs. (5)-(6) from W₁ = W₂ = e^{−τ}I for a batch of targets A (B, d, d) until every
    trajectory has shown its d learning events, then return W₁, W₂ at t_1..t_d.

    The horizon is not assumed: integration continues chunk by chunk until detection succeeds, or
    fails with an error at `max_time` (features too close for this τ: increase τ or the gap).
    """
    B = A.shape[0]
    W1 = np.broadcast_to(np.exp(-tau) * np.eye(d), (B, d, d)).copy()
    W2 = W1.copy()
    loss, gn2, snap_steps, snap1, snap2 = [], [], [], [], []
    found: list[Array | None] = [None] * B
    step, t0 = 0, time.perf_counter()
    max_steps = int(math.ceil(max_time / dt))
    while True:
        for _ in range(chunk_steps):
            if step % stride == 0:
                snap_steps.append(step)
                snap1.append(W1)
                snap2.append(W2)
            W1, W2, l, g = _rk4(W1, W2, A, dt)
            loss.append(l)
            gn2.append(g)
            step += 1
        if not (np.all(np.isfinite(W1)) and np.all(np.isfinite(W2))):
            raise FloatingPointError(
                f"theory.dt: gradient flow blew up at t = {step * dt:g}; dt = {dt} is too large"
            )
        g = np.asarray(gn2)
        found = [
            found[b] if found[b] is not None else detect_feature_times(g[:, b], d, prominence)
            for b in range(B)
        ]
        n_done = sum(f is not None for f in found)
        rate = step / (time.perf_counter() - t0)
        log.info(
            "gradient flow: t = %.1f (%d steps, %.0f steps/s), %d/%d trajectories resolved",
            step * dt,
            step,
            rate,
            n_done,
            B,
        )
        if n_done == B:
            break
        stalled = [b for b in range(B) if found[b] is None and g[-1, b] < 1e-24 * g[:, b].max()]
        if step >= max_steps or stalled:
            raise RuntimeError(
                f"theory.max_time: only {n_done}/{B} trajectories showed {d} separate learning events by t = {step * dt:g}; "
                f"the spectrum gaps are too small for tau = {tau} (increase tau or the gaps) or max_time is too short"
            )
    idx = np.stack(found)  # (B, d)
    snap_steps_a = np.asarray(snap_steps)
    S1, S2 = np.stack(snap1), np.stack(snap2)
    # Re-integrate from the last snapshot before each t_n to land exactly on the step grid.
    k = idx // stride  # snapshot index (B, d)
    offset = idx - snap_steps_a[k]
    bidx = np.arange(B)[:, None]
    V1, V2 = S1[k, bidx], S2[k, bidx]  # (B, d, d, d)
    Ab = A[:, None]
    for i in range(stride):
        active = (offset > i)[..., None, None]
        if not active.any():
            break
        N1, N2, _, _ = _rk4(V1, V2, Ab, dt)
        V1, V2 = np.where(active, N1, V1), np.where(active, N2, V2)
    return PretrainResult(
        times=idx * dt, W1=V1, W2=V2, loss_curve=np.asarray(loss), dt=dt, snapshots=(snap_steps_a, S1, S2)
    )


# ----------------------------------------------------------------------------- Gaussian perturbation


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
    """Proposition 4.3 / Lemma A.4: L̃(t_n) − L̃(t_{n−1}) ≥ (2dγ² − σ_n)σ_n (equality for the ideal init). (G, d)."""
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


# ----------------------------------------------------------------------------- fine-tuning


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
                C = (X @ _mT(X) / batch_size)[:, None, None]  # (S, 1, 1, d, d)
            theta = W1 @ W2
            G = 2.0 * ((theta - A) @ C + lam * (theta - theta0))  # ∂L/∂θ
            W1, W2 = W1 - eta * G @ _mT(W2), W2 - eta * _mT(W1) @ G
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


# ----------------------------------------------------------------------------- config


def _require(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def validate_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Check the `theory` config section and build its spectra; errors name the offending key.

    Only problems that would make the numbers meaningless are errors (d < 2, a spectrum that is not
    positive and strictly decreasing, γ < 0, λ < 0, …). A learning rate outside Assumption A.8 is
    allowed (divergence is detected and recorded) but logged.
    """
    d = cfg.get("d")
    _require(
        isinstance(d, int) and not isinstance(d, bool) and d >= 2,
        f"theory.d: need an integer >= 2, got {d!r}",
    )
    tau, dt, max_time = float(cfg["tau"]), float(cfg["dt"]), float(cfg["max_time"])
    _require(tau > 0, f"theory.tau: need tau > 0 (small init e^-tau), got {tau}")
    _require(
        dt > 0 and max_time > dt,
        f"theory.dt / theory.max_time: need 0 < dt < max_time, got dt = {dt}, max_time = {max_time}",
    )
    seeds = list(cfg["seeds"])
    ok = len(seeds) > 0 and all(isinstance(s, int) and s >= 0 for s in seeds)
    _require(ok, f"theory.seeds: need a non-empty list of integers >= 0, got {seeds}")
    _require(len(set(seeds)) == len(seeds), f"theory.seeds: duplicates in {seeds}")
    spectra_cfg = cfg["spectra"]
    _require(len(spectra_cfg) > 0, "theory.spectra: need at least one pre-training spectrum")
    spectra = {name: make_spectrum(spec, d, f"theory.spectra.{name}") for name, spec in spectra_cfg.items()}
    top = max(float(s[0]) for s in spectra.values())
    # The flow's fastest rate is ~8σ₁ (Hessian at the learned top feature); RK4 needs dt·8σ₁ well inside its
    # stability region (2.8) to be accurate, the check of the logistic solution shows ~1e-4 at dt·8σ₁ = 0.8.
    _require(
        dt * 8 * top <= 1.0,
        f"theory.dt: dt = {dt} is too large for RK4 on a spectrum with sigma_1 = {top:g}; need dt <= {1 / (8 * top):.3g}",
    )

    pert = cfg["perturbation"]
    gammas = np.asarray(pert["gammas"], dtype=np.float64)
    _require(gammas.ndim == 1 and gammas.size > 0, "theory.perturbation.gammas: need a non-empty list")
    ok = bool(np.all(gammas >= 0)) and bool(np.all(np.isfinite(gammas)))
    _require(ok, f"theory.perturbation.gammas: gamma must be finite and >= 0, got {gammas.tolist()}")
    mc = int(pert["mc_samples"])
    _require(mc >= 2, f"theory.perturbation.mc_samples: need >= 2, got {mc}")

    ft = cfg["finetune"]
    lambdas = np.asarray(ft["lambdas"], dtype=np.float64)
    _require(lambdas.ndim == 1 and lambdas.size > 0, "theory.finetune.lambdas: need a non-empty list")
    ok = bool(np.all(lambdas >= 0)) and bool(np.all(np.isfinite(lambdas)))
    _require(ok, f"theory.finetune.lambdas: lambda must be finite and >= 0, got {lambdas.tolist()}")
    _require(
        bool(np.all(np.diff(lambdas) > 0)),
        f"theory.finetune.lambdas: need a strictly increasing list, got {lambdas.tolist()}",
    )
    eta, steps = float(ft["learning_rate"]), int(ft["steps"])
    _require(
        eta > 0 and math.isfinite(eta), f"theory.finetune.learning_rate: need a finite value > 0, got {eta}"
    )
    _require(steps >= 1, f"theory.finetune.steps: need >= 1, got {steps}")
    m = ft.get("batch_size")
    ok = m is None or (isinstance(m, int) and not isinstance(m, bool) and m >= 1)
    _require(ok, f"theory.finetune.batch_size: need an integer >= 1 or null (population gradient), got {m!r}")
    alpha = float(ft["alpha"])
    _require(alpha > 0, f"theory.finetune.alpha: need alpha > 0, got {alpha}")
    tasks = {}
    for name, task in ft["tasks"].items():
        pre = task["pretrain"]
        _require(
            pre in spectra,
            f"theory.finetune.tasks.{name}.pretrain: {pre!r} is not one of theory.spectra {list(spectra)}",
        )
        tasks[name] = {
            "pretrain": pre,
            "sigma_ft": make_spectrum(task["spectrum"], d, f"theory.finetune.tasks.{name}.spectrum"),
        }
        gamma_bound = max(float(spectra[pre][0]), float(tasks[name]["sigma_ft"][0]))  # Γ of eq. (12)
        a8 = 4 * eta * (float(lambdas.max()) + 2) * gamma_bound
        if a8 >= 1:
            log.warning(
                "theory.finetune: 4*eta*(lambda+2)*Gamma = %.3g >= 1 for task %s: Assumption A.8 fails, "
                "GD may diverge (detected and recorded)",
                a8,
                name,
            )
    return {
        "d": d,
        "tau": tau,
        "dt": dt,
        "max_time": max_time,
        "seeds": seeds,
        "spectra": spectra,
        "gammas": gammas,
        "mc_samples": mc,
        "lambdas": lambdas,
        "eta": eta,
        "steps": steps,
        "batch_size": m,
        "alpha": alpha,
        "tasks": tasks,
    }


# ----------------------------------------------------------------------------- the stage


def _rng(seed: int, stream: int) -> np.random.Generator:
    """Independent streams per seed: 0 = U, V; 1 = perturbation noise; 2 = fine-tuning batches."""
    return np.random.default_rng([seed, stream])


def singular_vectors(d: int, seed: int) -> tuple[Array, Array]:
    """The seed's random orthogonal U, V shared by A_pre and A_ft."""
    rng = _rng(seed, 0)
    return random_orthogonal(d, rng), random_orthogonal(d, rng)


@dataclass
class Pretrained:
    """Pre-training of every (spectrum p, seed r): targets, θ(t_n) factors and the ideal init (7)-(8)."""

    sigma: Array  # (P, d)
    U: Array  # (R, d, d)
    V: Array  # (R, d, d)
    A: Array  # (P, R, d, d)
    W1: Array  # (P, R, N, d, d), N = d pre-training lengths t_1..t_d
    W2: Array
    W1_ideal: Array
    W2_ideal: Array
    times: Array  # (P, R, N)
    integrator_error: Array  # (P,) max |s − logistic| / σ on the U = V references

    def loss(self, W1: Array, W2: Array) -> Array:
        return np.sum((W1 @ W2 - self.A[:, :, None]) ** 2, axis=(-2, -1))


def pretrain_stage(sigma: Array, seeds: list[int], tau: float, dt: float, max_time: float) -> Pretrained:
    """One batched gradient flow for all spectra × seeds, plus one U = V reference per spectrum."""
    P, d = sigma.shape
    R = len(seeds)
    U, V = map(np.stack, zip(*(singular_vectors(d, s) for s in seeds)))
    A = (U[None] * sigma[:, None, None, :]) @ _mT(V)[None]  # (P, R, d, d)
    A_ref = (U[0] * sigma[:, None, :]) @ U[0].T  # (P, d, d): symmetric targets, exact logistic solution
    res = pretrain_gradient_flow(np.concatenate([A.reshape(P * R, d, d), A_ref]), d, tau, dt, max_time)
    steps, S1, S2 = res.snapshots
    s_ref = np.diagonal(U[0].T @ (S1[:, P * R :] @ S2[:, P * R :]) @ U[0], axis1=-2, axis2=-1)  # (T, P, d)
    s_exact = np.stack([logistic_feature(sigma[p], tau, steps * dt) for p in range(P)], axis=1)
    n_values = np.arange(1, d + 1)
    ideal = [[ideal_init(U[r], sigma[p], V[r], n_values) for r in range(R)] for p in range(P)]
    return Pretrained(
        sigma=sigma,
        U=U,
        V=V,
        A=A,
        W1=res.W1[: P * R].reshape(P, R, d, d, d),
        W2=res.W2[: P * R].reshape(P, R, d, d, d),
        W1_ideal=np.array([[w[0] for w in row] for row in ideal]),
        W2_ideal=np.array([[w[1] for w in row] for row in ideal]),
        times=res.times[: P * R].reshape(P, R, d),
        integrator_error=np.max(np.abs(s_ref - s_exact) / sigma[None], axis=(0, 2)),
    )


def _pretrain_rows(
    pt: Pretrained, names: list[str], seeds: list[int], base: dict, tau: float, dt: float
) -> list[dict]:
    P, R, N = pt.times.shape
    loss_real, loss_ideal = pt.loss(pt.W1, pt.W2), pt.loss(pt.W1_ideal, pt.W2_ideal)
    target = pt.W1_ideal @ pt.W2_ideal  # U Σ_{:n} Vᵀ
    rank_dist = np.sqrt(np.sum((pt.W1 @ pt.W2 - target) ** 2, axis=(-2, -1))) / pt.sigma[:, None, :]
    rows = []
    for p, name in enumerate(names):
        c = dict(base, checkpoint=base["checkpoint"][name], modification="none", eval_data="theory_pre")
        rows.append(
            metric_row(
                **c,
                metric="integrator_error",
                value=float(pt.integrator_error[p]),
                extra={"tau": tau, "dt": dt, "reference": "U=V logistic solution"},
            )
        )
        for r, seed in enumerate(seeds):
            for j in range(N):
                cb = dict(c, seed=seed, budget=float(j + 1), budget_unit="feature_index")
                real = {"tau": tau, "init": "real"}
                rows += [
                    metric_row(**cb, metric="loss", value=float(loss_real[p, r, j]), extra=real),
                    metric_row(
                        **cb,
                        metric="loss",
                        value=float(loss_ideal[p, r, j]),
                        extra={"tau": tau, "init": "ideal"},
                    ),
                    metric_row(**cb, metric="feature_time", value=float(pt.times[p, r, j]), extra=real),
                    metric_row(
                        **cb,
                        metric="rank_n_distance",
                        value=float(rank_dist[p, r, j]),
                        extra=real | {"normalised_by": "sigma_n"},
                    ),
                ]
    return rows


def _perturbation_rows(
    pt: Pretrained, names: list[str], seeds: list[int], base: dict, tau: float, gammas: Array, mc_samples: int
) -> list[dict]:
    """Closed form on θ(t_n) and on the ideal init, Monte Carlo on θ(t_n); increments, Prop. 4.3, inflections."""
    P, R, N = pt.times.shape
    A_n = pt.A[:, :, None]
    curves = {
        ("closed_form", "real"): perturbed_loss_closed_form(pt.W1, pt.W2, A_n, gammas),  # (P, R, N, G)
        ("closed_form", "ideal"): perturbed_loss_closed_form(pt.W1_ideal, pt.W2_ideal, A_n, gammas),
    }
    mc, se = np.empty_like(curves[("closed_form", "real")]), np.empty_like(curves[("closed_form", "real")])
    for r, seed in enumerate(seeds):  # one noise draw per seed, shared by every spectrum, n and γ
        Z1, Z2 = _rng(seed, 1).standard_normal((2, mc_samples, N, N))
        mc[:, r], se[:, r] = perturbed_loss_mc(pt.W1[:, r], pt.W2[:, r], A_n[:, r], gammas, Z1, Z2)
    curves[("monte_carlo", "real")] = mc
    inflections = {key: inflection_point(np.moveaxis(v, -1, -2)) for key, v in curves.items()}  # (P, R, G)
    rows = []
    for p, name in enumerate(names):
        bound = prop43_increment(pt.sigma[p], gammas)  # (G, N)
        n_first, r_pred = predicted_perturbation_inflection(pt.sigma[p], gammas)
        for g, gamma in enumerate(gammas):
            c = dict(
                base,
                checkpoint=base["checkpoint"][name],
                modification="gaussian",
                gamma=float(gamma),
                eval_data="theory_pre",
            )
            margin = (
                float(np.min(np.abs(np.log(2 * N * gamma**2 / pt.sigma[p])))) if gamma > 0 else float("inf")
            )
            rows.append(
                metric_row(
                    **c,
                    metric="predicted_inflection_n",
                    value=float(r_pred[g]),
                    extra={
                        "tau": tau,
                        "first_increase_n": int(n_first[g]),
                        "found": bool(n_first[g] <= N),
                        "log_margin": margin,
                        "rule": "r = max(n*-1, 1), n* = min{n: 2 d gamma^2 > sigma_n}",
                    },
                )
            )
            for j in range(1, N):
                rows.append(
                    metric_row(
                        **c,
                        budget=float(j + 1),
                        budget_unit="feature_index",
                        metric="prop43_bound",
                        value=float(bound[g, j]),
                        extra={"tau": tau},
                    )
                )
            for r, seed in enumerate(seeds):
                for (est, init), v in curves.items():
                    ex = {"tau": tau, "estimator": est, "init": init} | (
                        {"samples": mc_samples} if est == "monte_carlo" else {}
                    )
                    rr, found = inflections[(est, init)]
                    rows.append(
                        metric_row(
                            **c,
                            seed=seed,
                            metric="inflection_n",
                            value=float(rr[p, r, g]),
                            extra=ex | {"found": bool(found[p, r, g])},
                        )
                    )
                    for j in range(N):
                        cb = dict(c, seed=seed, budget=float(j + 1), budget_unit="feature_index")
                        rows.append(metric_row(**cb, metric="loss", value=float(v[p, r, j, g]), extra=ex))
                        if est == "monte_carlo":
                            rows.append(
                                metric_row(**cb, metric="loss_stderr", value=float(se[p, r, j, g]), extra=ex)
                            )
                        if j > 0:
                            rows.append(
                                metric_row(
                                    **cb,
                                    metric="loss_increment",
                                    value=float(v[p, r, j, g] - v[p, r, j - 1, g]),
                                    extra=ex,
                                )
                            )
    return rows


def _finetune_rows(
    pt: Pretrained, p: int, task: str, s_ft: Array, c: dict, seeds: list[int], base: dict, ckpt: str
) -> list[dict]:
    """Mini-batch GD from θ(t_n) for every n, λ, seed next to Lemma A.7's closed form and the K → ∞ limit."""
    lambdas, eta, steps, m, alpha, tau = (
        c["lambdas"],
        c["eta"],
        c["steps"],
        c["batch_size"],
        c["alpha"],
        c["tau"],
    )
    s_pre, d = pt.sigma[p], len(s_ft)
    n_values = np.arange(1, d + 1)
    A_ft = (pt.U * s_ft[None, None, :]) @ _mT(pt.V)  # (R, d, d)
    r_mis = misalignment_r(s_pre, s_ft, alpha)
    log.info(
        "theory: fine-tuning %s ((%g, %d)-misaligned), K = %d, eta = %g, m = %s, lambdas %s",
        task,
        alpha,
        r_mis,
        steps,
        eta,
        m,
        lambdas.tolist(),
    )
    W1, W2, div = finetune_gd(
        pt.W1[p], pt.W2[p], A_ft[:, None, None], lambdas, eta, steps, m, [_rng(s, 2) for s in seeds]
    )
    theta = W1 @ W2  # (R, N, L, d, d)
    before = pt.loss(pt.W1, pt.W2)[p][:, :, None]
    l_pre = np.sum((theta - pt.A[p][:, None, None]) ** 2, axis=(-2, -1))  # (R, N, L)
    sim = {
        "loss": l_pre,
        "delta_pre": l_pre - before,
        "ft_loss": np.sum((theta - A_ft[:, None, None]) ** 2, axis=(-2, -1)),
    }
    s_cf, div_cf = finetune_closed_form(s_pre, s_ft, n_values, lambdas, eta, steps)  # (N, L, d), (N, L)
    l_pre_cf = np.sum((s_cf - s_pre) ** 2, axis=-1)
    before_cf = np.array([np.sum(s_pre[n:] ** 2) for n in n_values])[:, None]
    cf = {"loss": l_pre_cf, "delta_pre": l_pre_cf - before_cf, "ft_loss": np.sum((s_cf - s_ft) ** 2, axis=-1)}
    r_sim, found_sim = inflection_point(np.moveaxis(l_pre, 1, -1))  # (R, L)
    r_cf, found_cf = inflection_point(l_pre_cf.T)
    r_fp, found_fp = inflection_point(fixed_point_pre_loss(s_pre, s_ft, lambdas))
    log.info(
        "theory: %s: r(lambda) simulated %s, closed form %s; %d/%d runs diverged",
        task,
        r_sim.tolist(),
        r_cf.tolist(),
        int(div.sum()),
        div.size,
    )

    xt = {"tau": tau, "steps": steps, "batch_size": m, "alpha": alpha, "misalignment_r": r_mis}
    metrics = (
        ("loss", "theory_pre", "loss"),
        ("delta_pre", "theory_pre", "delta_pre"),
        ("ft_loss", "theory_ft", "loss"),
    )
    nan = float("nan")
    common = dict(base, checkpoint=ckpt, modification="sft", task=task, learning_rate=eta)
    rows = [
        metric_row(**common, eval_data="theory_ft", metric="misalignment_r", value=float(r_mis), extra=xt)
    ]
    for li, lam in enumerate(lambdas):
        cl = dict(common, lambda_reg=float(lam), eval_data="theory_pre")
        for est, rv, fv, dv in (
            ("closed_form", r_cf[li], found_cf[li], bool(div_cf[:, li].any())),
            ("fixed_point", r_fp[li], found_fp[li], False),
        ):
            rows.append(
                metric_row(
                    **cl,
                    metric="predicted_inflection_n",
                    value=nan if dv else float(rv),
                    diverged=dv,
                    extra=xt | {"estimator": est, "found": bool(fv)},
                )
            )
        for j, n in enumerate(n_values):
            dv = bool(div_cf[j, li])
            for key, ev, metric in metrics:
                rows.append(
                    metric_row(
                        **(cl | {"eval_data": ev}),
                        budget=float(n),
                        budget_unit="feature_index",
                        metric=metric,
                        diverged=dv,
                        value=nan if dv else float(cf[key][j, li]),
                        extra=xt | {"estimator": "closed_form", "init": "ideal"},
                    )
                )
        for r, seed in enumerate(seeds):
            dv = bool(div[r, :, li].any())
            rows.append(
                metric_row(
                    **cl,
                    seed=seed,
                    metric="inflection_n",
                    value=nan if dv else float(r_sim[r, li]),
                    diverged=dv,
                    extra=xt | {"estimator": "simulation", "found": bool(found_sim[r, li])},
                )
            )
            for j, n in enumerate(n_values):
                dv = bool(div[r, j, li])
                for key, ev, metric in metrics:
                    rows.append(
                        metric_row(
                            **(cl | {"eval_data": ev}),
                            seed=seed,
                            budget=float(n),
                            budget_unit="feature_index",
                            metric=metric,
                            diverged=dv,
                            value=nan if dv else float(sim[key][r, j, li]),
                            extra=xt | {"estimator": "simulation", "init": "real"},
                        )
                    )
    return rows


def run_theory(cfg: Mapping[str, Any], study: str) -> pd.DataFrame:
    """Run the whole theory stage from the `theory` config section; returns tidy metric rows.

    1. Pre-training: one gradient flow per spectrum and seed (random U, V), plus one U = V reference
       per spectrum whose exact logistic solution checks the integrator.
    2. Gaussian perturbation of θ(t_n) and of the ideal init (7)-(8) for every γ.
    3. Fine-tuning of θ(t_n) for every task, n, λ and seed, next to the Lemma A.7 closed form.
    """
    c = validate_config(cfg)
    d, tau, seeds, names = c["d"], c["tau"], c["seeds"], list(c["spectra"])
    t0 = time.perf_counter()
    base = dict(
        study=study,
        source="theory",
        model="two-layer-linear",
        split="population",
        checkpoint={k: f"linear-d{d}-{k}" for k in names},
    )
    log.info(
        "theory: pre-training %d spectra x %d seeds (+%d U=V references), d = %d, tau = %g",
        len(names),
        len(seeds),
        len(names),
        d,
        tau,
    )
    pt = pretrain_stage(np.stack([c["spectra"][k] for k in names]), seeds, tau, c["dt"], c["max_time"])
    errs = ", ".join(f"{e:.1e}" for e in pt.integrator_error)
    log.info(
        "theory: pre-training done in %.1fs; integrator error vs logistic %s", time.perf_counter() - t0, errs
    )
    rows = _pretrain_rows(pt, names, seeds, base, tau, c["dt"])
    t1 = time.perf_counter()
    rows += _perturbation_rows(pt, names, seeds, base, tau, c["gammas"], c["mc_samples"])
    log.info(
        "theory: perturbation (%d gammas, %d MC samples) done in %.1fs",
        len(c["gammas"]),
        c["mc_samples"],
        time.perf_counter() - t1,
    )
    for task, spec in c["tasks"].items():
        p = names.index(spec["pretrain"])
        rows += _finetune_rows(
            pt, p, task, spec["sigma_ft"], c, seeds, base, base["checkpoint"][spec["pretrain"]]
        )
    log.info("theory: stage done in %.1fs, %d rows", time.perf_counter() - t0, len(rows))
    return metrics_frame(rows)


# ----------------------------------------------------------------------------- figures

FIGURE_STEMS = figure_names("theory")  # the registry (pipeline/workflow/figures.py) declares them


def unpack_extra(df: pd.DataFrame) -> pd.DataFrame:
    """Unpack the JSON `extra` keys used for selection (estimator, init) into columns."""
    ex = df["extra"].map(lambda s: json.loads(s) if isinstance(s, str) else {})
    return df.assign(
        estimator=ex.map(lambda e: e.get("estimator", "")), init=ex.map(lambda e: e.get("init", ""))
    )


def _sel(df: pd.DataFrame, **eq: Any) -> pd.DataFrame:
    """Rows whose columns equal the given values."""
    mask = np.ones(len(df), dtype=bool)
    for col, val in eq.items():
        mask &= (df[col] == val).to_numpy()
    return df[mask]


def _spread(df: pd.DataFrame, by: str) -> pd.DataFrame:
    """mean, and distances to min / max (for error bars) of `value` per `by`."""
    a = df.groupby(by)["value"].agg(["mean", "min", "max"])
    return a.assign(lo=a["mean"] - a["min"], hi=a["max"] - a["mean"])


def plot_theory(
    df: pd.DataFrame, figures_dir: str | Path, formats: Iterable[str] = ("png", "pdf")
) -> list[Path]:
    """The four theory figures from the stage's rows (means over seeds; bars = min..max over seeds)."""
    import matplotlib.pyplot as plt

    from pipeline.analysis.style import save_figure, set_style

    set_style()
    figures_dir = Path(figures_dir)
    df = unpack_extra(df[df["source"] == "theory"])
    paths: list[Path] = []
    star = dict(marker="*", ms=13, mec="k", zorder=5)

    # 1. perturbed loss vs n per γ, predicted inflection marked
    g = df[df["modification"] == "gaussian"]
    ckpts = sorted(g["checkpoint"].unique())
    fig, axes = plt.subplots(1, len(ckpts), figsize=(5.2 * len(ckpts), 4.2), squeeze=False)
    for ax, ck in zip(axes[0], ckpts):
        gc = g[g["checkpoint"] == ck]
        gammas = sorted(gc["gamma"].unique())
        for col, gam in zip(plt.cm.viridis(np.linspace(0, 0.9, len(gammas))), gammas):
            cf = (
                _sel(gc, metric="loss", gamma=gam, estimator="closed_form", init="real")
                .groupby("budget")["value"]
                .mean()
            )
            mc = _spread(_sel(gc, metric="loss", gamma=gam, estimator="monte_carlo"), "budget")
            ax.plot(cf.index, cf.values, color=col, label=f"γ={gam:g}")
            ax.errorbar(mc.index, mc["mean"], yerr=[mc["lo"], mc["hi"]], fmt="o", ms=3, color=col, alpha=0.7)
            r = _sel(gc, metric="predicted_inflection_n", gamma=gam)["value"]
            if len(r) and r.iloc[0] in cf.index:
                ax.plot([r.iloc[0]], [cf.loc[r.iloc[0]]], color=col, **star)
        ax.set(
            yscale="log",
            xlabel="learned features n (pre-training time t_n)",
            ylabel="E L_pre after Gaussian perturbation",
            title=ck,
        )
    axes[0][-1].legend(
        fontsize=7, ncol=2, title="line: closed form, dots: MC\n★: predicted inflection", title_fontsize=7
    )
    paths += save_figure(fig, figures_dir / FIGURE_STEMS[0], formats)

    f = df[df["modification"] == "sft"]
    tasks = sorted(f["task"].dropna().unique())
    nt = max(len(tasks), 1)

    def lam_colors(lams: list[float]) -> Array:
        return plt.cm.plasma(np.linspace(0, 0.85, len(lams)))

    # 2. Δ_pre vs n per λ
    fig, axes = plt.subplots(1, nt, figsize=(5.4 * nt, 4.2), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        ft = _sel(f, task=task, metric="delta_pre")
        lams = sorted(ft["lambda_reg"].dropna().unique())
        for col, lam in zip(lam_colors(lams), lams):
            sim = _spread(_sel(ft, lambda_reg=lam, estimator="simulation"), "budget")
            cf = _sel(ft, lambda_reg=lam, estimator="closed_form").groupby("budget")["value"].mean()
            ax.plot(cf.index, cf.values, color=col, ls="--", lw=1)
            ax.errorbar(
                sim.index,
                sim["mean"],
                yerr=[sim["lo"], sim["hi"]],
                fmt="o-",
                ms=3,
                color=col,
                label=f"λ={lam:g}",
            )
        ax.set(
            yscale="log",
            xlabel="learned features n",
            ylabel="Δ_pre = L_pre(θ(t_n; K)) − L_pre(θ(t_n))",
            title=f"{task}: progressive sensitivity",
        )
        ax.legend(fontsize=7, title="solid: GD, dashed: Lemma A.7", title_fontsize=7)
    paths += save_figure(fig, figures_dir / FIGURE_STEMS[1], formats)

    # 3. pre-training loss after fine-tuning vs n per λ, simulated inflection r(λ) marked
    fig, axes = plt.subplots(1, nt, figsize=(5.4 * nt, 4.2), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        ft = _sel(f, task=task, metric="loss", eval_data="theory_pre")
        before = (
            _sel(df, modification="none", checkpoint=ft["checkpoint"].iloc[0], metric="loss", init="real")
            .groupby("budget")["value"]
            .mean()
        )
        ax.plot(before.index, before.values, color="k", lw=1.5, label="before fine-tuning")
        lams = sorted(ft["lambda_reg"].dropna().unique())
        for col, lam in zip(lam_colors(lams), lams):
            sim = _sel(ft, lambda_reg=lam, estimator="simulation").groupby("budget")["value"].mean()
            cf = _sel(ft, lambda_reg=lam, estimator="closed_form").groupby("budget")["value"].mean()
            ax.plot(sim.index, sim.values, "o-", ms=3, color=col, label=f"λ={lam:g}")
            ax.plot(cf.index, cf.values, ls="--", lw=1, color=col)
            r = _sel(f, task=task, metric="inflection_n", lambda_reg=lam)["value"].median()
            if np.isfinite(r) and r in sim.index:
                ax.plot([r], [sim.loc[r]], color=col, **star)
        ax.set(
            yscale="log",
            xlabel="learned features n",
            ylabel="L_pre after fine-tuning",
            title=f"{task}: catastrophic overtraining",
        )
        ax.set_ylim(bottom=ft["value"].min() / 5)  # the un-fine-tuned loss at n = d is ~0
        ax.legend(fontsize=7, title="★: inflection r(λ)", title_fontsize=7)
    paths += save_figure(fig, figures_dir / FIGURE_STEMS[2], formats)

    # 4. r(λ) and the unregularised fine-tuning loss vs λ
    fig, axes = plt.subplots(nt, 2, figsize=(10.5, 4.2 * nt), squeeze=False)
    for (ax_r, ax_l), task in zip(axes, tasks):
        ft = f[f["task"] == task]
        lams = sorted(ft["lambda_reg"].dropna().unique())
        infl = _sel(ft, metric="inflection_n")
        seeds = sorted(infl["seed"].dropna().unique())
        for k, sd in enumerate(seeds):  # small horizontal offsets keep coinciding seeds visible
            s_ = infl[infl["seed"] == sd].sort_values("lambda_reg")
            jitter = 0.04 * (k - (len(seeds) - 1) / 2)
            ax_r.plot(
                s_["lambda_reg"],
                s_["value"] + jitter,
                "o",
                ms=5,
                alpha=0.7,
                label="GD (per seed)" if k == 0 else None,
            )
        for est, ls, label in (("closed_form", "-", "Lemma A.7 (K steps)"), ("fixed_point", ":", "K → ∞")):
            p_ = _sel(ft, metric="predicted_inflection_n", estimator=est).sort_values("lambda_reg")
            ax_r.plot(p_["lambda_reg"], p_["value"], ls, color="k", label=label)
        ax_r.set(ylabel="inflection point r(λ)", title=f"{task}: regularisation delays the inflection")
        ax_r.legend(fontsize=7)
        lf = _sel(ft, metric="loss", eval_data="theory_ft")
        ns = sorted(lf["budget"].unique())
        for col, n in zip(plt.cm.viridis(np.linspace(0, 0.9, len(ns))), ns):
            sim = _sel(lf, budget=n, estimator="simulation").groupby("lambda_reg")["value"].mean()
            cf = _sel(lf, budget=n, estimator="closed_form").groupby("lambda_reg")["value"].mean()
            ax_l.plot(sim.index, sim.values, "o-", ms=3, color=col, label=f"n={n:g}")
            ax_l.plot(cf.index, cf.values, "--", lw=1, color=col)
        ax_l.set(ylabel="‖θ(t_n; K) − A_ft‖²", title="…at the cost of the fine-tuning loss")
        ax_l.legend(fontsize=7, ncol=2)
        for ax in (ax_r, ax_l):
            ax.set_xscale("symlog", linthresh=1.0)
            ax.set_xticks(lams, [f"{x:g}" for x in lams])
            ax.xaxis.set_minor_locator(plt.NullLocator())
            ax.set_xlabel("λ")
    paths += save_figure(fig, figures_dir / FIGURE_STEMS[3], formats)
    return paths
