"""Pre-training perplexity and bits per byte of a causal LM on held-out documents.

Windows follow lm-eval's `loglikelihood_rolling` exactly (disjoint windows of the model's
context; the first token of a document is predicted from the end-of-text token), so the
numbers agree with lm-eval's `bits_per_byte`; windows of all documents are batched
together, which is what makes it several times faster (bench/bench_train_eval.py).
"""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from pipeline.data.batches import IGNORE_INDEX
from pipeline.models.losses import FusedHead, fused_head
from pipeline.runtime import map_cpu_threads

if TYPE_CHECKING:
    from pipeline.data.heldout import EvalSet

log = logging.getLogger(__name__)

EVAL_METRICS = ("ppl", "bpb", "loss")  # what eval_perplexity reports of a held-out set


@torch.inference_mode()
def scored_nll_sum(
    model: torch.nn.Module, head: FusedHead | None, x: torch.Tensor, y: torch.Tensor, device: torch.device
) -> torch.Tensor:
    """Summed NLL of the scored positions (labels != IGNORE_INDEX) of one host batch, on `device`.

    With `head` (pipeline.models.losses.fused_head; a model sharded with FSDP2 too) only the scored
    positions go through the output layer, their indices found on the host (no device sync); without,
    the model's own logits.
    """
    x = x.to(device, non_blocking=True)
    if head is not None:
        scored = (y.reshape(-1) != IGNORE_INDEX).nonzero().squeeze(1)
        targets = y.reshape(-1)[scored].to(device, non_blocking=True)
        return head.nll(x, scored.to(device, non_blocking=True), targets, summed=True)
    logits = model(input_ids=x).logits
    y = y.to(device, non_blocking=True)
    return F.cross_entropy(
        logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum"
    )


def eval_perplexity(
    model: torch.nn.Module, data: EvalSet, batch_size: int = 32, device: str | torch.device | None = None
) -> dict[str, float]:
    """Token perplexity, mean NLL (nats/token) and bits per byte of `model` on `data`.

    Padding sits after every scored position of a window, so with a causal mask no mask is
    needed. Only scored positions go through the output layer, a chunk at a time
    (`pipeline.models.losses`), unless the model's forward transforms its logits. On CPU, batches are
    spread over torch's threads (`pipeline.runtime.map_cpu_threads`). Per-batch sums are
    float32, their total float64, added in batch order.
    """
    device = torch.device(device) if device is not None else next(model.parameters()).device
    was_training = model.training
    model.eval()
    t0 = time.perf_counter()
    head = fused_head(model)  # (body, head weight), or None: the model's forward transforms its logits

    def batch_nll(start: int) -> torch.Tensor:
        return scored_nll_sum(
            model,
            head,
            data.inputs[start : start + batch_size],
            data.labels[start : start + batch_size],
            device,
        )

    starts = range(0, len(data.inputs), batch_size)
    if _gathers_per_forward(model):  # FSDP2's hooks gather layers for one forward at a time
        sums = [batch_nll(start) for start in starts]
    else:
        sums = map_cpu_threads(batch_nll, starts, device)
    nll = float(torch.stack(sums).double().sum())
    model.train(was_training)
    seconds = time.perf_counter() - t0
    mean = nll / data.n_tokens
    log.debug("evaluated %d tokens in %.2fs (%.0f tok/s)", data.n_tokens, seconds, data.n_tokens / seconds)
    return {
        "loss": mean,
        "ppl": math.exp(mean) if math.isfinite(mean) and mean < 700 else float("inf"),
        "bpb": nll / math.log(2) / data.n_bytes,
        "tokens": float(data.n_tokens),
        "seconds": seconds,
    }


def _gathers_per_forward(model: torch.nn.Module) -> bool:
    """Whether `model` is sharded with FSDP2, whose forward hooks are not thread-safe."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)
