"""Small-head CPU attention: the same outputs and gradients as transformers' SDPA / eager attention."""

import copy
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from pipeline.data.heldout import build_eval_set
from pipeline.data.tokenizer import encode_documents
from pipeline.evaluate.perplexity import eval_perplexity
from pipeline.models.attention import (
    NAME,
    SCORE_BYTES,
    _group_size,
    small_head_attention,
    use_small_head_attention,
)
from pipeline.models.build import build_model, model_config


def _reference(q, k, v, mask):
    """softmax(QKᵀ/√d + mask) V in float64, as (B, T, H, D); mask: bool (True = attend) or None (causal)."""
    q, k, v = (x.double() for x in (q, k, v))
    t = q.size(2)
    keep = torch.ones(t, t, dtype=torch.bool).tril() if mask is None else mask
    scores = (q @ k.transpose(-1, -2)) * q.size(-1) ** -0.5
    scores = scores.masked_fill(~keep, torch.finfo(torch.float64).min)
    return (scores.softmax(-1) @ v).transpose(1, 2)


@pytest.mark.parametrize(
    "b,h,t,d",
    [
        (3, 4, 40, 8),
        (2, 4, 300, 8),
        (5, 2, 64, 4),
    ],  # groups of whole batches; groups inside a batch (T=300); odd shapes
)
@pytest.mark.parametrize("masked", [False, True])
def test_outputs_and_gradients_equal_the_reference(b, h, t, d, masked):
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, t, d, requires_grad=True) for _ in range(3))
    mask = None
    if masked:  # right padding in one sequence, left padding in another (queries that see nothing)
        lengths = torch.full((b,), t)
        lengths[0] = t // 2
        pad = torch.arange(t)[None, :] < lengths[:, None]
        pad[-1, : t // 4] = False
        mask = (torch.ones(t, t, dtype=torch.bool).tril()[None] & pad[:, None, :])[:, None]  # (B, 1, T, T)
    valid = (
        torch.ones(b, t, dtype=torch.bool) if mask is None else mask[:, 0].any(-1)
    )  # queries that see something
    out = small_head_attention(q, k, v, mask, d**-0.5)
    ref = _reference(q, k, v, mask)
    assert out.shape == (b, t, h, d)
    torch.testing.assert_close(out[valid].double(), ref[valid], rtol=1e-5, atol=1e-6)

    g = torch.randn(b, t, h, d) * valid[:, :, None, None]  # no gradient from queries that see nothing
    grads = torch.autograd.grad(out, (q, k, v), g)
    qr, kr, vr = (x.detach().double().requires_grad_() for x in (q, k, v))
    want = torch.autograd.grad(_reference(qr, kr, vr, mask), (qr, kr, vr), g.double())
    for got, exp in zip(grads, want):
        torch.testing.assert_close(got.double(), exp, rtol=1e-4, atol=1e-5)


def test_group_sizes_cover_whole_batches_or_divide_the_heads():
    assert _group_size(64, 4, 128) == SCORE_BYTES // (4 * 128 * 128)  # 16: a multiple of 4 heads
    assert _group_size(6, 4, 128) == 6  # fewer slices than a group
    for heads, t in ((4, 300), (6, 300), (3, 512), (4, 2048)):
        step = _group_size(64, heads, t)
        assert heads % step == 0 and step * 4 * t * t <= max(SCORE_BYTES, 4 * t * t)


def test_model_uses_it_only_for_small_heads(tmp_path):
    tiny = build_model(model_config("tiny", 512, 0, 1), seed=0)
    assert tiny.config._attn_implementation == NAME  # head dim 8
    wide = build_model(model_config("olmo-15m", 512, 0, 1), seed=0)
    assert (
        wide.config._attn_implementation == "sdpa"
    )  # head dim 64: SDPA is as fast (bench/bench_attention.py)
    eager = build_model(model_config("tiny", 512, 0, 1), seed=0)
    eager.set_attn_implementation("eager")
    assert not use_small_head_attention(eager) and eager.config._attn_implementation == "eager"
    tiny.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert NAME not in json.dumps(saved)  # a runtime choice: other programs load the checkpoint as usual


def _sdpa_copy(model):
    other = build_model(copy.deepcopy(model.config), seed=0)  # set_attn_implementation changes the config
    other.load_state_dict(model.state_dict())
    other.set_attn_implementation("sdpa")
    return other


def test_model_outputs_and_gradients_equal_sdpa(tiny_model):
    other = _sdpa_copy(tiny_model)
    assert tiny_model.config._attn_implementation == NAME
    x = torch.randint(0, tiny_model.config.vocab_size, (4, 64), generator=torch.Generator().manual_seed(0))
    logits = []
    for model in (tiny_model, other):
        model.zero_grad()
        out = model(input_ids=x, labels=x)
        out.loss.backward()
        logits.append(out.logits.detach())
    torch.testing.assert_close(logits[0], logits[1], rtol=1e-5, atol=1e-5)
    for (name, p), q in zip(tiny_model.named_parameters(), other.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_generation_with_a_kv_cache_matches_sdpa(tiny_model):
    """Decoding steps (one query, cached keys) go to SDPA; greedy tokens are those of an SDPA model."""
    other = _sdpa_copy(tiny_model)
    prompt = torch.tensor([[5, 17, 99, 3]])
    kw = {"max_new_tokens": 12, "do_sample": False, "pad_token_id": 1}
    assert torch.equal(tiny_model.eval().generate(prompt, **kw), other.eval().generate(prompt, **kw))


def test_attention_dropout_in_training_goes_to_sdpa():
    from pipeline.models.attention import applies

    class Module(torch.nn.Module):
        pass

    m = Module()
    q = torch.randn(1, 2, 8, 8)
    assert applies(m, q, q, 0.0, {})
    m.train()
    assert not applies(m, q, q, 0.1, {})  # dropout while training
    m.eval()
    assert applies(m, q, q, 0.1, {})  # dropout is off in eval
    assert not applies(m, q.bfloat16(), q.bfloat16(), 0.0, {})
    assert not applies(m, q[:, :, :1], q, 0.0, {})  # a decoding step


def test_eval_is_the_same_with_one_or_two_threads(tiny_model, tokenizer, moby_docs):
    """Batches spread over Python threads (pipeline.runtime.map_cpu_threads) give bit-identical sums."""
    texts = [d.text for d in moby_docs[:4]]
    data = build_eval_set(
        encode_documents(tokenizer, texts), texts, tokenizer.eos_token_id, 64, tokenizer.pad_token_id
    )
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = eval_perplexity(tiny_model, data, batch_size=8)
        torch.set_num_threads(2)
        two = eval_perplexity(tiny_model, data, batch_size=8)
        assert torch.get_num_threads() == 2  # restored after the workers
    finally:
        torch.set_num_threads(threads)
    assert one["loss"] == two["loss"] and one["bpb"] == two["bpb"]


def test_keep_freed_memory_stops_page_faults():
    """Median page faults per forward pass of the tiny model (batch 64x128) in a fresh process,
    with glibc's default mmap threshold (128 KiB; held fixed, as glibc's own adaptation of it
    comes and goes between runs) and with keep_freed_memory."""
    code = """
import resource, statistics, sys, torch
from pipeline.models.build import build_model, model_config
from pipeline.runtime import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
torch.set_num_threads(1)
model = build_model(model_config("tiny", 2048, 0, 1), seed=0).eval()
x = torch.randint(0, 2048, (64, 128))
faults = []
with torch.inference_mode():
    for i in range(23):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        model.model(input_ids=x)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(statistics.median(faults[3:]))
"""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(128 << 10)}

    def run(mode):
        proc = subprocess.run(
            [sys.executable, "-c", code, mode], capture_output=True, text=True, check=True, env=env
        )
        return float(proc.stdout)

    faults = {mode: run(mode) for mode in ("default", "keep")}
    assert faults["default"] > 500, faults  # freed blocks go back to the kernel
    assert faults["keep"] < 10, faults  # 0 measured


def test_sdpa_reference_agrees_with_torch():
    """The float64 reference above is SDPA's definition (guards the test itself)."""
    q, k, v = (torch.randn(2, 3, 16, 8) for _ in range(3))
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)
    torch.testing.assert_close(_reference(q, k, v, None).float(), want, rtol=1e-5, atol=1e-6)
