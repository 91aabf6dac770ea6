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

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from pipeline.curvature.lines import EAGER, trainable
from pipeline.data.batches import IGNORE_INDEX

if TYPE_CHECKING:
    from pipeline.data.heldout import EvalSet

log = logging.getLogger(__name__)

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
    logits: Logits,
    pre: Params,
    delta: Params,
    inputs: torch.Tensor,
    labels: torch.Tensor | None = None,
    norms: dict[str, float] | None = None,
) -> dict[str, float]:
    """f(θ_pre + δ) against its linearization f(θ_pre) + J δ at the scored positions:

    - gap: ‖f(θ_ft) − f(θ_pre) − J δ‖ / ‖f(θ_ft) − f(θ_pre)‖ over their logits;
    - kl: mean over positions of KL(p_ft ‖ p_lin), the next-token distributions;
    - loss_ft, loss_lin: mean next-token cross-entropy of each (with `labels`, already shifted).
    norms: accumulates the squared norms {"change", "residual"} (a gap over several batches).
    """
    finetuned = {n: pre[n] + delta[n] for n in pre}
    f_pre, j_delta = torch.func.jvp(lambda p: logits(p, inputs), (dict(pre),), (dict(delta),))
    with torch.no_grad():
        f_ft = logits(finetuned, inputs)
    mask = _scored(labels, f_ft.shape).to(f_ft.device)
    ft, lin, base = f_ft[mask].double(), (f_pre + j_delta)[mask].double(), f_pre[mask].double()
    change = torch.linalg.vector_norm(ft - base)
    if norms is not None:
        norms["change"] += float(change) ** 2
        norms["residual"] += float(torch.linalg.vector_norm(ft - lin)) ** 2
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
    kernels, values = group_kernels(scalar, {"all": params}, n)
    return kernels["all"], values


