"""muP, the maximal update parameterization (Yang et al. 2022, "Tensor Programs V: Tuning Large
Neural Networks via Zero-Shot Hyperparameter Transfer", arXiv:2203.03466, Table 8), for the OLMo
presets: hyperparameters tuned at a base width transfer to wider models.

Relative to standard parameterization (SP) at the base width `b` (where the two coincide), a model of
width `w` (m = w / b) gets:

- hidden matrices (attention and MLP projections; both dimensions grow with width): init std
  σ / sqrt(m) and Adam learning rate lr / m;
- the input embedding, the output layer and the norm weights (one dimension grows, or none): init
  std σ and learning rate lr, unscaled;
- an output multiplier 1 / m on the logits (applied to the final norm's output: the same product);
- attention scores scaled by sqrt(d_b) / d instead of 1 / sqrt(d) (d: head dimension; d_b: the base
  model's), 1 / d in the limit.

Own code rather than the `mup` package (microsoft/mup 1.0.0): that one needs base and delta models
instantiated beside the model, swaps the output layer for its `MuReadout` (which the fused loss head,
pipeline/models/losses.py, bypasses) and its optimizers for `MuAdam`; here the rules are four
functions on the HF model. `fold` writes the multiplier and the attention scale into the weights, so
a saved checkpoint is a plain HF model computing the same function (every later stage, perturbation
and fine-tuning, loads it as any other). bench/bench_mup.py shows the coordinate check and the
learning-rate transfer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

EMBEDDING, OUTPUT = "embed_tokens", "lm_head"


@dataclass(frozen=True)
class Mup:
    """The muP scalings of a model of `width` (hidden size) against `base_width`."""

    base_width: int
    width: int
    head_dim: int
    base_head_dim: int

    @property
    def mult(self) -> float:
        return self.width / self.base_width

    @property
    def attention_scale(self) -> float:
        return math.sqrt(self.base_head_dim) / self.head_dim


def mup_of(config, base_width: int, base_heads: int) -> Mup:
    """The scalings of a transformers config against a base model of `base_width` with `base_heads`
    attention heads (pipeline/models/presets.py: each preset's `mup_base`)."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return Mup(base_width, config.hidden_size, head_dim, base_width // base_heads)


def is_hidden(name: str, p: torch.Tensor) -> bool:
    """A hidden matrix: a 2-D weight other than the input embedding and the output layer."""
    return p.dim() == 2 and EMBEDDING not in name and OUTPUT not in name


def init_weights(model: torch.nn.Module, mup: Mup, std: float, seed: int) -> None:
    """Draw every matrix again with muP's std (hidden: σ / sqrt(m); embedding and output: σ) from
    `seed`; norm weights keep their constant init."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                scale = std / math.sqrt(mup.mult) if is_hidden(name, p) else std
                p.copy_(torch.randn(p.shape, generator=gen) * scale)


def lr_scale(name: str, p: torch.Tensor, mup: Mup) -> float:
    """The factor on the learning rate of parameter `name` under Adam: 1 / m for hidden matrices."""
    return 1.0 / mup.mult if is_hidden(name, p) else 1.0


def attach(model: torch.nn.Module, mup: Mup):
    """Put muP's forward pass on an HF decoder: the output multiplier (on the final norm's output)
    and the attention scale. Returns the hook's handle (`fold` removes it)."""
    for module in model.modules():
        if hasattr(module, "q_norm") and hasattr(module, "scaling"):
            module.scaling = mup.attention_scale
    norm = model.get_decoder().norm
    return norm.register_forward_hook(lambda _m, _i, out: out / mup.mult)


def fold(model: torch.nn.Module, mup: Mup, handle=None) -> None:
    """Write the output multiplier into the output layer and the attention scale into the query norm
    weights, and remove the hook (`handle`; None for a gathered copy, which has none): a plain HF
    model with the same function (up to float rounding)."""
    if handle is not None:
        handle.remove()
    standard = mup.head_dim**-0.5
    with torch.no_grad():
        model.get_output_embeddings().weight.div_(mup.mult)
        for module in model.modules():
            if hasattr(module, "q_norm") and hasattr(module, "scaling"):
                module.q_norm.weight.mul_(mup.attention_scale / standard)
                module.scaling = standard


def folded_init_std(stds: dict[str, float], mup: Mup) -> dict[str, float]:
    """Each tensor's init std as the saved (folded) model holds it: the output layer's divided by m
    (the Gaussian perturbation is relative to these, pipeline/sweeps/)."""
    return {name: s / mup.mult if OUTPUT in name else s for name, s in stds.items()}
