"""Precision policies and activation checkpointing of the training loop (one process, CPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pipeline.data.batches import ChunkSampler
from pipeline.data.tokenizer import token_stream
from pipeline.models.build import build_model, model_config
from pipeline.models.losses import fused_head
from pipeline.train.config import FinetuneConfig, PretrainConfig, TrainConfig, resolve_precision
from pipeline.train.loop import _batch_loss, train
from pipeline.train.precision import check_precision, compute_context
from pipeline.train.recompute import enable_activation_checkpointing


@pytest.fixture(scope="module")
def sampler(tokenizer, moby_docs):
    tokens = token_stream(tokenizer, [d.text for d in moby_docs[:12]])
    return ChunkSampler(np.asarray(tokens), seq_len=32, batch_size=8, seed=0)


def fresh_model(tokenizer) -> torch.nn.Module:
    torch.set_num_threads(1)
    cfg = model_config("tiny", len(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id)
    cfg.max_position_embeddings = 64
    return build_model(cfg, seed=0)


def test_precision_resolves_by_device_and_rejects_unknown_values():
    assert resolve_precision(None, "cpu") == "fp32"
    assert resolve_precision(None, "cuda") == resolve_precision(None, "cuda:1") == "bf16-mixed"
    assert resolve_precision("bf16-mixed", "cpu") == "bf16-mixed"
    with pytest.raises(ValueError, match=r"finetune\.precision: 'fp16' is unknown"):
        FinetuneConfig(precision="fp16")
    with pytest.raises(ValueError, match=r"pretrain\.precision: 'bf16' is unknown"):
        PretrainConfig(32, 4, 1e-3, (0.9, 0.95), 0.1, 0.1, precision="bf16")
    with pytest.raises(ValueError, match="expected one of"):
        check_precision("half", torch.device("cpu"))


def test_bf16_mixed_computes_in_bf16_and_keeps_fp32_weights_and_adam_state(tokenizer, sampler):
    """bf16 autocast on CPU: layer outputs are bf16, the loss is float32, and parameters, gradients
    and AdamW moments stay float32; training follows the fp32 run closely."""
    losses = {}
    for precision in ("fp32", "bf16-mixed"):
        model = fresh_model(tokenizer)
        seen = []
        model.model.layers[0].mlp.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
        cfg = TrainConfig(steps=12, lr=3e-3, precision=precision, log_every=1)
        result = train(model, sampler.batch, cfg)
        losses[precision] = np.array(result.losses)
        want = torch.bfloat16 if precision == "bf16-mixed" else torch.float32
        assert seen[-cfg.steps :] == [want] * cfg.steps  # the training forwards (after the head's probe)
        assert all(p.dtype == torch.float32 for p in model.parameters())
    bf16, fp32 = losses["bf16-mixed"], losses["fp32"]
    assert bf16[-1] < bf16[0] - 0.1  # it trains
    assert np.abs(bf16 - fp32).max() / fp32.max() < 2e-2  # bf16 rounding, not a different run
    assert not np.array_equal(bf16, fp32)  # ... but a different precision


def test_bf16_mixed_loss_is_float32_from_bf16_activations(tokenizer, sampler):
    model = fresh_model(tokenizer)
    batch = sampler.batch(0)
    with compute_context("bf16-mixed", torch.device("cpu")):
        loss = _batch_loss(model, fused_head(model), batch)
    assert loss.dtype == torch.float32
    loss.backward()
    assert all(p.grad.dtype == torch.float32 for p in model.parameters() if p.grad is not None)


def test_activation_checkpointing_gives_equal_gradients_by_recomputing(tokenizer, sampler):
    """Per-layer recomputation: each decoder layer runs twice per step (forward + backward's
    recompute) and the gradients equal those without it."""
    batch = sampler.batch(3)
    grads, calls = {}, {}
    for recompute in (False, True):
        model = fresh_model(tokenizer)
        if recompute:
            enable_activation_checkpointing(model)
        model.train()
        head = fused_head(model)
        count = []
        model.model.layers[1].self_attn.register_forward_hook(lambda m, i, o: count.append(1))
        _batch_loss(model, head, batch).backward()
        grads[recompute] = {n: p.grad.clone() for n, p in model.named_parameters()}
        calls[recompute] = len(count)
    assert calls == {False: 1, True: 2}
    for name, g in grads[False].items():
        torch.testing.assert_close(grads[True][name], g, rtol=1e-6, atol=1e-8, msg=name)


def test_activation_checkpointing_needs_a_model_that_supports_it():
    with pytest.raises(ValueError, match="activation_checkpointing: Linear does not support"):
        enable_activation_checkpointing(torch.nn.Linear(2, 2))
