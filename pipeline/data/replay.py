"""Replay (`finetune.methods.<name>.replay_fraction`): a fixed share of every fine-tuning batch's
rows drawn from the pre-training corpus's training split, packed chunks as in pre-training.

The replay rows follow the task's rows in each global batch, which is a pure function of the step,
so they are the same rows whatever the rank count. The loss is the batch's mean over scored tokens:
a replay row scores all of its tokens, a classification row only its label.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from pipeline.data.batches import IGNORE_INDEX

Batch = dict[str, torch.Tensor]


def replay_rows(batch_size: int, fraction: float) -> int:
    """Rows of a batch of `batch_size` that replay pre-training data: round(fraction · batch_size),
    at least one when the fraction is positive, and at least one row left to the task."""
    if fraction <= 0:
        return 0
    k = max(1, round(fraction * batch_size))
    if k >= batch_size:
        raise ValueError(
            f"finetune.methods.*.replay_fraction: {fraction} of a batch of {batch_size} leaves no row "
            "to the task"
        )
    return k


def _padded(batch: Batch, width: int, pad_id: int) -> Batch:
    extra = width - batch["input_ids"].shape[1]
    if extra == 0:
        return batch
    return {
        "input_ids": torch.nn.functional.pad(batch["input_ids"], (0, extra), value=pad_id),
        "labels": torch.nn.functional.pad(batch["labels"], (0, extra), value=IGNORE_INDEX),
    }


def with_replay(
    task: Callable[[int], Batch], replay: Callable[[int], Batch], pad_id: int
) -> Callable[[int], Batch]:
    """batch(step): the task's rows, then the replay rows, right-padded to one width."""

    def batch(step: int) -> Batch:
        a, b = task(step), replay(step)
        width = max(a["input_ids"].shape[1], b["input_ids"].shape[1])
        a, b = _padded(a, width, pad_id), _padded(b, width, pad_id)
        return {k: torch.cat([a[k], b[k]]) for k in ("input_ids", "labels")}

    return batch
