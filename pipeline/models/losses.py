"""Next-token cross-entropy computed from final hidden states without materialising all logits.

Why: at the sizes this pipeline sweeps (hidden 32-576, vocabulary 2k-50k) the output layer
dominates a step. `F.cross_entropy(model(x).logits)` writes the full (tokens x vocab) logits,
their log-softmax, the gradient of each and a dense one-hot gradient to memory: on a CPU that
is memory-bound traffic several times the size of the rest of the step. Here the head
`logits = h @ W^T` is evaluated a chunk of rows at a time (small enough to stay in cache), and
during the forward pass each chunk's loss and gradients are computed at once, so the full
logits never exist (the idea of Liger-Kernel's FusedLinearCrossEntropy, in plain torch so it
runs on CPU and GPU alike). The softmax and loss arithmetic is float32, also for bf16/fp16
models; on CUDA the three matmuls (logits and both gradients) run in autocast's dtype, or in the
hidden states' 16-bit dtype under FSDP2's bf16 policy, as the model's own head would, since
float32 matmuls run ~10x slower than bf16 there (the GPU kit measured a float32 head at 0.67x
Trainer's step rate on OLMo-1B's shape, docs/benchmarks.md).

`fused_head(model)` returns the model's body and head (`FusedHead`, also for a model sharded with
FSDP2) when this is exactly what the model's own forward computes, else None (callers then use
`model(...).logits`).
"""

from __future__ import annotations

import math
import re
import types
from collections.abc import Callable
from dataclasses import dataclass

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


def matmul_dtype(hidden: torch.Tensor) -> torch.dtype:
    """The head's matmul dtype: autocast's on CUDA where it is on (read before the head turns it
    off); on CUDA without autocast, the hidden states' own dtype when it is a 16-bit one (FSDP2's
    MixedPrecisionPolicy: bf16 activations, no autocast); else float32 (the CPU: float32 matmuls
    are its fast ones)."""
    device = hidden.device.type
    if device == "cuda" and torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    if device == "cuda" and hidden.dtype in (torch.bfloat16, torch.float16):
        return hidden.dtype
    return torch.float32


