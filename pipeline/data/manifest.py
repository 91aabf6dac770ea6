"""What the model is pre-trained on, measured: the corpus mix (documents, bytes and tokens per source
and split, each source's share of the training tokens), the token coverage of the fine-tuning
tasks (the share of a task's evaluation tokens whose id never occurs as a pre-training target), and
the held-out split's reference perplexities (a unigram model of the training targets; a uniform
guess over the vocabulary): what a model that learned only token frequencies, or nothing, scores.

Why the coverage: an id that pre-training never predicts only has its logit pushed down, so a task
made of such ids starts far worse than a uniform guess and fine-tuning mostly un-suppresses them; a
toy whose tasks do that measures an artefact, not overtraining (the paper's OLMo on C4 has modest
perplexity on code). The default study keeps every task's unseen share at most `MAX_UNSEEN`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

log = logging.getLogger(__name__)

MAX_UNSEEN = 0.001  # the default study's target: at most 0.1% of a task's test tokens unseen


def corpus_manifest(corpus: pd.DataFrame, n_tokens: Sequence[int], kinds: Mapping[str, str]) -> pd.DataFrame:
    """Per (source, split): documents, bytes, tokens (documents with their end-of-text token), and the
    source's share of the training split's tokens. `corpus`: the document table (data/corpus.parquet);
    `n_tokens`: each document's token count, in its row order; `kinds`: source -> prose | code | math
    (a source not named: `other`)."""
    df = corpus.assign(tokens=np.asarray(n_tokens, dtype=np.int64))
    out = (
        df.groupby(["source", "split"], sort=True)
        .agg(documents=("doc_id", "size"), bytes=("n_bytes", "sum"), tokens=("tokens", "sum"))
        .reset_index()
    )
    out.insert(1, "kind", out["source"].map(lambda s: kinds.get(s, "other")))
    train_tokens = out.loc[out["split"] == "train", "tokens"].sum()
    out["train_share"] = np.where(out["split"] == "train", out["tokens"] / max(train_tokens, 1), np.nan)
    return out


def target_counts(tokens: Any, chunk: int = 2**24, log_every_s: float = 30.0) -> np.ndarray:
    """How often each id occurs as a pre-training target in `tokens` (every position after the first;
    anything with `len` and slices: a token array, or the shards' TokenStream), read `chunk` ids at a
    time, so a sweep's shards of any size are scanned in constant memory; progress logged every
    `log_every_s`."""
    counts = np.zeros(0, dtype=np.int64)
    total, t0, last = len(tokens), time.monotonic(), time.monotonic()
    for start in range(1, total, chunk):
        ids = np.asarray(tokens[start : start + chunk], dtype=np.int64)
        add = np.bincount(ids, minlength=len(counts))
        counts = np.concatenate([counts, np.zeros(len(add) - len(counts), dtype=np.int64)]) + add
        if time.monotonic() - last > log_every_s:
            last, done = time.monotonic(), start + len(ids)
            rate = done / (last - t0)
            log.info("read %d of %d tokens (%.0f tok/s, ETA %.0fs)", done, total, rate, (total - done) / rate)
    return counts


def seen_targets(tokens: Any, chunk: int = 2**24) -> np.ndarray:
    """Which ids occur as a pre-training target in `tokens` (`target_counts` > 0)."""
    return target_counts(tokens, chunk) > 0


def token_coverage(seen: np.ndarray, task_tokens: Mapping[tuple[str, str], Sequence[int]]) -> pd.DataFrame:
    """Per (task, split): its tokens, how many have an id that never occurs as a pre-training target
    (`seen`, from `seen_targets`), that share, and the distinct unseen ids. `task_tokens`:
    (task, split) -> the split's token ids (all documents)."""
    rows = []
    for (task, split), ids in task_tokens.items():
        ids = np.asarray(ids, dtype=np.int64)
        unseen = ids >= len(seen)
        unseen[~unseen] = ~seen[ids[~unseen]]
        rows.append(
            {
                "task": task,
                "split": split,
                "tokens": int(len(ids)),
                "unseen_tokens": int(unseen.sum()),
                "unseen_share": float(unseen.mean()) if len(ids) else float("nan"),
                "unseen_ids": int(len(np.unique(ids[unseen]))),
            }
        )
    return pd.DataFrame(rows)


def reference_perplexity(counts: np.ndarray, heldout: np.ndarray, vocab_size: int) -> dict[str, float]:
    """The perplexity on the held-out target ids `heldout` of the add-one-smoothed unigram model of the
    training targets (`target_counts`) over `vocab_size` ids, and of a uniform guess (= vocab_size).
    A fine-tuned model whose pre-training perplexity exceeds the unigram's has forgotten more than
    all of pre-training's context: pipeline/analysis/claims.py leaves such rates out of the U claims."""
    counts = np.concatenate([counts, np.zeros(max(vocab_size - len(counts), 0), dtype=np.int64)])[:vocab_size]
    log_p = np.log(counts + 1.0) - np.log(counts.sum() + vocab_size)
    ids = np.asarray(heldout, dtype=np.int64)
    if not len(ids) or ids.max() >= vocab_size:
        raise ValueError(f"held-out ids must be non-empty and below the vocabulary size {vocab_size}")
    return {"unigram_ppl": float(np.exp(-log_p[ids].mean())), "uniform_ppl": float(vocab_size)}
