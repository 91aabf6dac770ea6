"""Held-out token windows: documents cut into lm-eval's rolling windows (every token scored once,
the first from the end-of-text token), padded into one set ready to batch. The pre-training
corpus's held-out split (every stage reporting pre-training perplexity evaluates on it) and an LM
task's evaluation split are built here, in one way."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch

from pipeline.data.batches import IGNORE_INDEX
from pipeline.data.tokenizer import encode_documents


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


def select_documents(
    texts: list[str], token_docs: list[list[int]], max_tokens: int | None
) -> tuple[list[str], list[list[int]]]:
    """The first whole documents whose tokens fit in `max_tokens` (all if None; at least one)."""
    if max_tokens is None:
        return texts, token_docs
    cum = np.cumsum([len(d) for d in token_docs])
    k = max(1, int(np.searchsorted(cum, max_tokens, side="right")))
    return texts[:k], token_docs[:k]


def encode_leading(
    tokenizer, texts: list[str], max_tokens: int | None, first_batch: int = 16
) -> list[list[int]]:
    """Token ids of the leading documents, up to the first whose tokens take the count past
    `max_tokens` (all of them if None or never): `select_documents` picks the same documents from
    these as from the whole split. Tokenized in doubling batches, not all: a held-out split is often
    several times `max_tokens` (the default study's, 5.2x), and every job evaluating on it paid that."""
    if max_tokens is None:
        return encode_documents(tokenizer, texts)
    docs: list[list[int]] = []
    count, batch = 0, first_batch
    while len(docs) < len(texts) and count <= max_tokens:
        for doc in encode_documents(tokenizer, texts[len(docs) : len(docs) + batch]):
            docs.append(doc)
            count += len(doc)
            if count > max_tokens:
                break
        batch *= 2
    return docs


def lm_eval_set(tokenizer, documents: list[str], max_len: int, max_tokens: int | None) -> EvalSet:
    """Rolling windows over whole task documents (up to `max_tokens`), as for pre-training ppl."""
    docs = encode_leading(tokenizer, documents, max_tokens)
    documents, docs = select_documents(documents[: len(docs)], docs, max_tokens)
    prefix = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    return build_eval_set(docs, documents, prefix, max_len, tokenizer.pad_token_id)


def split_texts(corpus_path: str | Path, split: str) -> list[str]:
    """The texts of one split of the corpus table, in table order (pyarrow: a job starts without pandas)."""
    table = pq.ParquetFile(corpus_path).read(columns=["split", "text"])  # not read_table: it imports pandas
    return [
        t for s, t in zip(table["split"].to_pylist(), table["text"].to_pylist(), strict=True) if s == split
    ]


def heldout_eval_set(
    corpus_path: str | Path, split: str, tokenizer, max_len: int, max_tokens: int | None
) -> EvalSet:
    """The pre-training corpus's held-out `split` as rolling windows for `tokenizer`."""
    texts = split_texts(corpus_path, split)
    if not texts:
        raise ValueError(f"eval.split: the corpus has no documents in split {split!r}")
    return lm_eval_set(tokenizer, texts, max_len, max_tokens)


@dataclass(frozen=True)
class PretrainCorpus:
    """The pre-training corpus as a fine-tuning job reads it (config `eval:`): its held-out `split`
    for the pre-training perplexity (whole documents up to `max_tokens`, windows of `seq_len` or the
    model's context, `batch_size` windows at a time); its training split for replay; `token_cache`,
    where tokenized splits are shared by the study's jobs."""

    path: str
    split: str
    max_tokens: int | None = None
    seq_len: int | None = None
    batch_size: int = 64
    token_cache: str | None = None

    def eval_set(self, tokenizer, fallback_len: int, context: int) -> EvalSet:
        """The held-out split's windows of `seq_len` (unset: `fallback_len`), capped by `context`."""
        max_len = min(self.seq_len or fallback_len, context)
        return heldout_eval_set(self.path, self.split, tokenizer, max_len, self.max_tokens)

    def train_texts(self) -> list[str]:
        return split_texts(self.path, "train")

    def settings(self) -> dict:
        """The `eval:` keys the curvature stage's windows read (split, max_tokens, seq_len, batch_size)."""
        return {
            "split": self.split,
            "max_tokens": self.max_tokens,
            "seq_len": self.seq_len,
            "batch_size": self.batch_size,
        }
