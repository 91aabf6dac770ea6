"""Linearized fine-tuning (`finetune.methods.<name>.linearized`): train the tangent model

    f_lin(θ) = f(θ_pre) + J_θ f(θ_pre) (θ − θ_pre)

with the same data, optimizer and schedule as the real model ("Linearization Explains Fine-Tuning
in Large Language Models", eq. 6: the NTK regime the paper says fine-tuning stays close to). The
model's own parameters are θ; `linearize` replaces its forward by the tangent model's (one
`torch.func.jvp` at θ_pre along θ − θ_pre, differentiable in θ), so names, state dicts, the training
loop, early stopping and every evaluation stay those of a plain model; `undo` gives the real forward
back (the linearization gap and the curvature line look at the real model at the trained θ).

Forward-mode AD needs eager attention (flash SDPA has no jvp rule), switched on here and back by
`undo`. One tangent forward costs about two forwards; its backward, through the tangent path only
(f(θ_pre) is detached), about one backward. The alternative step, a graph-free jvp for the value
and one ordinary backward at θ_pre for Jᵀ ∂L/∂f, saves the tangent activations (20% less saved
memory) but costs one more forward: 18% slower per step on olmo-15m and olmo-30m shapes on a CPU
(bench/bench_linearization.py times both), so it is not used. The model's fused loss path is not
used (pipeline.models.losses.fused_head skips a model whose forward is not its class's).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from types import SimpleNamespace

import torch

from pipeline.curvature.lines import EAGER

log = logging.getLogger(__name__)


def linearize(model: torch.nn.Module, theta_pre: Mapping[str, torch.Tensor]) -> Callable[[], None]:
    """Make `model(...)` the tangent model at θ_pre (`theta_pre`: the trained parameters' values by
    name) of its trained parameters (`requires_grad`); returns `undo`. The output has `.logits` only."""
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    pre = {n: theta_pre[n].detach() for n in names}
    previous_attention = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if previous_attention not in (None, EAGER):
        model.set_attn_implementation(EAGER)
    inside = {"on": False}
    real_forward = model.forward

    def tangent_forward(*args, **kwargs):
        if inside["on"]:  # the real model, called by functional_call below
            return real_forward(*args, **kwargs)
        kwargs = {k: v for k, v in kwargs.items() if k in ("input_ids", "attention_mask")}
        if hasattr(getattr(model, "config", None), "use_cache"):
            kwargs["use_cache"] = False  # no KV cache of dual tensors
        named = dict(model.named_parameters())
        delta = {n: named[n] - pre[n].to(named[n].device, named[n].dtype) for n in names}
        moved = {n: pre[n].to(named[n].device, named[n].dtype) for n in names}

        def logits(params):
            return torch.func.functional_call(model, params, args, kwargs).logits

        inside["on"] = True
        try:
            f_pre, j_delta = torch.func.jvp(logits, (moved,), (delta,))
        finally:
            inside["on"] = False
        return SimpleNamespace(logits=f_pre.detach() + j_delta)

    model.forward = tangent_forward
    log.info("linearized: the tangent model at θ_pre over %d parameter tensors", len(names))

    def undo() -> None:
        del model.forward  # the class's forward again
        if previous_attention not in (None, EAGER):
            model.set_attn_implementation(previous_attention)

    return undo
