"""Held-out pre-training perplexity: the corpus's held-out split as rolling windows. Every stage that
reports pre-training perplexity (perturbation grids, fine-tuning) evaluates on this set."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pipeline.data.tokenizer import encode_documents
from pipeline.evaluate.perplexity import EvalSet, build_eval_set, select_documents

EVAL_METRICS = ("ppl", "bpb", "loss")


def heldout_eval_set(
    corpus_path: str | Path, split: str, tokenizer, max_len: int, max_tokens: int | None
) -> EvalSet:
    """The pre-training corpus's held-out `split` as rolling windows for `tokenizer`."""
    corpus = pd.read_parquet(corpus_path)
    texts = corpus.loc[corpus["split"] == split, "text"].tolist()
    if not texts:
        raise ValueError(f"eval.split: the corpus has no documents in split {split!r}")
    token_docs = encode_documents(tokenizer, texts)
    texts, token_docs = select_documents(texts, token_docs, max_tokens)
    prefix = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    return build_eval_set(token_docs, texts, prefix, max_len, tokenizer.pad_token_id)
