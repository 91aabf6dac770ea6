"""Pre-training (4.1): gradient flow on ‖W₁W₂ − A_pre‖² from e^{−τ}I, and the feature-learning times t_n."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import numpy as np
from scipy.signal import find_peaks

from pipeline.theory.spectra import Array, mT

log = logging.getLogger(__name__)


def _flow(W1: Array, W2: Array, A: Array) -> tuple[Array, Array, Array]:
    """Gradient-flow velocity, eqs. (5)-(6): Ẇ₁ = −2(θ − A)W₂ᵀ, Ẇ₂ = −2W₁ᵀ(θ − A); also θ − A."""
    E = W1 @ W2 - A
    return -2.0 * E @ mT(W2), -2.0 * mT(W1) @ E, E


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
            W1, W2, loss_k, g = _rk4(W1, W2, A, dt)
            loss.append(loss_k)
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
                f"theory.max_time: only {n_done}/{B} trajectories showed {d} separate learning events "
                f"by t = {step * dt:g}; the spectrum gaps are too small for tau = {tau} "
                "(increase tau or the gaps) or max_time is too short"
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
