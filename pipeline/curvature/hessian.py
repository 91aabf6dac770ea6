"""Directional derivatives, Hessian-vector products, Hutchinson's trace and the top eigenvalue of a
loss over a fixed token set, with torch's own autograd (double backward).

Why not a library: curvlinops-for-pytorch (3.0.1, maintained; pulls in scipy and einops) wants a
`loss_func(model(X), y)` over a data loader, while our loss is a causal LM's mean NLL over ragged,
right-padded windows (ignore_index) whose HF forward returns a ModelOutput: a wrapper for the model,
the loss and the data, and a SciPy/`LinearOperator` layer, for what is here one double-backward pass.
PyHessian (0.1, 2021, unmaintained) computes the same trace by the same double backward. Everything
the stage needs is `hvps` below (one pass: the loss, its gradient and H·v for a batch of vectors),
and the estimators on top of it are a few lines each, tested against exact matrices.

A loss is a callable `batch_losses()` yielding, per batch of the token set, that batch's share of
the mean loss (a scalar with a graph to the parameters); their sum is the loss. Vectors are lists of
tensors aligned with `params`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import torch

Vector = list[torch.Tensor]
BatchLosses = Callable[[], Iterable[torch.Tensor]]


def dot(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
    """⟨a, b⟩ over a list of tensors, in float64."""
    return float(sum((x.double() * y.double()).sum() for x, y in zip(a, b, strict=True)))


def hvps(
    batch_losses: BatchLosses, params: Sequence[torch.Tensor], vecs: Sequence[Vector]
) -> tuple[float, Vector, list[Vector]]:
    """(L, ∇L, [H v for v in vecs]) in one pass over the batches: per batch, the gradient with its
    graph, then one backward of ⟨∇L_b, v⟩ per vector (H = Σ_b H_b). Needs ops with double backward
    (eager attention, not flash SDPA)."""
    loss = 0.0
    grad = [torch.zeros_like(p) for p in params]
    out = [[torch.zeros_like(p) for p in params] for _ in vecs]
    for lb in batch_losses():
        g = torch.autograd.grad(lb, params, create_graph=bool(vecs), allow_unused=True)
        g = [torch.zeros_like(p) if gi is None else gi for gi, p in zip(g, params, strict=True)]
        for k, v in enumerate(vecs):
            gv = sum((gi * vi).sum() for gi, vi in zip(g, v, strict=True))
            hv = torch.autograd.grad(gv, params, retain_graph=k < len(vecs) - 1, allow_unused=True)
            for acc, h in zip(out[k], hv, strict=True):
                if h is not None:
                    acc.add_(h.detach())
        for acc, gi in zip(grad, g, strict=True):
            acc.add_(gi.detach())
        loss += float(lb.detach())
    return loss, grad, out


def directional(
    batch_losses: BatchLosses, params: Sequence[torch.Tensor], directions: Sequence[Vector]
) -> tuple[float, list[float], list[float]]:
    """(L(θ), [gᵀε], [εᵀHε]) for each direction ε: the quadratic L + λ gᵀε + ½ λ² εᵀHε."""
    loss, grad, hv = hvps(batch_losses, params, directions)
    return loss, [dot(grad, e) for e in directions], [dot(e, h) for e, h in zip(directions, hv, strict=True)]


def rademacher(params: Sequence[torch.Tensor], gen: torch.Generator) -> Vector:
    """A vector of independent ±1 entries shaped like `params` (drawn on the CPU, reproducible)."""
    return [
        (torch.randint(0, 2, p.shape, generator=gen, dtype=torch.int8) * 2 - 1).to(p.device, p.dtype)
        for p in params
    ]


def hutchinson(
    batch_losses: BatchLosses,
    params: Sequence[torch.Tensor],
    probes: int,
    seed: int,
    scales: Sequence[float] | None = None,
) -> dict[str, float]:
    """Hutchinson's tr(H) ≈ mean_k z_kᵀ H z_k over Rademacher z_k, with its standard error (sd/√k).

    scales (one per parameter tensor): estimate tr(D H D) instead, D = diag(scale of each entry's
    tensor), i.e. E[εᵀHε] for the per-tensor Gaussian ε ~ N(0, D²) of the perturbation stage (the
    proposition's ½ λ² tr(H) for that ε). Both traces come from one pass when both are asked for:
    see `sharpness`.
    """
    gen = torch.Generator().manual_seed(seed)
    zs = [rademacher(params, gen) for _ in range(probes)]
    if scales is not None:
        zs = [[zi * s for zi, s in zip(z, scales, strict=True)] for z in zs]
    _, _, hz = hvps(batch_losses, params, zs)
    return _mean_se([dot(z, h) for z, h in zip(zs, hz, strict=True)])


def _mean_se(values: Sequence[float]) -> dict[str, float]:
    n = len(values)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else float("nan")
    return {"mean": mean, "se": math.sqrt(var / n)}


def top_eigenvalue(batch_losses: BatchLosses, params: Sequence[torch.Tensor], iters: int, seed: int) -> float:
    """The largest-magnitude eigenvalue of H by power iteration on HVPs (its last Rayleigh quotient,
    sign kept); `iters` HVP passes."""
    gen = torch.Generator().manual_seed(seed)
    v = [torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.device, p.dtype) for p in params]
    eig = float("nan")
    for _ in range(iters):
        norm = math.sqrt(dot(v, v))
        if not math.isfinite(norm) or norm == 0.0:
            return float("nan")
        v = [x / norm for x in v]
        _, _, (hv,) = hvps(batch_losses, params, [v])
        eig = dot(v, hv)
        v = hv
    return eig


def sharpness(
    batch_losses: BatchLosses,
    params: Sequence[torch.Tensor],
    scales: Sequence[float],
    probes: int,
    power_iters: int,
    seed: int = 0,
) -> dict[str, float]:
    """tr(H) and tr(D H D) by Hutchinson (the same Rademacher probes, one pass) with standard errors,
    and the top eigenvalue of H by power iteration."""
    gen = torch.Generator().manual_seed(seed)
    zs = [rademacher(params, gen) for _ in range(probes)]
    scaled = [[zi * s for zi, s in zip(z, scales, strict=True)] for z in zs]
    _, _, hz = hvps(batch_losses, params, zs + scaled)
    plain = _mean_se([dot(z, h) for z, h in zip(zs, hz[:probes], strict=True)])
    init = _mean_se([dot(z, h) for z, h in zip(scaled, hz[probes:], strict=True)])
    return {
        "hessian_trace": plain["mean"],
        "hessian_trace_se": plain["se"],
        "hessian_trace_init_scaled": init["mean"],
        "hessian_trace_init_scaled_se": init["se"],
        "hessian_top_eig": top_eigenvalue(batch_losses, params, power_iters, seed + 1),
    }


def fd_curvature(lambdas: Sequence[float], losses: Sequence[float], loss0: float) -> float:
    """εᵀHε read off the curve: least squares of L(λ) − L(0) on λ, ½λ² (and λ³/6 with ≥ 3 points),
    over the finite points λ ≠ 0 of a grid near 0; NaN with fewer than 2 such points."""
    pts = [(x, y - loss0) for x, y in zip(lambdas, losses, strict=True) if x != 0 and math.isfinite(y)]
    if len(pts) < 2:
        return float("nan")
    x = torch.tensor([p[0] for p in pts], dtype=torch.float64)
    y = torch.tensor([p[1] for p in pts], dtype=torch.float64)
    cols = [x, x**2 / 2] + ([x**3 / 6] if len(pts) >= 3 else [])
    coef = torch.linalg.lstsq(torch.stack(cols, 1), y.unsqueeze(1)).solution
    return float(coef[1, 0])
