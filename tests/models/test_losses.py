"""The chunked fused output layer + cross-entropy: same loss and gradients as full logits."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import pipeline.train.loop
from pipeline.data.batches import IGNORE_INDEX, ChunkSampler
from pipeline.data.tokenizer import token_stream
from pipeline.models.losses import body_hidden, fused_head, fused_linear_cross_entropy, linear_nll_sum
from pipeline.train.config import TrainConfig
from pipeline.train.loop import train


@pytest.fixture(scope="module")
def tokens(tokenizer, moby_docs):
    return token_stream(tokenizer, [d.text for d in moby_docs[:5]])


def _hidden_and_labels(model, tokens, rows=5, seq=60):
    """Real final hidden states of the tiny model on Moby-Dick, with unscored rows mixed in."""
    x = torch.from_numpy(tokens[: rows * seq + 1].astype(np.int64))
    inputs, labels = x[:-1].reshape(rows, seq), x[1:].reshape(rows, seq).clone()
    labels[0, :7] = IGNORE_INDEX  # e.g. a prompt
    labels[3, 40:] = IGNORE_INDEX  # e.g. padding
    with torch.no_grad():
        hidden = body_hidden(fused_head(model).body, inputs)
    return hidden.reshape(-1, hidden.size(-1)), labels.reshape(-1)


@pytest.mark.parametrize("kernel", ["cpu", "logp"])  # logp: the accelerators' kernel, forced here
@pytest.mark.parametrize("chunk_size", [64, 7, 4096])  # 300 rows: chunks that do not divide N, and one chunk
def test_fused_loss_and_gradients_equal_full_logits(tiny_model, tokens, chunk_size, kernel):
    hidden, labels = _hidden_and_labels(tiny_model, tokens)
    weight = tiny_model.lm_head.weight.detach()

    h_ref, w_ref = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    ref = F.cross_entropy(h_ref @ w_ref.T, labels, ignore_index=IGNORE_INDEX)
    (2.5 * ref).backward()  # an upstream gradient other than 1

    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    loss = fused_linear_cross_entropy(h, w, labels, chunk_size=chunk_size, kernel=kernel)
    (2.5 * loss).backward()

    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, ref, rtol=1e-6, atol=0)
    for got, want in ((h.grad, h_ref.grad), (w.grad, w_ref.grad)):  # float32 sums in another order
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))
    ignored = (labels == IGNORE_INDEX).nonzero().squeeze(1)
    assert len(ignored) == 27 and torch.count_nonzero(h.grad[ignored]) == 0


def test_fused_loss_skips_gradients_not_asked_for(tiny_model, tokens):
    hidden, labels = _hidden_and_labels(tiny_model, tokens)
    w = tiny_model.lm_head.weight.detach().clone().requires_grad_()
    fused_linear_cross_entropy(hidden, w, labels, chunk_size=100).backward()  # frozen inputs, trainable head
    want = torch.autograd.grad(F.cross_entropy(hidden @ w.T, labels), w)[0]
    torch.testing.assert_close(w.grad, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))
    with torch.no_grad():
        torch.testing.assert_close(
            fused_linear_cross_entropy(hidden, w, labels),
            F.cross_entropy(hidden @ w.T, labels),
            rtol=1e-6,
            atol=0,
        )


def test_eval_nll_sum_equals_full_logits(tiny_model, tokens):
    hidden, labels = _hidden_and_labels(tiny_model, tokens)
    weight = tiny_model.lm_head.weight.detach()
    scored = labels != IGNORE_INDEX
    want = F.cross_entropy(hidden @ weight.T, labels, ignore_index=IGNORE_INDEX, reduction="sum")
    torch.testing.assert_close(
        linear_nll_sum(hidden[scored], weight, labels[scored], chunk_size=50), want, rtol=1e-6, atol=0
    )


@pytest.mark.parametrize(
    "offset", [0.0, 120.0, -150.0]
)  # logits near 0, past exp2's float32 range, all far below 0
@pytest.mark.parametrize("kernel", ["cpu", "logp"])
def test_extreme_logits_give_the_same_loss_and_gradients(tiny_model, tokens, offset, kernel):
    """Rows whose unshifted 2^logit would overflow or underflow take the max-shifted path (CPU)."""
    hidden, labels = _hidden_and_labels(tiny_model, tokens, rows=4, seq=30)
    weight = tiny_model.lm_head.weight.detach()
    # a constant added to every logit of some rows: one column of ones in hidden and weight
    h0 = torch.cat([hidden, torch.zeros(len(hidden), 1)], 1)
    h0[::3, -1] = offset
    w0 = torch.cat([weight, torch.ones(len(weight), 1)], 1)
    ref_h, ref_w = h0.clone().requires_grad_(), w0.clone().requires_grad_()
    ref = F.cross_entropy(ref_h @ ref_w.T, labels, ignore_index=IGNORE_INDEX)
    ref.backward()
    h, w = h0.clone().requires_grad_(), w0.clone().requires_grad_()
    loss = fused_linear_cross_entropy(h, w, labels, chunk_size=16, kernel=kernel)
    loss.backward()
    assert torch.isfinite(loss)
    torch.testing.assert_close(loss, ref, rtol=1e-6, atol=0)
    # the added column's gradient is 0 in exact arithmetic (softmax - onehot sums to 0): rounding only
    for got, want in ((h.grad[:, :-1], ref_h.grad[:, :-1]), (w.grad, ref_w.grad)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))
    scored = labels != IGNORE_INDEX
    want = F.cross_entropy(h0 @ w0.T, labels, ignore_index=IGNORE_INDEX, reduction="sum")
    torch.testing.assert_close(
        linear_nll_sum(h0[scored], w0, labels[scored], chunk_size=16), want, rtol=1e-6, atol=0
    )


def test_bf16_model_gives_a_float32_accurate_loss(tiny_model, tokens):
    model = tiny_model.to(torch.bfloat16)
    hidden, labels = _hidden_and_labels(model, tokens)
    w = model.lm_head.weight.detach().clone().requires_grad_()
    h = hidden.clone().requires_grad_()
    assert h.dtype == w.dtype == torch.bfloat16

    loss = fused_linear_cross_entropy(h, w, labels, chunk_size=64)
    loss.backward()
    exact = F.cross_entropy(
        hidden.double() @ w.detach().double().T, labels
    )  # the same bf16 numbers, float64 arithmetic
    bf16_logits = F.cross_entropy(
        (hidden @ w.detach().T).float(), labels
    )  # what rounding the logits to bf16 gives
    assert loss.dtype == torch.float32 and h.grad.dtype == w.grad.dtype == torch.bfloat16
    assert abs(loss.item() - exact.item()) < 1e-5 * exact.item()
    assert abs(loss.item() - exact.item()) < abs(bf16_logits.item() - exact.item())
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast does not lower the head's precision either
        assert (
            abs(fused_linear_cross_entropy(hidden, w.detach(), labels).item() - exact.item())
            < 1e-5 * exact.item()
        )


def test_fused_head_of_a_plain_causal_lm(tiny_model):
    head = fused_head(tiny_model)
    assert head.body is tiny_model.model and head.weight is tiny_model.lm_head.weight
    assert tiny_model.training  # the probe pass restores the mode


def test_fallback_for_a_head_with_bias(tiny_model):
    old = tiny_model.lm_head
    tiny_model.lm_head = torch.nn.Linear(old.in_features, old.out_features, bias=True)
    assert fused_head(tiny_model) is None


def test_fallback_for_logit_transforms(tiny_model):
    tiny_model.config.final_logit_softcapping = 30.0  # Gemma-2 style, named in the config
    assert fused_head(tiny_model) is None
    tiny_model.config.final_logit_softcapping = None
    assert fused_head(tiny_model) is not None

    def halve_logits(module, args, output):  # a transform no config field announces
        output.logits = output.logits / 2
        return output

    tiny_model.register_forward_hook(halve_logits)
    assert fused_head(tiny_model) is None


def test_training_through_the_fused_head_matches_the_full_logits_path(tiny_model, tokens, monkeypatch):
    sampler = ChunkSampler(tokens, 32, 4, seed=0)
    cfg = TrainConfig(steps=8, lr=1e-2, log_every=1)
    init = {k: v.clone() for k, v in tiny_model.state_dict().items()}
    fused = train(tiny_model, sampler.batch, cfg)
    fused_weights = {k: v.clone() for k, v in tiny_model.state_dict().items()}

    tiny_model.load_state_dict(init)
    monkeypatch.setattr(pipeline.train.loop, "fused_head", lambda model: None)
    full = train(tiny_model, sampler.batch, cfg)
    np.testing.assert_allclose(fused.losses, full.losses, rtol=1e-5)
    for k, v in tiny_model.state_dict().items():
        torch.testing.assert_close(
            fused_weights[k], v, rtol=1e-4, atol=2e-5
        )  # Adam magnifies 1e-7 differences of near-zero gradients


def test_tied_embeddings_get_the_gradient_of_both_uses(tiny_model, tokens):
    tiny_model.lm_head.weight = tiny_model.model.embed_tokens.weight  # input and output embedding shared
    head = fused_head(tiny_model)
    body, weight = head.body, head.weight
    assert weight is tiny_model.model.embed_tokens.weight
    x = torch.from_numpy(tokens[:129].astype(np.int64))
    inputs, labels = x[:-1].reshape(2, 64), x[1:].reshape(2, 64)

    F.cross_entropy(
        tiny_model(input_ids=inputs).logits.reshape(-1, weight.size(0)), labels.reshape(-1)
    ).backward()
    want = {n: p.grad.clone() for n, p in tiny_model.named_parameters()}
    tiny_model.zero_grad()
    fused_linear_cross_entropy(body_hidden(body, inputs), weight, labels).backward()
    for n, p in tiny_model.named_parameters():
        torch.testing.assert_close(p.grad, want[n], rtol=1e-4, atol=1e-5 * float(want[n].abs().max()))


def test_the_heads_low_precision_matmuls_follow_autocasts_own_head(monkeypatch):
    """The bf16 path of the head's matmuls (taken under CUDA autocast; forced here on the CPU):
    loss and gradients agree with autocast's `F.cross_entropy((h @ w.T).float())` to bf16 rounding."""
    from pipeline.models import losses

    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(600, 64, generator=gen)
    weight = 0.1 * torch.randn(500, 64, generator=gen)
    labels = torch.randint(0, 500, (600,), generator=gen)
    labels[::5] = IGNORE_INDEX
    monkeypatch.setattr(losses, "matmul_dtype", lambda hidden: torch.bfloat16)
    results = []
    for fused in (True, False):
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = None if fused else h @ w.T
            loss = (
                fused_linear_cross_entropy(h, w, labels, chunk_size=128)
                if fused
                else F.cross_entropy(logits.float(), labels)
            )
        loss.backward()
        results.append((loss.detach(), h.grad, w.grad))
    (loss, gh, gw), (ref, rh, rw) = results
    assert loss.dtype == torch.float32 and abs(loss.item() - ref.item()) < 2e-3 * ref.item()
    for got, want in ((gh, rh), (gw, rw)):
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, want, rtol=3e-2, atol=3e-2 * float(want.abs().max()))


