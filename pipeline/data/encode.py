"""Fine-tuning data: a task's splits as a table on disk, and its tokenized form for training
(packed LM chunks, or prompt + verbalized label with loss on the label tokens only) and
for evaluation (rolling windows for LM tasks, scored choices for classification). Chat
tasks' conversations are encoded by `pipeline.data.chat`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pipeline.data.batches import ChunkSampler, EpochOrder, pad_scored_batch
from pipeline.data.task_items import ChatItem, ClassificationItem, Message, Task, TaskError
from pipeline.data.tokenizer import cached_token_stream, encode_documents

if TYPE_CHECKING:
    import pandas as pd
    import torch

TASK_COLUMNS = ["split", "kind", "text", "context", "prompt", "choices", "label", "messages"]


def task_frame(task: Task) -> pd.DataFrame:
    """One row per document (LM), item (classification) or conversation (chat: `messages`, a
    list of {role, content}), with its split."""
    rows = []
    empty = {"text": None, "context": None, "prompt": None, "choices": None, "label": None, "messages": None}
    for split, entries in task.splits.items():
        for e in entries:
            if task.kind == "lm":
                rows.append({**empty, "split": split, "kind": "lm", "text": e})
            elif task.kind == "chat":
                rows.append({**empty, "split": split, "kind": "chat", "messages": e.as_dicts()})
            else:
                row = {
                    **empty,
                    "split": split,
                    "kind": "classification",
                    "context": e.context,
                    "prompt": e.prompt,
                    "choices": list(e.choices),
                    "label": int(e.label),
                }
                rows.append(row)
    import pandas as pd  # here: a job that reads a task table starts without pandas (read_task)

    df = pd.DataFrame(rows, columns=TASK_COLUMNS)
    df["label"] = df["label"].astype("Int64")
    df.attrs = {"task": task.name, "source": task.source}
    return df


def task_from_rows(name: str, rows: list[dict], source: str = "") -> Task:
    """Inverse of `task_frame`: the table's rows (as dicts, in order) as the task; the splits in
    the order they first appear."""
    if not rows:
        raise TaskError(f"task {name!r}: the task table is empty")
    kind = rows[0]["kind"]
    splits: dict[str, list] = {}
    for r in rows:
        if kind == "lm":
            item = r["text"]
        elif kind == "chat":
            item = ChatItem(tuple(Message(m["role"], m["content"]) for m in r["messages"]))
        else:
            item = ClassificationItem(
                prompt=r["prompt"],
                choices=tuple(r["choices"]),
                label=int(r["label"]),
                context=r["context"] or "",
            )
        splits.setdefault(r["split"], []).append(item)
    return Task(name=name, kind=kind, splits=splits, source=source)


def read_task(name: str, path: str | Path) -> Task:
    """The task table the `task_data` rule wrote (pyarrow.parquet.ParquetFile: no pandas at a job's
    start-up; read_table would import it through pyarrow.dataset)."""
    import pyarrow.parquet as pq

    return task_from_rows(name, pq.ParquetFile(path).read().to_pylist(), source=str(path))


def split_of_task(task: Task, split: str) -> list:
    items = task.splits.get(split) or []
    if not items:
        raise TaskError(f"task {task.name!r}: split {split!r} is empty")
    return items


# --- classification: prompt + verbalized label -------------------------------------------------


@dataclass(frozen=True)
class EncodedChoices:
    """Token ids of classification items: one prompt and one id list per choice each.

    Prompts are truncated from the left so that prefix + prompt + longest choice fits
    `max_len` (long BoolQ passages lose their beginning, never the question).
    """

    prompts: list[list[int]]
    choices: list[list[list[int]]]
    labels: np.ndarray
    prefix: int
    max_len: int

    def sequence(self, i: int, c: int) -> tuple[list[int], int]:
        """(input ids incl. the answer, number of answer tokens) of item i with choice c."""
        ans = self.choices[i][c]
        return [self.prefix] + self.prompts[i] + ans, len(ans)


def encode_classification(tokenizer, items: list[ClassificationItem], max_len: int) -> EncodedChoices:
    """Tokenize prompts and choices separately (so the answer boundary is exact) and truncate."""
    if not items:
        raise TaskError("classification split is empty")
    prompts = encode_documents(tokenizer, [it.context + it.prompt for it in items])
    flat = sorted({c for it in items for c in it.choices})
    ids = dict(zip(flat, encode_documents(tokenizer, flat)))
    choices = [[ids[c] for c in it.choices] for it in items]
    prefix = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    # +1 for the prefix token; the last answer token is never an input, so sequences of
    # max_len + 1 tokens fit a context of max_len.
    for i, (p, cs) in enumerate(zip(prompts, choices)):
        room = max_len - max(map(len, cs))
        if room < 1:
            raise TaskError(f"a verbalized label of item {i} has more tokens than the context ({max_len})")
        if len(p) > room:
            prompts[i] = p[len(p) - room :]
    labels = np.asarray([it.label for it in items], dtype=np.int64)
    return EncodedChoices(prompts, choices, labels, prefix, max_len)


class ExampleSampler:
    """Batches of (prompt + gold answer) sequences; the loss sees the answer tokens only.

    Right padding after every scored position: with a causal mask no attention mask is needed.
    """

    def __init__(self, enc: EncodedChoices, batch_size: int, seed: int, pad_token: int):
        self.enc, self.batch_size, self.pad = enc, batch_size, pad_token
        self.order = EpochOrder(len(enc.prompts), seed)
        self.steps_per_epoch = -(-len(enc.prompts) // batch_size)

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        idx = self.order.take(step * self.batch_size, self.batch_size)
        seqs = [self.enc.sequence(i, int(self.enc.labels[i])) for i in idx]
        return pad_scored_batch([s for s, _ in seqs], [k for _, k in seqs], self.pad)


# --- language-modelling tasks -------------------------------------------------------------------


def lm_sampler(
    tokenizer, documents: list[str], seq_len: int, batch_size: int, seed: int, cache_dir: str | None = None
) -> tuple[ChunkSampler, int]:
    """Packed chunks of the task's training documents, and the number of steps per epoch
    (cache_dir: where the tokenized documents are kept for the study's other jobs)."""
    tokens = cached_token_stream(tokenizer, documents, cache_dir)
    sampler = ChunkSampler(tokens, seq_len, batch_size, seed=seed)
    return sampler, max(1, sampler.n_chunks // batch_size)
