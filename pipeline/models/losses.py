"""Next-token cross-entropy computed from final hidden states without materialising all logits.

Why: at the sizes this pipeline sweeps (hidden 32-576, vocabulary 2k-50k) the output layer
dominates a step. `F.cross_entropy(model(x).logits)` writes the full (tokens x vocab) logits,
their log-softmax, the gradient of each and a dense one-hot gradient to memory: on a CPU that
is memory-bound traffic several times the size of the rest of the step. Here the head
`logits = h @ W^T` is evaluated a chunk of rows at a time (small enough to stay in cache), and
during the forward pass each chunk's loss and gradients are computed at once, so the full
logits never exist (the idea of Liger-Kernel's FusedLinearCrossEntropy, in plain torch so it
runs on CPU and GPU alike). The softmax and loss arithmetic is float32, also for bf16/fp16
models; under CUDA autocast the three matmuls (logits and both gradients) run in autocast's dtype,
as the model's own head would, since float32 matmuls run ~10x slower than bf16 there (the GPU kit
measured a float32 head at 0.67x Trainer's step rate on OLMo-1B's shape, docs/benchmarks.md).

`fused_head(model)` returns the model body and head weight when this is exactly what the
model's own forward computes, else None (callers then use `model(...).logits`).
"""

from __future__ import annotations

import math
import re

import torch

from pipeline.data.batches import IGNORE_INDEX

LN2 = math.log(2.0)
# Float32 logits per chunk: cache-sized on CPU (8 MiB measured best with 2 threads, vocab 2048,
# bench/bench_train_eval.py); on accelerators only a memory bound (kernel launches dominate).
CHUNK_BYTES = {"cpu": 8 << 20}
DEFAULT_CHUNK_BYTES = 256 << 20

# Config fields of models whose forward transforms the logits or the final hidden states
# (Gemma-2 soft-capping, Cohere logit_scale, Granite logits_scaling, muP-style multipliers,
# MiniCPM's dim_model_base, ...): the fused head would silently compute another loss.
_LOGIT_TRANSFORM_FIELD = re.compile(
    r"softcap|logit_?scal|logits_scaling|output_mult|lm_head_mult|mup|width_mult|dim_model_base"
)


