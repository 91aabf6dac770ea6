"""Causal self-attention for models with small heads on CPU, as a transformers attention implementation.

Why: at head dimension 8 (the CPU default `tiny` preset: hidden 32, 4 heads) torch's CPU
flash-attention kernel took 47% of a forward pass of the whole model, about twice what this
takes (bench/bench_attention.py). Here the scores
of a cache-sized group of (batch, head) slices are formed with one batched matmul, normalised
with softmax, and every product whose output has the head dimension as a row (P·V and the
backward's dQ, dK, dV) is computed transposed, (D x T) = (D x T)·(T x T), the layout in which a
batched matmul with a tiny dimension runs fast. The probabilities are kept for the backward pass,
so memory is that of transformers' `eager` attention.

Only used where it is measured faster: CPU tensors, head dimension <= SMALL_HEAD_DIM, queries
and keys of equal length (no KV cache), no attention dropout while training, no extras
(soft-capping, position bias); anything else goes to transformers' own SDPA path.
`use_small_head_attention(model)` selects it for a model (pipeline.models.build and
pipeline.models.checkpoints do, for every model they build or load); it is not saved with the model.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "small_head_cpu"
SMALL_HEAD_DIM = 8  # bench/bench_attention.py: faster than SDPA at 8 with 1 and 2 threads; at 16 only with 2
SCORE_BYTES = 1 << 20  # float32 scores per group of slices: cache-sized


def _additive_mask(attention_mask: torch.Tensor | None, q_len: int, device: torch.device) -> torch.Tensor:
    """A float32 mask to add to the scores: 0 where a query may attend, float32 min elsewhere.

    None means causal. A very negative finite value (not -inf, like transformers' eager path)
    keeps rows that are masked entirely (padding queries) finite.
    """
    lowest = torch.finfo(torch.float32).min
    if attention_mask is None:
        keep = torch.ones(q_len, q_len, dtype=torch.bool, device=device).tril()
        return torch.zeros(q_len, q_len, device=device).masked_fill_(~keep, lowest)
    if attention_mask.dtype == torch.bool:
        return torch.zeros(attention_mask.shape, device=device).masked_fill_(~attention_mask, lowest)
    return attention_mask.float().clamp(min=lowest)


def _group_size(n_slices: int, heads: int, q_len: int) -> int:
    """Slices per group: scores of about SCORE_BYTES, and whole batches or a divisor of `heads`
    (so that a group's mask is one slice of a per-batch / per-head mask)."""
    step = max(1, SCORE_BYTES // (4 * q_len * q_len))
    if step >= heads:
        return min(n_slices, step - step % heads)
    while heads % step:
        step -= 1
    return step


def _mask_group(mask: torch.Tensor, start: int, end: int, heads: int) -> torch.Tensor:
    """The additive mask of slices [start, end) of (batch·heads); mask: (1 or B, 1 or H, T, T)."""
    n_batch, n_head, t, _ = mask.shape
    if n_batch == 1 and n_head == 1:
        return mask[0, 0]  # broadcast over the group
    b0, b1 = start // heads, (end - 1) // heads + 1
    if b1 - b0 == 1:  # inside one batch: a run of heads
        m = mask[b0 if n_batch > 1 else 0]
        return m if n_head == 1 else m[start - b0 * heads : end - b0 * heads]
    m = mask[b0:b1] if n_batch > 1 else mask
    return m.expand(b1 - b0, heads, t, t).reshape(-1, t, t)


def _attend(
    q_t: torch.Tensor,
    k_t: torch.Tensor,
    v_t: torch.Tensor,
    mask: torch.Tensor,
    heads: int,
    scale: float,
    keep_probs: bool,
):
    """Oᵀ (BH, D, T) of softmax(scale · Q Kᵀ + mask) V, a cache-sized group of slices at a time;
    also the probabilities (BH, T, T) when `keep_probs` (for the backward pass), else None."""
    bh, _, t = q_t.shape
    step = _group_size(bh, heads, t)
    probs = torch.empty(bh if keep_probs else step, t, t, dtype=q_t.dtype, device=q_t.device)
    out_t = torch.empty_like(q_t)
    for s in range(0, bh, step):
        e = min(s + step, bh)
        p = probs[s:e] if keep_probs else probs[: e - s]
        torch.baddbmm(_mask_group(mask, s, e, heads), q_t[s:e].transpose(1, 2), k_t[s:e], alpha=scale, out=p)
        torch.softmax(p, dim=-1, out=p)
        torch.bmm(v_t[s:e], p.transpose(1, 2), out=out_t[s:e])  # Oᵀ = Vᵀ Pᵀ
    return out_t, (probs if keep_probs else None)


class _SmallHeadAttention(torch.autograd.Function):
    """softmax(scale · Q Kᵀ + mask) V over (batch·heads) slices, all operands transposed: (BH, D, T)."""

    @staticmethod
    def forward(
        ctx,
        q_t: torch.Tensor,
        k_t: torch.Tensor,
        v_t: torch.Tensor,
        mask: torch.Tensor,
        heads: int,
        scale: float,
    ) -> torch.Tensor:
        out_t, probs = _attend(q_t, k_t, v_t, mask, heads, scale, keep_probs=True)
        ctx.save_for_backward(q_t, k_t, v_t, probs)
        ctx.scale, ctx.step = scale, _group_size(q_t.size(0), heads, q_t.size(2))
        return out_t

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out_t: torch.Tensor):
        q_t, k_t, v_t, probs = ctx.saved_tensors
        grad_out_t = grad_out_t.contiguous()
        bh, _, t = q_t.shape
        dq_t, dk_t, dv_t = torch.empty_like(q_t), torch.empty_like(k_t), torch.empty_like(v_t)
        step = ctx.step
        for s in range(0, bh, step):
            e = min(s + step, bh)
            p, go = probs[s:e], grad_out_t[s:e]
            torch.bmm(go, p, out=dv_t[s:e])  # dVᵀ = dOᵀ P
            dp = torch.bmm(go.transpose(1, 2), v_t[s:e])  # dP = dO Vᵀ
            # softmax backward: dS = P ∘ (dP − rowsum(dP ∘ P)), times the score scale
            ds = dp.sub_((dp * p).sum(-1, keepdim=True)).mul_(p).mul_(ctx.scale)
            torch.bmm(k_t[s:e], ds.transpose(1, 2), out=dq_t[s:e])  # dQᵀ = Kᵀ dSᵀ
            torch.bmm(q_t[s:e], ds, out=dk_t[s:e])  # dKᵀ = Qᵀ dS
        return dq_t, dk_t, dv_t, None, None, None


def small_head_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attention_mask: torch.Tensor | None, scale: float
) -> torch.Tensor:
    """Attention output (B, T, H, D) of q, k, v (B, H, T, D); attention_mask: None (causal), or a
    bool (True = attend) / additive float mask broadcastable to (B, H, T, T)."""
    b, h, t, d = q.shape
    mask = _additive_mask(attention_mask, t, q.device)
    mask = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
    q_t, k_t, v_t = (x.transpose(2, 3).reshape(b * h, d, t).contiguous() for x in (q, k, v))
    if torch.is_grad_enabled() and any(x.requires_grad for x in (q_t, k_t, v_t)):
        out_t = _SmallHeadAttention.apply(q_t, k_t, v_t, mask, h, scale)
    else:  # inference: one cache-sized scratch buffer for the probabilities
        out_t, _ = _attend(q_t, k_t, v_t, mask, h, scale, keep_probs=False)
    return out_t.view(b, h, d, t).permute(0, 3, 1, 2)


def applies(
    module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, dropout: float, kwargs: dict
) -> bool:
    """Whether the small-head path handles this call (else transformers' SDPA path does)."""
    return (
        query.device.type == "cpu"
        and query.dtype == torch.float32
        and query.size(-1) <= SMALL_HEAD_DIM
        and query.shape[1:] == key.shape[1:]  # no grouped KV heads, no cache: T_q == T_k
        and query.size(2) > 1
        and not (dropout > 0 and module.training)
        and kwargs.get("softcap") is None
        and kwargs.get("position_bias") is None
        and kwargs.get("sinks", kwargs.get("s_aux")) is None
        and not kwargs.get("output_attentions", False)
    )


def small_head_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature (AttentionInterface); SDPA where it does not apply."""
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    if not causal or not applies(module, query, key, dropout, kwargs):
        return sdpa_attention_forward(
            module,
            query,
            key,
            value,
            attention_mask,
            dropout=dropout,
            scaling=scaling,
            is_causal=is_causal,
            **kwargs,
        )
    scale = scaling if scaling is not None else query.size(-1) ** -0.5
    return small_head_attention(query, key, value, attention_mask, scale), None


AttentionInterface.register(NAME, small_head_attention_forward)
AttentionMaskInterface.register(NAME, sdpa_mask)  # None when causal suffices, else a bool mask


def head_dim(config) -> int | None:
    """Attention head dimension of a transformers config (None if it has no attention heads)."""
    heads = getattr(config, "num_attention_heads", None)
    return getattr(config, "head_dim", None) or (config.hidden_size // heads if heads else None)


def use_small_head_attention(model: PreTrainedModel) -> bool:
    """Select the small-head attention for `model` if its heads are small enough (True if selected).

    Safe on any device: each call whose tensors it does not handle (GPU, bf16, dropout, KV cache,
    see `applies`) goes to transformers' SDPA. Only the runtime choice changes: weights, the saved
    config and the numbers (to float32 rounding) do not. A model already set to another
    implementation than SDPA (e.g. eager, flash-attention) keeps it.
    """
    dim = head_dim(model.config)
    if (
        dim is None
        or dim > SMALL_HEAD_DIM
        or getattr(model.config, "_attn_implementation", None) not in (None, "sdpa")
    ):
        return False
    model.set_attn_implementation(NAME)
    return True
