"""Linearized fine-tuning (`finetune.methods.<name>.linearized`): train the tangent model

    f_lin(θ) = f(θ_pre) + J_θ f(θ_pre) (θ − θ_pre)

with the same data, optimizer and schedule as the real model ("Linearization Explains Fine-Tuning
in Large Language Models", eq. 6: the NTK regime the paper says fine-tuning stays close to). The
model's own parameters are θ; `linearize` replaces its forward by the tangent model's, so names,
state dicts, the training loop, early stopping and every evaluation stay those of a plain model;
`undo` gives the real forward back (the linearization gap and the curvature line look at the real
model at the trained θ).

One forward of the tangent model is one `torch.func.jvp` at θ_pre along δ = θ − θ_pre, with no
autograd graph: its value f(θ_pre) + Jδ. f_lin is linear in θ, so its gradient is Jᵀ ∂L/∂f: under
autograd the forward adds f(θ′) − f(θ′).detach(), zero in value, for θ′ = θ − δ.detach() (θ_pre in
value, the identity in gradient), so the backward is one ordinary backward of f at θ_pre — with
the model's own attention kernel, not through the jvp. A training step costs a jvp (about two
forwards, eager attention: flash SDPA has no forward-mode rule) plus a forward and backward;
backpropagating through the jvp instead costs about twice the jvp again and stores its dual
activations (bench/bench_linearization.py times both). The model's fused loss path is not used
(pipeline.models.losses.fused_head skips a model whose forward is not its class's).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from types import SimpleNamespace

import torch

from pipeline.curvature.lines import EAGER

log = logging.getLogger(__name__)


def linearize(model: torch.nn.Module, theta_pre: Mapping[str, torch.Tensor]) -> Callable[[], None]:
    """Make `model(...)` the tangent model at θ_pre (`theta_pre`: the trained parameters' values by
    name) of its trained parameters (`requires_grad`); returns `undo`. The output has `.logits` only."""
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    pre = {n: theta_pre[n].detach() for n in names}
    own_attention = getattr(getattr(model, "config", None), "_attn_implementation", None)
    inside = {"on": False}
    real_forward = model.forward

    def tangent_forward(*args, **kwargs):
        if inside["on"]:  # the real model, called by functional_call below
            return real_forward(*args, **kwargs)
        kwargs = {k: v for k, v in kwargs.items() if k in ("input_ids", "attention_mask")}
        if hasattr(getattr(model, "config", None), "use_cache"):
            kwargs["use_cache"] = False  # no KV cache of dual tensors
        named = dict(model.named_parameters())
        at_pre = {n: pre[n].to(named[n].device, named[n].dtype) for n in names}

        def logits(params):
            return torch.func.functional_call(model, params, args, kwargs).logits

        with torch.no_grad(), _inside(inside):
            delta = {n: named[n].detach() - at_pre[n] for n in names}
            with _attention(model, EAGER, own_attention):
                f_pre, j_delta = torch.func.jvp(logits, (at_pre,), (delta,))
            value = f_pre + j_delta
        if not torch.is_grad_enabled():
            return SimpleNamespace(logits=value)
        with _inside(inside):  # θ_pre in value, ∂/∂θ = I: the backward is Jᵀ(∂L/∂f) at θ_pre
            attached = logits({n: named[n] - delta[n] for n in names})
        return SimpleNamespace(logits=value + (attached - attached.detach()))

    model.forward = tangent_forward
    log.info("linearized: the tangent model at θ_pre over %d parameter tensors", len(names))

    def undo() -> None:
        del model.forward  # the class's forward again

    return undo


@contextlib.contextmanager
def _inside(flag: dict) -> Iterator[None]:
    flag["on"] = True
    try:
        yield
    finally:
        flag["on"] = False


@contextlib.contextmanager
def _attention(model: torch.nn.Module, during: str, after: str | None) -> Iterator[None]:
    """The model's attention implementation `during` the block, `after` it (no-op when equal)."""
    if after is None or after == during:
        yield
        return
    model.set_attn_implementation(during)
    try:
        yield
    finally:
        model.set_attn_implementation(after)
