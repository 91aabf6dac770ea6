"""The shared cache of a task's tokenized training split (pipeline/data/tokenizer.py)."""

import numpy as np

from pipeline.data.tokenizer import cached_token_stream, token_stream


def test_cached_tokens_equal_fresh_ones_and_are_written_once(tokenizer, moby_docs, tmp_path):
    texts = [d.text for d in moby_docs[:20]]
    fresh = token_stream(tokenizer, texts)
    first = cached_token_stream(tokenizer, texts, tmp_path)
    (cached,) = list(tmp_path.glob("*.npy"))
    stamp = cached.stat().st_mtime_ns
    again = cached_token_stream(tokenizer, texts, tmp_path)
    assert np.array_equal(first, fresh) and np.array_equal(again, fresh) and again.dtype == fresh.dtype
    assert cached.stat().st_mtime_ns == stamp  # read, not rewritten
    # other texts are another entry, never the cached tokens
    other = cached_token_stream(tokenizer, texts[:-1], tmp_path)
    assert len(list(tmp_path.glob("*.npy"))) == 2 and np.array_equal(
        other, token_stream(tokenizer, texts[:-1])
    )
    assert np.array_equal(cached_token_stream(tokenizer, texts, None), fresh)
