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
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from pipeline.models.losses import IGNORE_INDEX, body_hidden, fused_head, linear_nll_sum
from pipeline.runtime import map_cpu_threads

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvalSet:
    """Token windows of a set of documents, ready to batch.

    inputs/labels: (n_windows, max_len) int64, labels IGNORE_INDEX where not scored.
    """

    inputs: torch.Tensor
    labels: torch.Tensor
    n_tokens: int
    n_bytes: int
    n_documents: int


def rolling_windows(tokens: list[int], prefix_token: int, max_len: int) -> list[tuple[list[int], list[int]]]:
    """(input, scored-target) windows covering every token once, as lm-eval's rolling windows
    (context_len=1)."""
    out = []
    if not tokens:
        return out
    first = min(max_len, len(tokens))
    out.append(([prefix_token] + tokens[: first - 1], tokens[:first]))
    done = first
    while done < len(tokens):
        n_pred = min(len(tokens) - done, max_len)
        end = done + n_pred
        out.append((tokens[end - max_len - 1 : end - 1], tokens[end - n_pred : end]))
        done = end
    return out


def build_eval_set(
    token_docs: list[list[int]], texts: list[str], prefix_token: int, max_len: int, pad_token: int
) -> EvalSet:
    """Windows of all documents (`rolling_windows`), right-padded to `max_len`, with only the scored
    targets labelled."""
    windows = [w for doc in token_docs for w in rolling_windows(doc, prefix_token, max_len)]
    if not windows:
        raise ValueError("evaluation set is empty: no document has any token")
    # numpy rows, not a torch.tensor per window: 6x faster for a few hundred windows
    inputs = np.full((len(windows), max_len), pad_token, dtype=np.int64)
    labels = np.full((len(windows), max_len), IGNORE_INDEX, dtype=np.int64)
    for i, (inp, tgt) in enumerate(windows):
        inputs[i, : len(inp)] = inp
        # targets are the last len(tgt) positions of the input's next-token predictions
        labels[i, len(inp) - len(tgt) : len(inp)] = tgt
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    return EvalSet(
        torch.from_numpy(inputs),
        torch.from_numpy(labels),
        sum(map(len, token_docs)),
        n_bytes,
        len(token_docs),
    )


@torch.inference_mode()
def scored_nll_sum(
    model: torch.nn.Module, head: tuple | None, x: torch.Tensor, y: torch.Tensor, device: torch.device
) -> torch.Tensor:
    """Summed NLL of the scored positions (labels != IGNORE_INDEX) of one host batch, on `device`.

    With `head` (pipeline.models.losses.fused_head) only the scored positions go through the output
    layer, their indices found on the host (no device sync); without, the model's own logits.
    """
    x = x.to(device, non_blocking=True)
    if head is not None:
        scored = (y.reshape(-1) != IGNORE_INDEX).nonzero().squeeze(1)
        hidden = body_hidden(head[0], x).reshape(-1, head[1].size(1))
        idx = scored.to(device, non_blocking=True)
        return linear_nll_sum(
            hidden.index_select(0, idx), head[1], y.reshape(-1)[scored].to(device, non_blocking=True)
        )
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


def select_documents(
    texts: list[str], token_docs: list[list[int]], max_tokens: int | None
) -> tuple[list[str], list[list[int]]]:
    """The first whole documents whose tokens fit in `max_tokens` (all if None; at least one)."""
    if max_tokens is None:
        return texts, token_docs
    cum = np.cumsum([len(d) for d in token_docs])
    k = max(1, int(np.searchsorted(cum, max_tokens, side="right")))
    return texts[:k], token_docs[:k]


def _gathers_per_forward(model: torch.nn.Module) -> bool:
    """Whether `model` is sharded with FSDP2, whose forward hooks are not thread-safe."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)
