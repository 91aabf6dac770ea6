"""The first-order (NTK) view of fine-tuning at θ_pre ("Linearization Explains Fine-Tuning in Large
Language Models", eqs. 6-8 and Section 4): how far the fine-tuned model is from its linearization,
and the empirical neural tangent kernel of a checkpoint with the kernel-ridge quantities built on it.

- `linearization_gap`: along δ = θ_ft − θ_pre, f(θ_ft) against the tangent model
  f(θ_pre) + J δ (one `torch.func.jvp`): the relative gap over logits, the KL between the two
  models' next-token distributions, and both losses. Forward-mode AD needs eager attention
  (flash SDPA and the fused losses have no jvp rule; `lines.prepare` switches a model to it).
- `empirical_ntk`: K = G Gᵀ from per-example gradients G of a per-example scalar over the given
  parameters (one backward per example: n is small, 32-64 in the paper).
- `kernel_stats` / `ridge_residual`: its spectrum, κ(K + σI), and the training residual of kernel
  ridge regression on the residual targets r = y − f_θ_pre(X) (Theorem 5 as the kernel-ridge algebra
  needs it; the paper writes Y where the residual belongs, its slides have it right).

A model is seen through `logits(params, inputs)`: a function of a name -> tensor mapping
(`hf_logits` makes one from a transformers model with `torch.func.functional_call`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import torch
import torch.nn.functional as F

from pipeline.curvature.lines import trainable
from pipeline.data.batches import IGNORE_INDEX

Params = Mapping[str, torch.Tensor]
Logits = Callable[[Params, torch.Tensor], torch.Tensor]


def hf_logits(model: torch.nn.Module) -> Logits:
    """`logits(params, input_ids)` of a causal LM, the given tensors replacing its parameters."""

    def logits(params: Params, input_ids: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(model, dict(params), (input_ids,)).logits

    return logits


def trainable_copy(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of the trained parameters (`lines.trainable`), by name: θ_pre for the gap."""
    return {n: p.detach().clone() for n, p in trainable(model)}


def _scored(labels: torch.Tensor | None, shape: torch.Size) -> torch.Tensor:
    """Positions that count: those with a label (all positions without labels)."""
    return torch.ones(shape[:-1], dtype=torch.bool) if labels is None else labels != IGNORE_INDEX


def linearization_gap(
    logits: Logits, pre: Params, delta: Params, inputs: torch.Tensor, labels: torch.Tensor | None = None
) -> dict[str, float]:
    """f(θ_pre + δ) against its linearization f(θ_pre) + J δ at the scored positions:

    - gap: ‖f(θ_ft) − f(θ_pre) − J δ‖ / ‖f(θ_ft) − f(θ_pre)‖ over their logits;
    - kl: mean over positions of KL(p_ft ‖ p_lin), the next-token distributions;
    - loss_ft, loss_lin: mean next-token cross-entropy of each (with `labels`, already shifted).
    """
    finetuned = {n: pre[n] + delta[n] for n in pre}
    f_pre, j_delta = torch.func.jvp(lambda p: logits(p, inputs), (dict(pre),), (dict(delta),))
    with torch.no_grad():
        f_ft = logits(finetuned, inputs)
    mask = _scored(labels, f_ft.shape).to(f_ft.device)
    ft, lin, base = f_ft[mask].double(), (f_pre + j_delta)[mask].double(), f_pre[mask].double()
    change = torch.linalg.vector_norm(ft - base)
    out = {
        "gap": float(torch.linalg.vector_norm(ft - lin) / change) if change > 0 else 0.0,
        "kl": float(
            F.kl_div(lin.log_softmax(-1), ft.log_softmax(-1), log_target=True, reduction="batchmean")
        ),
    }
    if labels is not None:
        y = labels[mask].to(ft.device)
        out["loss_ft"], out["loss_lin"] = float(F.cross_entropy(ft, y)), float(F.cross_entropy(lin, y))
    return out


def empirical_ntk(
    scalar: Callable[[Params, int], torch.Tensor], params: Params, n: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(K, s): the empirical NTK K = G Gᵀ (float64) of the per-example scalars s_i = scalar(params, i),
    i < n, and the scalars themselves; G's rows are ∇_θ s_i over `params`."""
    leaves = {k: v.detach().requires_grad_(True) for k, v in params.items()}
    rows, values = [], []
    for i in range(n):
        s = scalar(leaves, i)
        grads = torch.autograd.grad(s, list(leaves.values()), allow_unused=True)
        rows.append(
            torch.cat(
                [
                    (torch.zeros_like(p) if g is None else g).reshape(-1).double()
                    for g, p in zip(grads, leaves.values(), strict=True)
                ]
            )
        )
        values.append(float(s.detach()))
    g = torch.stack(rows)
    return g @ g.T, torch.tensor(values, dtype=torch.float64)


def kernel_stats(kernel: torch.Tensor, sigma_scales: Sequence[float]) -> dict[str, float]:
    """λ_max, λ_min, the trace, the effective rank exp(H(λ / Σλ)) (Roy & Vetterli, 2007) and, per σ
    = scale · tr K / n, the condition number κ(K + σI) = (λ_max + σ) / (λ_min + σ)."""
    eig = torch.linalg.eigvalsh(kernel.double()).clamp(min=0.0)
    trace, n = float(eig.sum()), kernel.shape[0]
    p = eig / eig.sum() if trace > 0 else eig
    entropy = -float((p[p > 0] * p[p > 0].log()).sum())
    out = {
        "lambda_max": float(eig[-1]),
        "lambda_min": float(eig[0]),
        "trace": trace,
        "effective_rank": math.exp(entropy),
    }
    for scale in sigma_scales:
        sigma = scale * trace / n
        out[f"kappa@{scale:g}"] = (out["lambda_max"] + sigma) / (out["lambda_min"] + sigma)
    return out


def ridge_residual(kernel: torch.Tensor, residual: torch.Tensor, sigma: float) -> dict[str, float]:
    """Kernel ridge regression on the residual targets r = y − f_θ_pre(X): its training residual
    R = ‖r − K (K + σI)⁻¹ r‖² = ‖σ (K + σI)⁻¹ r‖², and Theorem 5's bounds with the residual's norm,
    (σ‖r‖ / (σ + λ_max))² ≤ R ≤ (σ‖r‖ / (σ + λ_min))²."""
    k, r = kernel.double(), residual.double()
    eye = torch.eye(k.shape[0], dtype=torch.float64)
    left = sigma * torch.linalg.solve(k + sigma * eye, r)
    eig = torch.linalg.eigvalsh(k).clamp(min=0.0)
    norm = float(torch.linalg.vector_norm(r))
    return {
        "risk": float(left @ left),
        "lower": (sigma * norm / (sigma + float(eig[-1]))) ** 2,
        "upper": (sigma * norm / (sigma + float(eig[0]))) ** 2,
    }