def default_chunk_rows(vocab_size: int, device: torch.device) -> int:
    """Rows per chunk whose float32 logits fit the device's chunk budget."""
    return max(1, CHUNK_BYTES.get(device.type, DEFAULT_CHUNK_BYTES) // (4 * vocab_size))


def _base2_head(weight: torch.Tensor) -> torch.Tensor:
    """(H, V) float32 weight.T * log2(e): its logits are in base 2, so softmax needs exp2, which is
    ~3x faster than exp on CPU (AVX-512); the layout is also the faster one for the logits matmul."""
    return (weight.float().t() * (1.0 / LN2)).contiguous()


# Without subtracting each row's max, 2^logits2 is exact in float32 while the row's largest base-2
# logit is below 127 (no overflow) and its row sum is at least 2^-60 (terms lost to the flush of
# denormals, < 2^-126 each, are then < 2^-55 of the sum). Rows outside that window are redone.
_MIN_SUM = 2.0**-60


def _matmul_dtype(device: torch.device) -> torch.dtype:
    """The head's matmul dtype: autocast's on CUDA where it is on (read before the head turns it
    off), else float32."""
    on = device.type == "cuda" and torch.is_autocast_enabled(device.type)
    return torch.get_autocast_dtype(device.type) if on else torch.float32


def _chunk_nll(
    h: torch.Tensor, y: torch.Tensor, head2_t: torch.Tensor, buf: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row NLL in nats (c x 1) of one chunk; leaves 2^(logits2 - shift) in `buf`, returns (nll, row sums).

    h: (c, H); y: (c, 1) target ids; head2_t: `_base2_head(weight)` in the matmul dtype; buf:
    (>= c, V) float32 scratch. In-place passes over a cache-sized buffer instead of logsumexp's
    temporaries. On CPU the shift is 0 when no row can overflow or underflow (checked after the
    fact: two passes fewer); elsewhere, or for a chunk that fails the check, it is each row's max.
    """
    logits2 = buf[: h.size(0)]
    if head2_t.dtype == torch.float32:
        torch.mm(h.float(), head2_t, out=logits2)
    else:
        logits2.copy_(torch.mm(h.to(head2_t.dtype), head2_t))
    target = logits2.gather(1, y)
    if h.device.type == "cpu":
        sums = logits2.exp2_().sum(dim=1, keepdim=True)
        if bool(((sums >= _MIN_SUM) & (sums < math.inf)).all()):
            return (sums.log2() - target) * LN2, sums
        torch.mm(h.float(), head2_t, out=logits2)  # redo this chunk with the max shift
    m = logits2.amax(dim=1, keepdim=True)
    logits2.sub_(m).exp2_()
    sums = logits2.sum(dim=1, keepdim=True)
    return (m + sums.log2() - target) * LN2, sums


class _FusedLinearCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of `hidden @ weight.T` (rows with label IGNORE_INDEX excluded).

    The forward pass also computes d(loss)/d(hidden) and d(loss)/d(weight) chunk by chunk;
    backward only scales them by the incoming gradient.
    """

    @staticmethod
    def forward(
        ctx, hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk_size: int | None
    ) -> torch.Tensor:
        mm_dtype = _matmul_dtype(hidden.device)  # before autocast is turned off below
        with torch.autocast(hidden.device.type, enabled=False):
            w = weight.to(mm_dtype)  # a no-op for float32 weights and matmuls
            head2_t = _base2_head(weight).to(mm_dtype)
            valid = (labels != IGNORE_INDEX).unsqueeze(1)
            safe = torch.where(valid, labels.unsqueeze(1), 0)
            # 1 / (number of scored rows) as a tensor: no host sync (nan when none, like F.cross_entropy)
            inv_n = valid.sum().float().reciprocal()
            want_h, want_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
            grad_h = torch.empty(hidden.shape, dtype=torch.float32, device=hidden.device) if want_h else None
            grad_w_t = torch.zeros_like(head2_t, dtype=torch.float32) if want_w else None
            chunk_size = chunk_size or default_chunk_rows(w.size(0), hidden.device)
            buf = torch.empty(
                min(chunk_size, hidden.size(0)), w.size(0), dtype=torch.float32, device=hidden.device
            )
            total = torch.zeros((), dtype=torch.float32, device=hidden.device)
            for start in range(0, hidden.size(0), chunk_size):
                end = min(start + chunk_size, hidden.size(0))
                h, y, ok = hidden[start:end], safe[start:end], valid[start:end]
                nll, sums = _chunk_nll(h, y, head2_t, buf)
                total += torch.where(ok, nll, 0.0).sum()
                if want_h or want_w:
                    # d loss / d logits = (softmax - onehot) * valid / n, built in place in `buf`
                    scale = ok * inv_n
                    g = buf[: end - start].mul_(scale / sums)
                    g.scatter_add_(1, y, -scale)
                    if want_h and mm_dtype == torch.float32:
                        torch.mm(g, w, out=grad_h[start:end])
                    elif want_h:
                        grad_h[start:end] = torch.mm(g.to(mm_dtype), w)
                    if want_w and mm_dtype == torch.float32:
                        grad_w_t.addmm_(h.float().t(), g)
                    elif want_w:
                        grad_w_t += torch.mm(h.to(mm_dtype).t(), g.to(mm_dtype))
            ctx.save_for_backward(grad_h, grad_w_t)
            ctx.dtypes = (hidden.dtype, weight.dtype)
            return total * inv_n

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: torch.Tensor):
        grad_h, grad_w_t = ctx.saved_tensors
        h_dtype, w_dtype = ctx.dtypes
        gh = (grad_h * grad_out).to(h_dtype) if grad_h is not None else None
        gw = (grad_w_t * grad_out).t().contiguous().to(w_dtype) if grad_w_t is not None else None
        return gh, gw, None, None


def fused_linear_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk_size: int | None = None
) -> torch.Tensor:
    """Mean next-token cross-entropy of the logits `hidden @ weight.T`, as float32.

    hidden: (..., H) final hidden states; weight: (V, H) output embedding (no bias);
    labels: (...) target ids aligned with `hidden` (already shifted), IGNORE_INDEX where not
    scored. Equals `F.cross_entropy((hidden @ weight.T).float(), labels, ignore_index=-100)`,
    gradients included, without the (N x V) logits. chunk_size: rows per chunk (None: a
    device-dependent default, `default_chunk_rows`). For evaluation use `linear_nll_sum`.
    """
    hidden = hidden.reshape(-1, hidden.size(-1))
    return _FusedLinearCrossEntropy.apply(hidden, weight, labels.reshape(-1), chunk_size)