def group_kernels(
    scalar: Callable[[Params, int], torch.Tensor],
    groups: Mapping[str, Params],
    n: int,
    block_bytes: float = math.inf,
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """({group: S_g = G_g G_gᵀ} in float64, s): the kernel of each parameter group (K = Σ_g S_g).

    Groups are packed into blocks whose per-example gradients (n rows) fit in `block_bytes`; each
    block costs one backward per example, through that block's parameters only. A group larger
    than the budget is cut into column slices of its flattened gradient, a block each, and its
    kernel summed over them: exact, at one more backward per example per slice (the memory is one
    slice's n rows and one example's gradient). scalar(params, i) gets every group's tensors."""
    everything = {k: v.detach() for group in groups.values() for k, v in group.items()}
    blocks = _blocks(
        {g: sum(v.numel() for v in group.values()) for g, group in groups.items()}, groups, n, block_bytes
    )
    kernels: dict[str, torch.Tensor] = {}
    values: list[float] = []
    t0, done, total = time.perf_counter(), 0, n * len(blocks)
    for b, block in enumerate(blocks):
        leaves = {k: v.detach().requires_grad_(True) for g, _, _ in block for k, v in groups[g].items()}
        rows: dict[int, list[torch.Tensor]] = {j: [] for j in range(len(block))}
        for i in range(n):
            s = scalar({**everything, **leaves}, i)
            grads = dict(
                zip(leaves, torch.autograd.grad(s, list(leaves.values()), allow_unused=True), strict=True)
            )
            for j, (g, lo, hi) in enumerate(block):
                flat = torch.cat(
                    [
                        (torch.zeros_like(v) if grads[k] is None else grads[k]).reshape(-1)
                        for k, v in groups[g].items()
                    ]
                )
                rows[j].append(flat[lo:hi].clone())
            if b == 0:
                values.append(float(s.detach()))
            done += 1
            if done % max(1, total // 8) == 0 or done == total:
                rate = done / (time.perf_counter() - t0)
                log.info(
                    "NTK: block %d/%d, example %d/%d (%.1f gradients/s, ETA %.0f s)",
                    b + 1,
                    len(blocks),
                    i + 1,
                    n,
                    rate,
                    (total - done) / rate,
                )
        for j, (g, _, _) in enumerate(block):
            grad = torch.stack(rows.pop(j)).double()
            kernels[g] = kernels[g] + grad @ grad.T if g in kernels else grad @ grad.T
    return kernels, torch.tensor(values, dtype=torch.float64)


def _blocks(
    sizes: Mapping[str, int], groups: Mapping[str, Params], n: int, block_bytes: float
) -> list[list[tuple[str, int, int]]]:
    """Blocks of (group, first, end) column ranges of each group's flattened gradient: whole groups
    packed while their n rows fit `block_bytes`, a larger group cut into slices that fit alone."""
    blocks: list[list[tuple[str, int, int]]] = [[]]
    used = 0.0
    for g, size in sizes.items():
        width = max(v.element_size() for v in groups[g].values())
        if n * size * width > block_bytes:  # slices of its own
            step = max(1, int(block_bytes // (n * width)))
            if blocks[-1]:
                blocks.append([])
            for lo in range(0, size, step):
                blocks[-1].append((g, lo, min(size, lo + step)))
                blocks.append([])
            used = 0.0
            continue
        if blocks[-1] and used + n * size * width > block_bytes:
            blocks.append([])
            used = 0.0
        blocks[-1].append((g, 0, size))
        used += n * size * width
    return [b for b in blocks if b]


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
    k = kernel.double()
    r = residual.double().to(k.device)  # the log-likelihoods come back on the host
    eye = torch.eye(k.shape[0], dtype=torch.float64, device=k.device)
    left = sigma * torch.linalg.solve(k + sigma * eye, r)
    eig = torch.linalg.eigvalsh(k).clamp(min=0.0)
    norm = float(torch.linalg.vector_norm(r))
    return {
        "risk": float(left @ left),
        "lower": (sigma * norm / (sigma + float(eig[-1]))) ** 2,
        "upper": (sigma * norm / (sigma + float(eig[0]))) ** 2,
    }


GAP_METRICS = {"gap": "lin_gap", "kl": "lin_kl", "loss_ft": "lin_loss_ft", "loss_lin": "lin_loss_lin"}


def first_windows(data: EvalSet, max_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The leading windows of `data` holding about `max_tokens` scored tokens (at least one window)."""
    scored = (data.labels != IGNORE_INDEX).sum(1).cumsum(0)
    n = int((scored < max_tokens).sum()) + 1
    return data.inputs[:n], data.labels[:n]


def finetuned_gap(
    model: torch.nn.Module,
    reference: Params,
    sets: Mapping[str, EvalSet],
    max_tokens: int,
    batch_size: int = 8,
) -> dict[str, dict[str, float]]:
    """The linearization gap of the fine-tuned `model` (θ_ft) at θ_pre (`reference`, by name) along
    δ = θ_ft − θ_pre over its trained parameters, on the leading `max_tokens` of each held-out set:
    {set name: linearization_gap's numbers}, token-weighted over batches of windows. Eager attention
    is switched on for the jvp and switched back; the model is left at θ_ft."""
    device = next(model.parameters()).device
    previous = getattr(model.config, "_attn_implementation", None)
    if previous != EAGER:
        model.set_attn_implementation(EAGER)
    try:
        named = trainable(model)
        pre = {n: reference[n].to(device, p.dtype) for n, p in named}
        delta = {n: p.detach() - pre[n] for n, p in named}
        logits = hf_logits(model)
        out = {}
        for name, data in sets.items():
            inputs, labels = first_windows(data, max_tokens)
            sums: dict[str, float] = {}
            norms = {"change": 0.0, "residual": 0.0}
            total = 0
            for s in range(0, len(inputs), batch_size):
                x, y = inputs[s : s + batch_size].to(device), labels[s : s + batch_size].to(device)
                n = int((y != IGNORE_INDEX).sum())
                part = linearization_gap(logits, pre, delta, x, y, norms=norms)
                for k in ("kl", "loss_ft", "loss_lin"):
                    sums[k] = sums.get(k, 0.0) + part[k] * n
                total += n
            out[name] = {k: v / total for k, v in sums.items()}
            out[name]["gap"] = math.sqrt(norms["residual"] / norms["change"]) if norms["change"] > 0 else 0.0
        return out
    finally:
        if previous is not None and previous != EAGER:
            model.set_attn_implementation(previous)


def spectral_perturbation(
    base: torch.Tensor, added: torch.Tensor, residual: torch.Tensor, sigma: float
) -> dict[str, float]:
    """Theorem 7 / Algorithm 2's quantities for adding a candidate group (kernel S = `added`) to the
    trained set (kernel K = `base`): η = ‖(K + σI)^{-1/2} S (K + σI)^{-1/2}‖₂, the ranking ratio
    r = λ_max(K + S + σI) / λ_max(K + σI), and the kernel-ridge training residual on the residual
    targets with K alone and with K + S (their ratio is what the ranking claims to predict)."""
    k, s = base.double(), added.double()
    eye = torch.eye(k.shape[0], dtype=torch.float64, device=k.device)
    evals, evecs = torch.linalg.eigh(k + sigma * eye)
    inv_sqrt = evecs @ torch.diag(evals.clamp(min=sigma).rsqrt()) @ evecs.T
    eta = float(torch.linalg.matrix_norm(inv_sqrt @ s @ inv_sqrt, ord=2))
    top = float(torch.linalg.eigvalsh(k + s + sigma * eye)[-1]) / float(evals[-1])
    return {
        "eta": eta,
        "ratio": top,
        "risk_base": ridge_residual(k, residual, sigma)["risk"],
        "risk_with": ridge_residual(k + s, residual, sigma)["risk"],
    }
