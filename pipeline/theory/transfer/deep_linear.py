"""Batched gradient descent of deep linear networks f(x) = xᵀW₁⋯W_L with a scalar output, from the
small balanced initialisation, in the exact coordinates that initialisation leaves them in.

A 0-balanced start (W_lᵀW_l = W_{l+1}W_{l+1}ᵀ, "Fine-tuning with linear teachers" Def. 5.1) with a
vector last layer W_L ∈ ℝ^{d×1} is necessarily a rank-one chain: W₁ = a u₂ᵀ, W_l = s_l u_l u_{l+1}ᵀ
(1 < l < L), W_L = s_L u_L with unit u_l, and β = W₁⋯W_L = a·s₂⋯s_L. Every gradient keeps that form
(∇W₁ = g (W₂⋯W_L)ᵀ = (∏s) g u₂ᵀ, ∇W_l = (aᵀg)(∏_{k≠l} s_k) u_l u_{l+1}ᵀ with g = ∇_β loss), so
gradient descent on the d×d matrices is gradient descent on (a ∈ ℝ^d, s₂, …, s_L): the same
iterates at O(d) memory per network instead of O(L d²) (tests/theory/test_transfer.py checks it
against the full matrices). Depth 1 is plain linear regression on β = a.

Discrete steps do not conserve balancedness exactly: ‖a‖² − s_l² moves by O(η²) per step, O(η)
over a run, which is the O(step size) gap between these iterates and the gradient-flow theorems.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pipeline.theory.spectra import Array


log = logging.getLogger(__name__)


@dataclass
class Chain:
    """A batch of B depth-L networks in rank-one-chain coordinates."""

    a: Array  # (B, d): W₁ = a u₂ᵀ
    s: Array  # (B, L − 1): the singular values of W₂, …, W_L (sign included)

    @property
    def depth(self) -> int:
        return self.s.shape[1] + 1

    @property
    def scale(self) -> Array:
        """s₂⋯s_L, shape (B,) (1 at depth 1)."""
        return np.prod(self.s, axis=1)

    @property
    def beta(self) -> Array:
        """The end-to-end predictor β = W₁⋯W_L, shape (B, d)."""
        return self.a * self.scale[:, None]

    def copy(self) -> Chain:
        return Chain(self.a.copy(), self.s.copy())

    def imbalance(self) -> Array:
        """max_l |‖a‖² − s_l²| (0 for a balanced chain), shape (B,)."""
        if self.depth == 1:
            return np.zeros(len(self.a))
        return np.max(np.abs(np.sum(self.a**2, axis=1)[:, None] - self.s**2), axis=1)


def balanced_init(batch: int, d: int, depth: int, scale: float, rng: np.random.Generator) -> Chain:
    """The small balanced start W₁ = α u₁u₂ᵀ, W_l = α u_l u_{l+1}ᵀ, W_L = α u_L: a = α u₁ (u₁ uniform on the
    sphere, one per network), s_l = α. Depth 1 starts at β = α u₁."""
    u = rng.standard_normal((batch, d))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    return Chain(scale * u, np.full((batch, depth - 1), float(scale)))


def _others(s: Array) -> Array:
    """∏_{k≠l} s_k for each l, shape (B, L − 1) (no division: exact when some s_l = 0)."""
    out = np.ones_like(s)
    for lo in range(s.shape[1]):
        for k in range(s.shape[1]):
            if k != lo:
                out[:, lo] *= s[:, k]
    return out


@dataclass
class GDResult:
    chain: Chain
    steps: int
    grad_norm: Array  # (B,) norm of the gradient in the trained parameters at the end


def _param_grads(ch: Chain, g: Array, train_first: bool) -> tuple[Array | None, Array | None]:
    """Gradients in a (None if frozen) and s₂..s_L (None at depth 1) from g = ∇_β loss."""
    ga = g * ch.scale[:, None] if train_first else None
    gs = np.sum(ch.a * g, axis=1)[:, None] * _others(ch.s) if ch.depth > 1 else None
    return ga, gs


def gradient_descent(
    chain: Chain,
    grad: Callable[[Array], Array],
    eta: float,
    tol: float,
    max_steps: int,
    train_first: bool = True,
    check_every: int = 100,
    name: str = "gd",
    lr_key: str = "learning_rate",
) -> GDResult:
    """Full-batch GD on a loss whose gradient in β is `grad(β)` (B, d), until the gradient in the
    trained parameters has norm < tol for every network.

    train_first = False freezes W₁ (the frozen-first-layer variant: only s₂, …, s_L move; its
    minimum is not a stationary point in β). A run that turns non-finite is an error naming `lr_key`
    (the step is too large for the data's curvature); so is one not converged by `max_steps`.
    """
    ch, t0 = chain.copy(), time.perf_counter()
    for step in range(1, max_steps + 1):
        ga, gs = _param_grads(ch, grad(ch.beta), train_first)
        if ga is not None:
            ch.a -= eta * ga
        if gs is not None:
            ch.s -= eta * gs
        if step % check_every == 0 or step == max_steps:
            ga, gs = _param_grads(ch, grad(ch.beta), train_first)
            gn2 = np.zeros(len(ch.a))
            for part in (ga, gs):
                if part is not None:
                    gn2 += np.sum(part**2, axis=1)
            gn = np.sqrt(gn2)
            if not np.all(np.isfinite(gn)):
                raise FloatingPointError(f"{lr_key}: {name} diverged at step {step} with eta = {eta}")
            if gn.max() < tol:
                break
    else:
        raise RuntimeError(
            f"{lr_key}: {name} not converged after {max_steps} steps of eta = {eta} "
            f"(max |grad| = {gn.max():.2e} > tol = {tol:g})"
        )
    log.info(
        "%s: depth %d, %d networks, %d steps of eta = %g in %.2fs (max |grad| %.1e)",
        name,
        ch.depth,
        len(ch.a),
        step,
        eta,
        time.perf_counter() - t0,
        gn.max(),
    )
    return GDResult(ch, step, gn)


def population_grad(target: Array) -> Callable[[Array], Array]:
    """∇ of the population loss E(xᵀβ − xᵀβ*)² = ‖β − β*‖² for x ~ N(0, I): 2(β − β*)."""
    return lambda beta: 2.0 * (beta - target)


def sample_grad(X: Array, y: Array) -> Callable[[Array], Array]:
    """∇ of the empirical loss (1/n)‖Xβ − y‖² for a batch of samples X (B, n, d), y (B, n): 2(Gβ − c)."""
    n = X.shape[1]
    G = np.swapaxes(X, 1, 2) @ X / n
    c = (np.swapaxes(X, 1, 2) @ y[..., None])[..., 0] / n
    return lambda beta: 2.0 * ((G @ beta[..., None])[..., 0] - c)
