"""Checks that need a CUDA device (skipped without one). Self-contained (no conftest fixtures, no
data packages), so the GPU kit runs them on a bare GPU machine: `make gpu-check`
(bench/gpu_check.py) runs `pytest --noconftest -m cuda tests/test_cuda.py`."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import Olmo2Config, Olmo2ForCausalLM

from pipeline.data.batches import IGNORE_INDEX
from pipeline.models.losses import fused_linear_cross_entropy, linear_nll_sum
from pipeline.models.shapes import shape_of
from pipeline.sweeps.noise import perturbed
from pipeline.train.config import TrainConfig
from pipeline.train.loop import train
from pipeline.train.memory import estimate
from pipeline.train.recompute import enable_activation_checkpointing

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def olmo2(hidden=64, layers=2, intermediate=256, vocab=512, seed=0) -> Olmo2ForCausalLM:
    torch.manual_seed(seed)
    config = Olmo2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // 64),
        max_position_embeddings=1024,
        pad_token_id=0,
        bos_token_id=0,
        eos_token_id=0,
    )
    config._attn_implementation = "sdpa"
    return Olmo2ForCausalLM(config).cuda()


def batches(vocab: int, batch: int, seq_len: int):
    def batch_fn(step: int) -> dict[str, torch.Tensor]:
        rows = torch.randint(1, vocab, (batch, seq_len + 1), generator=torch.Generator().manual_seed(step))
        return {"input_ids": rows[:, :-1], "labels": rows[:, 1:]}

    return batch_fn


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_loss_on_cuda(dtype):
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(3000, 64, generator=gen).to("cuda", dtype)
    weight = (0.1 * torch.randn(5000, 64, generator=gen)).to("cuda", dtype)
    labels = torch.randint(0, 5000, (3000,), generator=gen).cuda()
    labels[::5] = IGNORE_INDEX
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    loss = fused_linear_cross_entropy(h, w, labels, chunk_size=700)
    loss.backward()
    h_ref, w_ref = hidden.double().requires_grad_(), weight.double().requires_grad_()
    ref = F.cross_entropy(h_ref @ w_ref.T, labels)
    ref.backward()
    assert loss.dtype == torch.float32 and abs(loss.item() - ref.item()) < 1e-5 * ref.item()
    tol = 1e-4 if dtype == torch.float32 else 2e-2  # gradients are returned in the model's dtype
    for got, want in ((h.grad, h_ref.grad), (w.grad, w_ref.grad)):
        assert got.dtype == dtype
        torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol * float(want.abs().max()))
    scored = labels != IGNORE_INDEX
    nll = linear_nll_sum(hidden[scored], weight, labels[scored])
    assert abs(nll.item() - ref.item() * int(scored.sum())) < 1e-5 * ref.item() * int(scored.sum())


def test_fused_loss_under_cuda_autocast_runs_its_matmuls_like_the_models_own_head():
    """Under bf16 autocast the head's matmuls run in bf16 (the model's own head does too): loss and
    gradients agree with autocast's `F.cross_entropy((h @ w.T).float())` to bf16 rounding."""
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(3000, 256, generator=gen).cuda()
    weight = (0.05 * torch.randn(5000, 256, generator=gen)).cuda()
    labels = torch.randint(0, 5000, (3000,), generator=gen).cuda()
    labels[::5] = IGNORE_INDEX
    grads = []
    for fused in (True, False):
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = (
                fused_linear_cross_entropy(h, w, labels, chunk_size=700)
                if fused
                else F.cross_entropy((h @ w.T).float(), labels)
            )
        loss.backward()
        grads.append((loss.detach(), h.grad, w.grad))
    (loss, gh, gw), (ref, rh, rw) = grads
    assert loss.dtype == torch.float32 and abs(loss.item() - ref.item()) < 1e-3 * ref.item()
    for got, want in ((gh, rh), (gw, rw)):
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2 * float(want.abs().max()))


def test_bf16_mixed_training_on_cuda_keeps_fp32_weights_and_follows_fp32():
    losses = {}
    for precision in ("fp32", "bf16-mixed"):
        model = olmo2()
        result = train(
            model, batches(512, 8, 128), TrainConfig(steps=20, lr=1e-3, precision=precision, log_every=1)
        )
        losses[precision] = torch.tensor(result.losses)
        assert all(p.dtype == torch.float32 and p.device.type == "cuda" for p in model.parameters())
    assert torch.isfinite(losses["bf16-mixed"]).all()
    assert (losses["bf16-mixed"] - losses["fp32"]).abs().max() < 0.05 * losses["fp32"].max()


def test_activation_checkpointing_on_cuda_gives_equal_gradients():
    grads = []
    for recompute in (False, True):
        model = olmo2()
        if recompute:
            enable_activation_checkpointing(model)
        model.train()
        batch = {k: v.cuda() for k, v in batches(512, 4, 128)(0).items()}
        logits = model(input_ids=batch["input_ids"]).logits
        F.cross_entropy(logits.flatten(0, 1).float(), batch["labels"].flatten()).backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
    for name, g in grads[0].items():
        torch.testing.assert_close(grads[1][name], g, rtol=1e-5, atol=1e-6, msg=name)


def test_perturbation_of_bf16_weights_on_cuda_is_undone_exactly():
    model = olmo2().to(torch.bfloat16)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    std = {n: 0.02 if p.dim() >= 2 else 0.0 for n, p in model.named_parameters()}
    with perturbed(model, std, gamma=1.0, seed=0):
        moved = [n for n, p in model.named_parameters() if not torch.equal(p, before[n])]
        assert moved and all(std[n] > 0 for n in moved)
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_peak_memory_of_a_training_step_is_within_15_percent_of_the_planner():
    """Activations dominate here (151M parameters, 8 x 1024 tokens): the planner's bytes per token
    and layer, its 16 B per parameter and the fused head's chunk against max_memory_allocated."""
    model = olmo2(hidden=1024, layers=8, intermediate=4096, vocab=8192)
    planned = estimate(shape_of(model.config), 1, 8, 1024, "bf16-mixed", False).total
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    train(model, batches(8192, 8, 1024), TrainConfig(steps=2, lr=1e-4, precision="bf16-mixed"))
    peak = torch.cuda.max_memory_allocated()
    assert 0.85 < peak / planned < 1.15, (peak / 2**30, planned / 2**30)