def _chunk_nll(
    h: torch.Tensor, y: torch.Tensor, head2_t: torch.Tensor, buf: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row NLL in nats (c x 1) of one chunk (the CPU kernel); leaves 2^(logits2 - shift) in `buf`,
    returns (nll, row sums).

    h: (c, H); y: (c, 1) target ids; head2_t: `_base2_head(weight)` (float32); buf: (>= c, V)
    float32 scratch. In-place passes over a cache-sized buffer instead of logsumexp's
    temporaries. The shift is 0 when no row can overflow or underflow (checked after the fact: two
    passes fewer); for a chunk that fails the check, it is each row's max.
    """
    logits2 = buf[: h.size(0)]
    torch.mm(h.float(), head2_t, out=logits2)
    target = logits2.gather(1, y)
    sums = logits2.exp2_().sum(dim=1, keepdim=True)
    if bool(((sums >= _MIN_SUM) & (sums < math.inf)).all()):
        return (sums.log2() - target) * LN2, sums
    torch.mm(h.float(), head2_t, out=logits2)  # redo this chunk with the max shift
    m = logits2.amax(dim=1, keepdim=True)
    logits2.sub_(m).exp2_()
    sums = logits2.sum(dim=1, keepdim=True)
    return (m + sums.log2() - target) * LN2, sums


def _chunk_logp(
    h: torch.Tensor, y: torch.Tensor, w: torch.Tensor, scratch: torch.Tensor, logp: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row NLL in nats (c x 1) of one chunk (the accelerator kernel: no host sync); leaves the
    float32 log-softmax in `logp` and returns (nll, log-probability of the target).

    h: (c, H) and w: (V, H) in the matmul dtype; scratch: (>= c, V) in the matmul dtype (the
    logits); logp: (>= c, V) float32. Two passes over the logits: the matmul writes them in its own
    dtype, one log-softmax kernel reads them and writes float32 (its arithmetic is float32).
    """
    c = h.size(0)
    logits = torch.mm(h, w.t(), out=scratch[:c])
    logp = torch.log_softmax(logits, dim=1, dtype=torch.float32, out=logp[:c])
    target = logp.gather(1, y)
    return -target, target


class _FusedLinearCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of `hidden @ weight.T` (rows with label IGNORE_INDEX excluded).

    The forward pass also computes d(loss)/d(hidden) and d(loss)/d(weight) chunk by chunk;
    backward only scales them by the incoming gradient. Per logit (bench/bench_head_traffic.py
    counts the bytes): the CPU kernel makes three float32 passes over a cache-sized chunk (exp2,
    sum, the gradient's scaling: 20 B); the accelerators' kernel two, the log-softmax reading the
    matmul's 16-bit logits and writing float32, the exponential writing the gradient in the matmul
    dtype (12 B), since the row factor s (1/n for a scored row, 0 else) goes on the (c x H) matmul
    operand and result instead of the (c x V) gradient (the kernel before it: 50 B, with a max,
    a shift, a scaling pass and two casts of the gradient).
    """

    @staticmethod
    def forward(
        ctx,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        labels: torch.Tensor,
        chunk_size: int | None,
        mm_dtype: torch.dtype | None,
        kernel: str | None,
    ) -> torch.Tensor:
        mm_dtype = mm_dtype or matmul_dtype(hidden)  # before autocast is turned off below
        kernel = kernel or ("cpu" if hidden.device.type == "cpu" and mm_dtype == torch.float32 else "logp")
        with torch.autocast(hidden.device.type, enabled=False):
            valid = (labels != IGNORE_INDEX).unsqueeze(1)
            safe = torch.where(valid, labels.unsqueeze(1), 0)
            # 1 / (number of scored rows) as a tensor: no host sync (nan when none, like F.cross_entropy)
            inv_n = valid.sum().float().reciprocal()
            scale = valid * inv_n  # (N, 1): each row's factor of d loss / d logits
            want_h, want_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
            n, vocab = hidden.size(0), weight.size(0)
            w = weight.to(mm_dtype)  # a no-op for float32 weights and matmuls
            f32 = {"dtype": torch.float32, "device": hidden.device}
            grad_h = torch.empty(hidden.shape, **f32) if want_h else None
            grad_w_t = torch.zeros(w.size(1), vocab, **f32) if want_w else None
            chunk_size = chunk_size or default_chunk_rows(vocab, hidden.device)
            rows = min(chunk_size, n)
            buf = torch.empty(rows, vocab, dtype=torch.float32, device=hidden.device)
            if kernel == "cpu":
                head2_t = _base2_head(weight)
            else:
                scratch = torch.empty(rows, vocab, dtype=mm_dtype, device=hidden.device)
            total = torch.zeros((), dtype=torch.float32, device=hidden.device)
            for start in range(0, n, chunk_size):
                end = min(start + chunk_size, n)
                h, y, s = hidden[start:end], safe[start:end], scale[start:end]
                if kernel == "cpu":  # the gradient (softmax - onehot) * s built in place in buf
                    nll, sums = _chunk_nll(h, y, head2_t, buf)
                    g = buf[: end - start].mul_(s / sums)
                    g.scatter_add_(1, y, -s)
                    if want_h:
                        torch.mm(g, w, out=grad_h[start:end])
                    if want_w:
                        grad_w_t.addmm_(h.float().t(), g)
                else:  # the row factor s on the (c x H) operands, not on the (c x V) gradient
                    nll, target = _chunk_logp(h.to(mm_dtype), y, w, scratch, buf)
                    # softmax in the matmul dtype (one float32 read, one write), the target's
                    # p - 1 = expm1(log p) in float32 (rounding p first would lose it when p ~ 1)
                    g = torch.exp(buf[: end - start], out=scratch[: end - start])
                    g.scatter_(1, y, torch.expm1(target).to(mm_dtype))
                    if want_h:
                        torch.mul(torch.mm(g, w), s, out=grad_h[start:end])
                    if want_w:
                        hs = (h.float() * s).to(mm_dtype)
                        if mm_dtype == torch.float32:
                            grad_w_t.addmm_(hs.t(), g)
                        else:
                            grad_w_t += torch.mm(hs.t(), g)
                total += torch.where(valid[start:end], nll, 0.0).sum()
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
        return gh, gw, None, None, None, None


def fused_linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    chunk_size: int | None = None,
    mm_dtype: torch.dtype | None = None,
    kernel: str | None = None,
) -> torch.Tensor:
    """Mean next-token cross-entropy of the logits `hidden @ weight.T`, as float32.

    hidden: (..., H) final hidden states; weight: (V, H) output embedding (no bias);
    labels: (...) target ids aligned with `hidden` (already shifted), IGNORE_INDEX where not
    scored. Equals `F.cross_entropy((hidden @ weight.T).float(), labels, ignore_index=-100)`,
    gradients included, without the (N x V) logits. chunk_size: rows per chunk (None: a
    device-dependent default, `default_chunk_rows`). mm_dtype: the matmuls' dtype (None:
    `matmul_dtype`). kernel: "cpu" (base-2 exponentials, unshifted where safe: a host check per
    chunk) or "logp" (log-softmax, no host sync); None: "cpu" for float32 matmuls on the CPU, else
    "logp". For evaluation use `linear_nll`.
    """
    hidden = hidden.reshape(-1, hidden.size(-1))
    return _FusedLinearCrossEntropy.apply(hidden, weight, labels.reshape(-1), chunk_size, mm_dtype, kernel)


def _chunk_nlls(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    chunk_size: int | None,
    mm_dtype: torch.dtype | None,
) -> list[torch.Tensor]:
    """The NLL (float32, nats; c x 1) of each chunk of rows, without gradients."""
    hidden, labels = hidden.reshape(-1, hidden.size(-1)), labels.reshape(-1, 1)
    mm_dtype = mm_dtype or matmul_dtype(hidden)
    chunk_size = chunk_size or default_chunk_rows(weight.size(0), hidden.device)
    out = []
    with torch.no_grad(), torch.autocast(hidden.device.type, enabled=False):
        rows = min(chunk_size, hidden.size(0))
        buf = torch.empty(rows, weight.size(0), dtype=torch.float32, device=hidden.device)
        cpu = hidden.device.type == "cpu" and mm_dtype == torch.float32
        head = _base2_head(weight) if cpu else weight.to(mm_dtype)
        scratch = None if cpu else torch.empty(rows, weight.size(0), dtype=mm_dtype, device=hidden.device)
        for start in range(0, hidden.size(0), chunk_size):
            h, y = hidden[start : start + chunk_size], labels[start : start + chunk_size]
            nll = _chunk_nll(h, y, head, buf) if cpu else _chunk_logp(h.to(mm_dtype), y, head, scratch, buf)
            out.append(nll[0])
    return out


def linear_nll(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    chunk_size: int | None = None,
    mm_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Negative log-likelihood (float32, nats) of each of `labels` (N,) under `hidden @ weight.T`,
    without gradients, a chunk of rows at a time (the matmuls as `fused_linear_cross_entropy`'s).

    Every row is scored (select the scored positions first, e.g. to skip padding).
    """
    return torch.cat(list(_chunk_nlls(hidden, weight, labels, chunk_size, mm_dtype))).squeeze(1)


def linear_nll_sum(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    chunk_size: int | None = None,
    mm_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Summed negative log-likelihood (float32, nats) of `labels` under `hidden @ weight.T`, without
    gradients: `linear_nll`'s, summed chunk by chunk."""
    total = torch.zeros((), dtype=torch.float32, device=hidden.device)
    for nll in _chunk_nlls(hidden, weight, labels, chunk_size, mm_dtype):
        total += nll.sum()
    return total


@dataclass(frozen=True)
class FusedHead:
    """A causal LM's body and output layer, which training (`loss`) and evaluation (`nll`) use in
    place of `model(...).logits`, so the (tokens x vocab) logits never exist.

    The same in one process and under FSDP2 (`fully_shard` on the layers, the output layer and the
    root, pipeline/train/distributed.py): each call runs as a forward of the root and, inside it,
    the head's part as a forward of the output layer (`register_fsdp_forward_method`), so FSDP2
    gathers their parameters (the head's whole weight, not the rank's DTensor shard) and reduces
    their gradients exactly as for `model(...)`.
    """

    model: torch.nn.Module  # the outermost module FSDP2 shards (a PEFT model's causal LM), else the model
    body: torch.nn.Module
    head: torch.nn.Linear

    @property
    def weight(self) -> torch.Tensor:
        """The output embedding (V, H) of a whole model (a sharded one's is a shard outside a forward)."""
        return self.head.weight

    def loss(
        self,
        input_ids: torch.Tensor,
        labels: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        scored_only: bool = False,
        scored: torch.Tensor | None = None,
        **inputs: torch.Tensor,
    ) -> torch.Tensor:
        """Mean next-token loss (float32) of a batch (`fused_linear_cross_entropy`); `scored_only`:
        only the rows whose label is scored go through the head (a multimodal batch: replies only),
        at the flat positions `scored` where the host found them (no read-back), else found here;
        `inputs`: the model's other inputs (a LLaVA batch's `pixel_values`)."""
        return as_forward(
            self.model, self._loss, input_ids, labels, attention_mask, scored_only, scored, inputs
        )

    def nll(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        targets: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        summed: bool = False,
        **inputs: torch.Tensor,
    ) -> torch.Tensor:
        """NLL (float32, nats) of `targets` at flat `positions` (indices into the batch's rows x
        positions) of a batch, without gradients (`linear_nll`): only those rows go through the head.
        `summed`: their sum (`linear_nll_sum`), a scalar."""
        return as_forward(
            self.model, self._nll, input_ids, positions, targets, attention_mask, summed, inputs
        )

    def _loss(self, input_ids, labels, attention_mask, scored_only, scored, inputs) -> torch.Tensor:
        hidden = body_hidden(self.body, input_ids, attention_mask, **inputs)
        if scored_only and scored is not None:
            hidden, labels = (
                hidden.flatten(0, 1).index_select(0, scored),
                labels.flatten().index_select(0, scored),
            )
        elif scored_only:
            mask = labels != IGNORE_INDEX
            hidden, labels = hidden[mask], labels[mask]
        mm_dtype = matmul_dtype(hidden)  # before FSDP2's float32 output layer casts its input

        def head_loss(h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return fused_linear_cross_entropy(h, self.head.weight, y, mm_dtype=mm_dtype)

        return as_forward(self.head, head_loss, hidden, labels)

    def _nll(self, input_ids, positions, targets, attention_mask, summed, inputs) -> torch.Tensor:
        hidden = body_hidden(self.body, input_ids, attention_mask, **inputs)
        hidden = hidden.reshape(-1, hidden.size(-1)).index_select(0, positions)
        mm_dtype = matmul_dtype(hidden)
        nll = linear_nll_sum if summed else linear_nll

        def head_nll(h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return nll(h, self.head.weight, y, mm_dtype=mm_dtype)

        return as_forward(self.head, head_nll, hidden, targets)


def _call(self: torch.nn.Module, fn: Callable, *args):
    return fn(*args)


def as_forward(module: torch.nn.Module, fn: Callable, *args):
    """`fn(*args)`, run as a forward of `module` when FSDP2 shards it (its parameters gathered
    before and, where its policy says, freed after; its gradients reduced in the backward pass);
    the tensors `fn` works on must come through `args` (FSDP2 casts them and hooks its backward
    pass on them). A plain call otherwise."""
    from torch.distributed.fsdp import FSDPModule, register_fsdp_forward_method

    if not isinstance(module, FSDPModule):
        return fn(*args)
    if "fused_call" not in vars(module):
        module.fused_call = types.MethodType(_call, module)
        register_fsdp_forward_method(module, "fused_call")
    return module.fused_call(fn, *args)


def fused_head(model: torch.nn.Module) -> FusedHead | None:
    """The model's `FusedHead` if `model(x).logits == head(body(x)[0])`, else None.

    None (callers use the model's own forward) when the model's forward is not its class's (an
    instance-level replacement, e.g. the linearized model of pipeline/train/linearized.py, or a
    dispatch hook), the model has no separate body and head,
    the head is not a plain Linear without bias, its config names a logit or final-hidden-state
    transform, or a probe forward pass on a few tokens gives other logits (eval mode, no
    gradients, random state restored, so a resumed run stays bit-identical). A model sharded with
    FSDP2 too (the probe is then a collective: every rank calls it).
    """
    if "forward" in vars(model):
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
    if _unsharded_type(head) is not torch.nn.Linear or head.bias is not None:
        return None
    config = getattr(model, "config", None)
    fields = config.to_dict() if hasattr(config, "to_dict") else {}
    if any(
        _LOGIT_TRANSFORM_FIELD.search(name.lower()) and value not in (None, False)
        for name, value in _flatten(fields)
    ):
        return None
    root = _sharded_root(model)
    for body in dict.fromkeys(b for b in bodies if isinstance(b, torch.nn.Module) and b is not model):
        if _probe_agrees(model, root, body, head):
            return FusedHead(root, body, head)
    return None


def _sharded_root(model: torch.nn.Module) -> torch.nn.Module:
    """The outermost module FSDP2 shards (whose forward gathers the parameters the body and head
    use outside their own units: the embeddings, the final norm), or the model when none is."""
    from torch.distributed.fsdp import FSDPModule

    return next((m for m in model.modules() if isinstance(m, FSDPModule)), model)


def _unsharded_type(module: torch.nn.Module) -> type:
    """The module's own class (FSDP2 makes a sharded module an instance of an FSDP subclass)."""
    from torch.distributed.fsdp import FSDPModule

    return next(c for c in type(module).__mro__ if not issubclass(c, FSDPModule))


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
    model: torch.nn.Module,
    root: torch.nn.Module,
    body: torch.nn.Module,
    head: torch.nn.Linear,
    n_tokens: int = 8,
) -> bool:
    """Whether the model's logits on a few tokens equal `head(body(x))` (under FSDP2 both run as
    forwards of the root; its gathered parameters are freed afterwards)."""
    from torch.distributed.fsdp import FSDPModule

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
            got = as_forward(root, lambda x: head(body_hidden(body, x)), ids)
    except (TypeError, ValueError, AttributeError, IndexError, RuntimeError):  # not a body of this head
        return False
    finally:
        model.train(was_training)
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.reshard()
    return want.shape == got.shape and bool(torch.allclose(want.float(), got.float(), rtol=1e-4, atol=1e-5))


def _flatten(d: dict, prefix: str = ""):
    """(dotted name, value) of every leaf of a nested config dict (multimodal text_config etc.)."""
    for k, v in d.items():
        if isinstance(v, dict):
            yield from _flatten(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v
