"""Per-layer torch.compile (pipeline/models/compile.py): no graph break in the model body, attention
stays causal SDPA without an explicit mask, the same loss and gradients as the eager model; and
`compile: true` where torch cannot compile stops at start-up with the reason.

The graphs are captured by dynamo (what inductor would compile) and run by a recording backend that
executes them as captured, like backend="eager": inductor's CPU code generation (a C++ build per
graph) would take minutes on the test machine and is not what these checks are about."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

from pipeline.data.batches import IGNORE_INDEX
from pipeline.models import compile as compiling
from pipeline.models.build import build_model, model_config

SDPA = {torch.nn.functional.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention}


class Recorder:
    """A torch.compile backend that keeps each captured graph and runs it as captured."""

    def __init__(self):
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs):
        self.graphs.append(gm)
        return gm.forward

    def sdpa_calls(self) -> list[dict]:
        return [dict(n.kwargs) for g in self.graphs for n in g.graph.nodes if n.target in SDPA]


def test_compiled_layers_have_no_graph_break_and_keep_causal_sdpa():
    """olmo-15m's shape (3 layers, hidden 192, attention dropout 0.1) with a small vocabulary."""
    preset = "olmo-15m"
    torch.manual_seed(0)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    model = build_model(model_config(preset, 512, 0, 0), seed=0)
    model.set_attn_implementation("sdpa")  # what CUDA runs (the CPU's small-head attention is eager only)
    ids = torch.randint(1, 512, (2, 48))
    labels = ids.roll(-1, 1)
    labels[:, -1] = IGNORE_INDEX

    def loss_and_grads():
        model.zero_grad()
        torch.manual_seed(1)  # the same attention dropout (olmo-15m: 0.1) in both runs
        loss = F.cross_entropy(model(input_ids=ids).logits.reshape(-1, 512), labels.reshape(-1))
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    want, want_grads = loss_and_grads()
    recorder = Recorder()
    assert compiling.compile_layers(model, backend=recorder) == model.config.num_hidden_layers
    got, got_grads = loss_and_grads()

    breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
    assert breaks == 0, dict(torch._dynamo.utils.counters["graph_break"])
    # one graph for all layers (the same code, guarded per layer instance) or one per layer, no more
    assert 1 <= len(recorder.graphs) <= model.config.num_hidden_layers
    calls = recorder.sdpa_calls()
    assert calls and all(c.get("attn_mask") is None and c.get("is_causal") is True for c in calls), calls
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0)
    for name, g in got_grads.items():
        torch.testing.assert_close(g, want_grads[name], rtol=1e-5, atol=1e-7)
    assert set(model.state_dict()) == set(build_model(model_config(preset, 512, 0, 0), seed=0).state_dict())
    compiling.uncompile_layers(model)
    assert all("forward" not in vars(layer) for layer in model.model.layers)


def test_compile_defaults_to_cuda_only_and_true_where_torch_cannot_compile_stops(monkeypatch):
    assert compiling.resolve_compile(None, "cpu", "pretrain.compile") is False
    assert compiling.resolve_compile(False, "cuda", "pretrain.compile") is False
    monkeypatch.setattr(compiling, "compile_support", lambda device: None)
    assert compiling.resolve_compile(None, "cuda", "finetune.compile") is True
    assert compiling.resolve_compile(True, "cpu", "finetune.compile") is True
    reason = "inductor needs Triton for CUDA code, and triton is not installed"
    monkeypatch.setattr(compiling, "compile_support", lambda device: reason)
    assert compiling.resolve_compile(None, "cuda", "finetune.compile") is False  # the default falls back
    with pytest.raises(
        ValueError,
        match="finetune.compile: true, but torch cannot compile for cuda here: inductor needs Triton",
    ):
        compiling.resolve_compile(True, "cuda", "finetune.compile")


def test_compile_support_names_what_is_missing(monkeypatch):
    import shutil

    import torch._dynamo

    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert "C++ compiler" in compiling.compile_support(torch.device("cpu"))
    monkeypatch.setattr(torch._dynamo, "is_dynamo_supported", lambda: False)
    assert "does not support this Python" in compiling.compile_support(torch.device("cpu"))


def test_a_pretraining_job_with_compile_true_stops_before_any_work(monkeypatch, tmp_path):
    """The job's first step is the check: no tokenizer, data or model is opened before it fails."""
    from pipeline.train import pretrain
    from pipeline.train.config import PretrainConfig
    from pipeline.train.pretrain_job import PretrainJob

    monkeypatch.setattr(
        compiling, "compile_support", lambda device: "inductor's CPU code needs a C++ compiler"
    )
    cfg = PretrainConfig(32, 4, 1e-3, (0.9, 0.95), 0.0, 0.1, compile=True)
    missing = tmp_path / "missing"
    with pytest.raises(
        ValueError, match=r"pretrain.compile: true, but torch cannot compile for cpu here: .*C\+\+"
    ):
        job = PretrainJob(str(missing), str(missing), "tiny", 0, cfg, str(missing), str(missing), budget=4096)
        pretrain.set_up(job)
