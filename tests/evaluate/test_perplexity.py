"""Pre-training perplexity: window scheme and agreement with lm-eval's loglikelihood_rolling."""

import math

import pytest

from pipeline.data.batches import IGNORE_INDEX
from pipeline.data.heldout import build_eval_set, rolling_windows
from pipeline.data.tokenizer import encode_documents
from pipeline.evaluate.perplexity import eval_perplexity


def test_rolling_windows_score_every_token_once():
    tokens = list(range(100, 100 + 23))
    windows = rolling_windows(tokens, prefix_token=0, max_len=8)
    scored = [t for _, tgt in windows for t in tgt]
    assert scored == tokens
    for inp, tgt in windows:
        assert len(inp) <= 8 and len(tgt) <= len(inp)
    assert windows[0][0][0] == 0  # the first token is predicted from the prefix token


def test_eval_set_labels_only_scored_targets(tokenizer, moby_docs):
    texts = [d.text for d in moby_docs[:3]]
    docs = encode_documents(tokenizer, texts)
    data = build_eval_set(docs, texts, tokenizer.eos_token_id, 64, tokenizer.pad_token_id)
    assert int((data.labels != IGNORE_INDEX).sum()) == data.n_tokens == sum(map(len, docs))
    assert data.n_bytes == sum(len(t.encode()) for t in texts)


def _train_a_little(model, tokenizer, texts, steps=30):
    """A few steps of training so the comparison is not made on a uniform model."""
    from pipeline.data.batches import ChunkSampler
    from pipeline.data.tokenizer import token_stream
    from pipeline.train.config import TrainConfig
    from pipeline.train.loop import train

    stream = token_stream(tokenizer, texts)
    sampler = ChunkSampler(stream, 64, 8, seed=0)
    train(model, sampler.batch, TrainConfig(steps=steps, lr=1e-2, log_every=10))


def test_bits_per_byte_matches_lm_eval_rolling(tiny_model, tokenizer, moby_docs):
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    _train_a_little(tiny_model, tokenizer, [d.text for d in moby_docs[10:40]])
    texts = [d.text[:3000] for d in moby_docs[60:66]]  # real held-out text, several windows per doc
    docs = encode_documents(tokenizer, texts)
    ours = eval_perplexity(
        tiny_model,
        build_eval_set(docs, texts, tokenizer.eos_token_id, 64, tokenizer.pad_token_id),
        batch_size=16,
    )

    lm = HFLM(pretrained=tiny_model, tokenizer=tokenizer, max_length=64, batch_size=16)
    requests = [
        Instance(request_type="loglikelihood_rolling", doc={}, arguments=(t,), idx=i)
        for i, t in enumerate(texts)
    ]
    loglik = sum(lm.loglikelihood_rolling(requests, disable_tqdm=True))
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    lm_eval_bpb = -loglik / n_bytes / math.log(2)
    print(f"ours {ours['bpb']:.6f} bpb, lm-eval {lm_eval_bpb:.6f} bpb")
    assert ours["bpb"] == pytest.approx(lm_eval_bpb, rel=0.005)
    assert ours["ppl"] == pytest.approx(math.exp(ours["loss"]))
    assert ours["ppl"] < len(tokenizer)  # trained a little: better than uniform


def test_eval_is_batch_size_invariant(tiny_model, tokenizer, moby_docs):
    texts = [d.text[:2000] for d in moby_docs[:4]]
    docs = encode_documents(tokenizer, texts)
    data = build_eval_set(docs, texts, tokenizer.eos_token_id, 64, tokenizer.pad_token_id)
    a = eval_perplexity(tiny_model, data, batch_size=1)["loss"]
    b = eval_perplexity(tiny_model, data, batch_size=64)["loss"]
    assert a == pytest.approx(b, rel=1e-5)


def test_eval_through_the_fused_head_matches_full_logits(tiny_model, tokenizer, moby_docs, monkeypatch):
    import pipeline.evaluate.perplexity

    _train_a_little(tiny_model, tokenizer, [d.text for d in moby_docs[10:20]], steps=10)
    texts = [d.text[:2500] for d in moby_docs[60:64]]
    data = build_eval_set(
        encode_documents(tokenizer, texts), texts, tokenizer.eos_token_id, 64, tokenizer.pad_token_id
    )
    assert int((data.labels == IGNORE_INDEX).sum()) > 0  # padded windows: unscored positions are skipped
    fused = eval_perplexity(tiny_model, data, batch_size=16)
    monkeypatch.setattr(pipeline.evaluate.perplexity, "fused_head", lambda model: None)
    full = eval_perplexity(tiny_model, data, batch_size=16)
    assert fused["loss"] == pytest.approx(full["loss"], rel=1e-6)
    assert fused["bpb"] == pytest.approx(full["bpb"], rel=1e-6)
