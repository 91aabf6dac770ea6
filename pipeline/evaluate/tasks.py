"""In-domain evaluation of a fine-tuning task: token perplexity for LM tasks; for
classification, the paper's class perplexity (Appendix C.1) and accuracy; for chat tasks,
the perplexity of the assistant tokens of held-out conversations.

Class perplexity: each class is scored by its length-normalized likelihood (the mean
log-probability of its answer tokens), the scores are normalized over the classes, and the
perplexity is exp of the mean negative log-probability of the gold class.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from pipeline.data.batches import IGNORE_INDEX, pad_masked_batch, pad_scored_batch
from pipeline.data.chat import EncodedChats
from pipeline.data.heldout import EvalSet
from pipeline.evaluate.perplexity import eval_perplexity, scored_nll_sum
from pipeline.models.losses import FusedHead, fused_head

if TYPE_CHECKING:
    from pipeline.data.encode import EncodedChoices


@torch.inference_mode()
def choice_logprobs(
    model: torch.nn.Module, enc: EncodedChoices, pad_token: int, batch_size: int = 64
) -> list[np.ndarray]:
    """Mean log-probability of each choice's answer tokens given the prompt, per item (only the
    answer positions go through the output layer where the model allows: `_mean_logprobs`)."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    head = fused_head(model)
    pairs = [(i, c) for i in range(len(enc.prompts)) for c in range(len(enc.choices[i]))]
    # longest first: fewer padded positions per batch
    pairs.sort(key=lambda ic: -len(enc.prompts[ic[0]]) - len(enc.choices[ic[0]][ic[1]]))
    scores = [np.full(len(cs), np.nan) for cs in enc.choices]
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        seqs = [enc.sequence(i, c) for i, c in chunk]
        batch = pad_scored_batch([s for s, _ in seqs], [k for _, k in seqs], pad_token)
        mean_lp = _mean_logprobs(model, head, batch["input_ids"], batch["labels"], device).cpu().numpy()
        for (i, c), lp in zip(chunk, mean_lp):
            scores[i][c] = lp
    model.train(was_training)
    return scores


def _mean_logprobs(
    model: torch.nn.Module, head: FusedHead | None, x: torch.Tensor, y: torch.Tensor, device: torch.device
) -> torch.Tensor:
    """Mean log-probability (float32) of each row's scored tokens (labels != IGNORE_INDEX): through
    the fused head, only the scored positions go through the output layer; else the model's logits."""
    mask = y != IGNORE_INDEX
    if head is not None:
        scored = mask.reshape(-1).nonzero().squeeze(1)
        nll = head.nll(x.to(device), scored.to(device), y.reshape(-1)[scored].to(device))
        rows = torch.zeros(len(y), dtype=torch.float32, device=device)
        rows.index_add_(0, (scored // y.size(1)).to(device), nll)
        return -rows / mask.sum(1).to(device)
    x, y = x.to(device), y.to(device)
    logits = model(input_ids=x).logits.float()
    nll = F.cross_entropy(logits.transpose(1, 2), y, ignore_index=IGNORE_INDEX, reduction="none")
    return -(nll * mask.to(device)).sum(1) / mask.sum(1).to(device)


def eval_classification(
    model: torch.nn.Module, enc: EncodedChoices, pad_token: int, batch_size: int = 64
) -> dict[str, float]:
    """Class perplexity, class NLL (nats) and accuracy on encoded items."""
    t0 = time.perf_counter()
    scores = choice_logprobs(model, enc, pad_token, batch_size)
    gold_lp = np.array([s[y] - np.logaddexp.reduce(s) for s, y in zip(scores, enc.labels)])
    correct = np.array([int(np.argmax(s)) == y for s, y in zip(scores, enc.labels)])
    loss = float(-gold_lp.mean())
    return {
        "ppl": math.exp(loss) if math.isfinite(loss) and loss < 700 else float("inf"),
        "loss": loss,
        "accuracy": float(correct.mean()),
        "items": float(len(scores)),
        "seconds": time.perf_counter() - t0,
    }


@torch.inference_mode()
def eval_chat(
    model: torch.nn.Module, enc: EncodedChats, pad_token: int, batch_size: int = 64
) -> dict[str, float]:
    """Token perplexity and mean NLL (nats per token) of the assistant tokens of conversations.

    Conversations are batched longest first, each batch only as wide as its longest; only the
    scored positions go through the output layer when the model allows (`pipeline.models.losses`).
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    t0 = time.perf_counter()
    head = fused_head(model)
    order = sorted(range(len(enc)), key=lambda i: -len(enc.ids[i]))
    total = torch.zeros((), dtype=torch.float64, device=device)
    n_tokens = 0
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        batch = pad_masked_batch([enc.ids[i] for i in idx], [enc.scored[i] for i in idx], pad_token)
        n_tokens += int((batch["labels"] != IGNORE_INDEX).sum())
        total += scored_nll_sum(model, head, batch["input_ids"], batch["labels"], device).double()
    model.train(was_training)
    loss = float(total) / max(n_tokens, 1)
    return {
        "ppl": math.exp(loss) if math.isfinite(loss) and loss < 700 else float("inf"),
        "loss": loss,
        "tokens": float(n_tokens),
        "items": float(len(enc)),
        "seconds": time.perf_counter() - t0,
    }


def eval_task(
    model: torch.nn.Module, data: EvalSet | EncodedChoices | EncodedChats, pad_token: int, batch_size: int
) -> dict[str, float]:
    """In-domain metrics of one split: LM windows, encoded classification items or conversations."""
    if isinstance(data, EvalSet):
        return eval_perplexity(model, data, batch_size=batch_size)
    if isinstance(data, EncodedChats):
        return eval_chat(model, data, pad_token, batch_size)
    return eval_classification(model, data, pad_token, batch_size)