class _LargestLogits(TorchDispatchMode):
    """The most elements of any float32 tensor an op makes with the vocabulary as its last dimension."""

    def __init__(self, vocab: int):
        super().__init__()
        self.vocab, self.largest = vocab, 0

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if (
                isinstance(t, torch.Tensor)
                and t.dtype == torch.float32
                and t.dim()
                and t.shape[-1] == self.vocab
            ):
                self.largest = max(self.largest, t.numel())
        return out


def test_training_and_evaluation_go_through_the_fused_head_without_full_logits(
    tiny_model, tokens, tokenizer, moby_docs, monkeypatch
):
    """One process: a training step, held-out perplexity and classification scores call the fused
    head (spied on) and no op makes a float32 tensor of (rows x positions x vocabulary) logits;
    the scores equal the model's own logits'."""
    from pipeline.data.encode import EncodedChoices
    from pipeline.data.heldout import build_eval_set
    from pipeline.data.tokenizer import encode_documents
    from pipeline.evaluate.perplexity import eval_perplexity
    from pipeline.evaluate.tasks import choice_logprobs
    from pipeline.models import losses

    vocab = tiny_model.config.vocab_size
    monkeypatch.setitem(losses.CHUNK_BYTES, "cpu", 4 * vocab * 16)  # 16 rows per chunk
    calls = {"fused_linear_cross_entropy": 0, "linear_nll": 0, "linear_nll_sum": 0}
    for name in calls:
        real = getattr(losses, name)

        def spy(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(losses, name, spy)
    texts = [d.text[:2000] for d in moby_docs[:2]]
    held = build_eval_set(
        encode_documents(tokenizer, texts), texts, tokenizer.eos_token_id, 64, tokenizer.pad_token_id
    )
    items = EncodedChoices(
        prompts=[list(tokens[:20]), list(tokens[20:50])],
        choices=[[list(tokens[50:52]), list(tokens[52:55])]] * 2,
        labels=np.array([0, 1]),
        prefix=tokenizer.eos_token_id,
        max_len=64,
    )
    sampler = ChunkSampler(tokens, 32, 4, seed=0)
    mode = _LargestLogits(vocab)
    with mode:
        train(tiny_model, sampler.batch, TrainConfig(steps=2, lr=1e-2, log_every=1))
        assert calls["fused_linear_cross_entropy"] == 2
        ppl = eval_perplexity(tiny_model, held, batch_size=8)
        scores = choice_logprobs(tiny_model, items, tokenizer.pad_token_id)
    assert calls["linear_nll_sum"] > 0 and calls["linear_nll"] > 0  # perplexity, classification
    assert mode.largest <= 32 * vocab  # a chunk's (and the probe's 8 tokens), never 4 x 32 x vocab

    monkeypatch.setattr(losses, "fused_head", lambda model: None)  # the reference: the model's own logits
    import pipeline.evaluate.perplexity
    import pipeline.evaluate.tasks

    monkeypatch.setattr(pipeline.evaluate.perplexity, "fused_head", lambda model: None)
    monkeypatch.setattr(pipeline.evaluate.tasks, "fused_head", lambda model: None)
    full = _LargestLogits(vocab)
    with full:
        assert eval_perplexity(tiny_model, held, batch_size=8)["loss"] == pytest.approx(ppl["loss"], rel=1e-6)
        want_scores = choice_logprobs(tiny_model, items, tokenizer.pad_token_id)
    assert full.largest >= 8 * 64 * vocab  # the check sees full logits where they are made
    for got, want in zip(scores, want_scores):
        np.testing.assert_allclose(got, want, rtol=1e-5)
