"""Held-out windows (pipeline/data/heldout.py): tokenizing only the leading documents that
`max_tokens` keeps gives the set that tokenizing the whole split gives."""

import pytest
import torch

from pipeline.data.heldout import build_eval_set, encode_leading, lm_eval_set, select_documents
from pipeline.data.tokenizer import encode_documents


def whole_split_set(tokenizer, texts, max_len, max_tokens):
    """The set as built before `encode_leading`: every document tokenized, then selected."""
    texts, docs = select_documents(texts, encode_documents(tokenizer, texts), max_tokens)
    return build_eval_set(docs, texts, tokenizer.eos_token_id, max_len, tokenizer.pad_token_id)


@pytest.mark.parametrize("max_tokens", [None, 0, 1, 3000, 20000, 10**9])
def test_leading_documents_give_the_whole_splits_set(tokenizer, moby_docs, max_tokens):
    # short and empty documents among long ones: a cut at every kind of boundary
    texts = [d.text[: 200 * ((i + 1) % 7)] for i, d in enumerate(moby_docs[:80])]
    fast = lm_eval_set(tokenizer, texts, 64, max_tokens)
    slow = whole_split_set(tokenizer, texts, 64, max_tokens)
    assert torch.equal(fast.inputs, slow.inputs) and torch.equal(fast.labels, slow.labels)
    assert (fast.n_tokens, fast.n_bytes, fast.n_documents) == (slow.n_tokens, slow.n_bytes, slow.n_documents)


def test_only_the_documents_needed_are_tokenized(tokenizer, moby_docs):
    texts = [d.text[:2000] for d in moby_docs[:200]]
    docs = encode_leading(tokenizer, texts, 5000, first_batch=4)
    counts = [len(d) for d in docs]
    assert sum(counts) > 5000 >= sum(counts[:-1])  # up to the first document past the cap
    assert docs == encode_documents(tokenizer, texts[: len(docs)])
    assert len(docs) < len(texts)