def linear_nll_sum(
    hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk_size: int | None = None
) -> torch.Tensor:
    """Summed negative log-likelihood (float32, nats) of `labels` under `hidden @ weight.T`, without
    gradients.

    Every row is scored (select the scored positions first, e.g. to skip padding).
    """
    hidden, labels = hidden.reshape(-1, hidden.size(-1)), labels.reshape(-1, 1)
    chunk_size = chunk_size or default_chunk_rows(weight.size(0), hidden.device)
    total = torch.zeros((), dtype=torch.float32, device=hidden.device)
    with torch.no_grad(), torch.autocast(hidden.device.type, enabled=False):
        head2_t = _base2_head(weight)
        buf = torch.empty(
            min(chunk_size, hidden.size(0)), head2_t.size(1), dtype=torch.float32, device=hidden.device
        )
        for start in range(0, hidden.size(0), chunk_size):
            nll, _ = _chunk_nll(
                hidden[start : start + chunk_size], labels[start : start + chunk_size], head2_t, buf
            )
            total += nll.sum()
    return total


def fused_head(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.Tensor] | None:
    """(body, output-embedding weight) if `model(x).logits == body(x)[0] @ weight.T`, else None.

    None (callers use the model's own forward) when the model's forward is not its class's (an
    instance-level replacement, e.g. the linearized model of pipeline/train/linearized.py, or a
    dispatch hook), the model has no separate body and head,
    the head is not a plain Linear without bias, its config names a logit or final-hidden-state
    transform, or a probe forward pass on a few tokens gives other logits (eval mode, no
    gradients, random state restored, so a resumed run stays bit-identical). None for a model
    sharded with FSDP2: its parameters are gathered by the root's forward, which the body skips.
    """
    from torch.distributed.fsdp import FSDPModule

    if isinstance(model, FSDPModule) or "forward" in vars(model):
        return None
    get_decoder, get_head = getattr(model, "get_decoder", None), getattr(model, "get_output_embeddings", None)
    if get_decoder is None or get_head is None:
        return None
    try:
        head = get_head()
        # the whole body first where the model has one (a LLaVA model's `model` also takes the
        # images; a causal LM's is its decoder), then the decoder (a PEFT model's `model` is the
        # causal LM with its head: the probe rejects it)
        bodies = [getattr(model, "model", None), get_decoder()]
    except (AttributeError, NotImplementedError, ValueError):
        return None
    if type(head) is not torch.nn.Linear or head.bias is not None:
        return None
    config = getattr(model, "config", None)
    fields = config.to_dict() if hasattr(config, "to_dict") else {}
    if any(
        _LOGIT_TRANSFORM_FIELD.search(name.lower()) and value not in (None, False)
        for name, value in _flatten(fields)
    ):
        return None
    for body in dict.fromkeys(b for b in bodies if isinstance(b, torch.nn.Module) and b is not model):
        if _probe_agrees(model, body, head):
            return body, head.weight
    return None


def body_hidden(
    body: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    **inputs: torch.Tensor,
) -> torch.Tensor:
    """Final hidden states of a model body (what the model's head is applied to), no KV cache;
    `inputs`: the model's other inputs (a LLaVA batch's `pixel_values`)."""
    return body(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **inputs)[0]


def _probe_agrees(
    model: torch.nn.Module, body: torch.nn.Module, head: torch.nn.Linear, n_tokens: int = 8
) -> bool:
    """Whether the model's logits on a few tokens equal `head(body(x))`."""
    device = head.weight.device
    ids = (torch.arange(1, n_tokens + 1, device=device) * 7919 % head.out_features).unsqueeze(0)
    was_training = model.training
    model.eval()
    try:
        with (
            torch.no_grad(),
            torch.random.fork_rng(devices=[device] if device.type == "cuda" else [], device_type=device.type),
        ):
            want = model(input_ids=ids, use_cache=False).logits
            got = head(body_hidden(body, ids))
    except (TypeError, ValueError, AttributeError, IndexError, RuntimeError):  # not a body of this head
        return False
    finally:
        model.train(was_training)
    return want.shape == got.shape and bool(torch.allclose(want.float(), got.float(), rtol=1e-4, atol=1e-5))


def _flatten(d: dict, prefix: str = ""):
    """(dotted name, value) of every leaf of a nested config dict (multimodal text_config etc.)."""
    for k, v in d.items():
        if isinstance(v, dict):
            yield from _flatten(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v
