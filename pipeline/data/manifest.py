"""What the model is pre-trained on, measured: the corpus mix (documents, bytes and tokens per source
and split, each source's share of the training tokens) and the token coverage of the fine-tuning
tasks (the share of a task's evaluation tokens whose id never occurs as a pre-training target).

Why the coverage: an id that pre-training never predicts only has its logit pushed down, so a task
made of such ids starts far worse than a uniform guess and fine-tuning mostly un-suppresses them; a
toy whose tasks do that measures an artefact, not overtraining (the paper's OLMo on C4 has modest
perplexity on code). The default study keeps every task's unseen share at most `MAX_UNSEEN`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

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


def token_coverage(
    train_tokens: np.ndarray, task_tokens: Mapping[tuple[str, str], Sequence[int]]
) -> pd.DataFrame:
    """Per (task, split): its tokens, how many have an id that never occurs as a target in
    `train_tokens` (every position after the first is some chunk's target), that share, and the
    distinct unseen ids. `task_tokens`: (task, split) -> the split's token ids (all documents)."""
    top = max(
        [int(np.max(train_tokens, initial=0))] + [int(np.max(v, initial=0)) for v in task_tokens.values()]
    )
    seen = np.zeros(top + 1, dtype=bool)
    seen[np.asarray(train_tokens[1:], dtype=np.int64)] = True
    rows = []
    for (task, split), ids in task_tokens.items():
        ids = np.asarray(ids, dtype=np.int64)
        unseen = ~seen[ids]
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
