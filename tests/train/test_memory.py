"""The memory planner (pipeline/train/memory.py) against what training holds on CPU: the bytes of
parameters, gradients and AdamW state after a step, and the activations a decoder layer saves for
the backward pass (saved-tensor hooks), with and without activation checkpointing and autocast."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from transformers import Olmo2Config, Olmo2ForCausalLM

from pipeline.data.batches import ChunkSampler
from pipeline.data.tokenizer import token_stream
from pipeline.models.build import build_model, count_parameters, model_config
from pipeline.models.hub import HUB_PRESETS
from pipeline.models.presets import SIZE_PRESETS, preset_shape
from pipeline.models.shapes import ModelShape, shape_of
from pipeline.train.config import FinetuneConfig, TrainConfig
from pipeline.train.loop import train
from pipeline.train.memory import (
    GIB,
    GpuSettings,
    PlanError,
    activation_bytes,
    estimate,
    gap_bytes,
    plan_finetune,
    plan_run,
)
from pipeline.train.recompute import enable_activation_checkpointing


def test_shapes_give_the_parameter_counts():
    for name in SIZE_PRESETS:
        model = build_model(model_config(name, 2048, 0, 1), seed=0)
        assert preset_shape(name, 2048).params == count_parameters(model) == shape_of(model.config).params
    for name, preset in HUB_PRESETS.items():  # Table 1's parameter counts from config.json dimensions
        assert preset.shape.params == pytest.approx(preset.params, rel=0.005), name


def test_states_are_16_bytes_per_parameter_after_a_step(tiny_model, tokenizer, moby_docs):
    tokens = np.asarray(token_stream(tokenizer, [d.text for d in moby_docs[:4]]))
    result = train(tiny_model, ChunkSampler(tokens, 32, 4, 0).batch, TrainConfig(steps=1, lr=1e-3))
    shape = shape_of(tiny_model.config)
    assert result.state_bytes == {"parameters": 4 * shape.params, "gradients": 4 * shape.params,
                                  "optimizer": 8 * shape.params}  # fmt: skip
    assert sum(result.state_bytes.values()) == estimate(shape, 1, 1, 32, "fp32", False).states


def saved_bytes_per_token(
    shape: ModelShape, autocast: bool, recompute: bool, tokens: tuple[int, int]
) -> float:
    """Bytes the second decoder layer saves for backward per token (parameters excluded), SDPA."""
    torch.manual_seed(0)
    config = Olmo2Config(
        vocab_size=shape.vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=2,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        max_position_embeddings=256,
        pad_token_id=0,
        bos_token_id=0,
        eos_token_id=0,
    )
    config._attn_implementation = "sdpa"
    model = Olmo2ForCausalLM(config)
    if recompute:
        enable_activation_checkpointing(model)
    model.train()
    params = {p.data_ptr() for p in model.parameters()}
    inside, seen = [False], {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if inside[0] and t.data_ptr() not in params:
            seen.setdefault(t.data_ptr(), t.numel() * t.element_size())
        return t

    layer = model.model.layers[1]
    layer.register_forward_pre_hook(lambda *a: inside.__setitem__(0, True))
    layer.register_forward_hook(lambda *a: inside.__setitem__(0, False))
    ids = torch.randint(0, shape.vocab, tokens)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            model(input_ids=ids).logits.float().sum().backward()
    return sum(seen.values()) / ids.numel()


SHAPES = [
    ModelShape(layers=2, hidden=64, intermediate=256, heads=4, kv_heads=4, vocab=256),
    ModelShape(layers=2, hidden=128, intermediate=344, heads=8, kv_heads=2, vocab=256),  # grouped-query
]


@pytest.mark.parametrize("shape", SHAPES)
def test_activations_per_token_and_layer_match_the_planner(shape):
    planned = activation_bytes(shape)
    fp32 = saved_bytes_per_token(shape, autocast=False, recompute=False, tokens=(2, 64))
    longer = saved_bytes_per_token(shape, autocast=False, recompute=False, tokens=(1, 256))
    # autocast's bf16 copies of the weights are saved too, once: the slope in tokens drops them
    mixed = 2 * saved_bytes_per_token(shape, True, False, (4, 64)) - saved_bytes_per_token(
        shape, True, False, (2, 64)
    )
    assert 0.9 < fp32 / planned < 1.1
    assert longer == pytest.approx(fp32, rel=0.05)  # linear in tokens: no (seq x seq) attention matrix
    # autocast keeps fp32 norm inputs beside bf16 matmul inputs (an H100 saves the same bytes)
    assert 0.95 < mixed / activation_bytes(shape, "bf16-mixed") < 1.05
    # activation checkpointing: the layer keeps its input only (4 B x hidden per token)
    recomputed = saved_bytes_per_token(shape, autocast=False, recompute=True, tokens=(2, 64))
    assert recomputed == pytest.approx(4 * shape.hidden, rel=0.05)


def test_plans_for_the_paper_models():
    seven_b = HUB_PRESETS["olmo-2-7b"].shape
    one_b = HUB_PRESETS["olmo-1b"].shape
    common = dict(batch_size=128, seq_len=2048, precision="bf16-mixed", gpus_per_node=8)
    plan = plan_finetune(seven_b, activation_checkpointing=True, gpu_memory_gb=80, **common)
    assert plan.gpus >= 2  # 16 B x 7.3B = 117 GB of states alone
    assert plan.estimate.total <= plan.usable and 128 % (plan.gpus * plan.micro_batch) == 0
    on_40 = plan_finetune(seven_b, activation_checkpointing=True, gpu_memory_gb=40, **common)
    assert on_40.gpus > plan.gpus
    assert plan_finetune(one_b, activation_checkpointing=False, gpu_memory_gb=80, **common).gpus == 1
    # a fixed rank count and micro-batch are kept; more memory per rank than fewer ranks
    fixed = plan_finetune(
        seven_b, activation_checkpointing=True, gpu_memory_gb=80, gpus=8, micro_batch=1, **common
    )
    assert (fixed.gpus, fixed.micro_batch) == (8, 1) and fixed.estimate.states < plan.estimate.states


def test_the_linearization_gap_must_fit_beside_the_shards():
    """The gap gathers the whole float32 model with θ_pre and δ on every GPU: fine for OLMo-1B on
    40 GB, refused for OLMo-2-7B on 80 GB (naming the key) however many GPUs the job has."""
    gpu = GpuSettings(memory_gb=80, per_node=8, headroom=0.1)
    cfg = FinetuneConfig(
        batch_size=128, seq_len=2048, activation_checkpointing=True, linearization_tokens=512
    )
    one_b, seven_b = HUB_PRESETS["olmo-1b"].shape, HUB_PRESETS["olmo-2-7b"].shape
    assert plan_run(one_b, cfg, 2048, dataclasses.replace(gpu, memory_gb=40)).gpus == 1
    assert gap_bytes(one_b, one_b.params, 1, 512) > 20 * one_b.params  # weights, grads, whole copy, θ_pre, δ
    with pytest.raises(
        PlanError, match=r"finetune.linearization_tokens: .* set finetune.linearization_tokens: 0"
    ):
        plan_run(seven_b, cfg, 2048, gpu, gpus=8)
    assert plan_run(seven_b, dataclasses.replace(cfg, linearization_tokens=0), 2048, gpu).gpus >= 2


def test_a_model_that_fits_nowhere_stops_with_the_arithmetic():
    seven_b = HUB_PRESETS["olmo-2-7b"].shape
    with pytest.raises(PlanError) as err:
        plan_finetune(seven_b, 64, 4096, "bf16-mixed", False, gpu_memory_gb=24, gpus_per_node=2)
    text = str(err.value)
    assert "does not fit: on 2 GPU(s) of 24 GB" in text and "GiB are usable" in text
    assert "states" in text and "finetune.activation_checkpointing" in text
    assert estimate(seven_b, 2, 1, 4096, "bf16-mixed", False).total > 24e9 * 0.9 - 1.5 * GIB


def test_the_docs_show_the_current_plans():
    from pathlib import Path

    from pipeline.train.memory import plans_table

    text = (Path(__file__).resolve().parents[2] / "docs" / "scaling.md").read_text()
    shown = text.split("<!-- plans:begin -->\n")[1].split("\n<!-- plans:end -->")[0]
    assert shown == plans_table(), "docs/scaling.md: paste `python -m pipeline.train.memory`"
