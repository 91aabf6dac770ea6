"""Precision policies of a training run (config `precision`, pipeline.train.config.PRECISIONS).

- fp32: weights, AdamW state and compute in float32.
- bf16-mixed: float32 master weights and AdamW state, bfloat16 compute, loss and logits in
  float32. One process: `torch.autocast` around the forward pass (the optimizer sees float32
  parameters and gradients). Sharded (FSDP2): `MixedPrecisionPolicy(param_dtype=bf16,
  reduce_dtype=fp32)` on float32 parameters, the output layer in float32. Master weights stay in
  float32 because bf16 keeps 8 significant bits: an update below ~2^-8 of a weight rounds away
  (Kalamkar et al., 2019, "A Study of BFLOAT16 for Deep Learning Training", arXiv:1905.12322,
  trains with float32 master weights for this reason).
"""

from __future__ import annotations

import contextlib
import types

import torch
import torch.nn.functional as F

from pipeline.train.config import PRECISIONS


def check_precision(precision: str, device: torch.device, key: str = "finetune.precision") -> None:
    """A clear error before training for a policy the device cannot run."""
    if precision not in PRECISIONS:
        raise ValueError(f"{key}: {precision!r} is unknown; expected one of {PRECISIONS}")
    if precision == "bf16-mixed" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        name = torch.cuda.get_device_name(device)
        raise ValueError(
            f"{key}: bf16-mixed needs bfloat16 support, which {name} lacks (compute capability < 8.0); "
            "set it to fp32"
        )


def compute_context(precision: str, device: torch.device):
    """The context of a forward pass of a whole model: bf16 autocast for bf16-mixed, nothing for
    fp32 (a sharded model needs none: pipeline/train/placement.py)."""
    if precision == "bf16-mixed":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _fp32_linear(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    with torch.autocast(x.device.type, enabled=False):
        bias = None if self.bias is None else self.bias.float()
        return F.linear(x.float(), self.weight.float(), bias)


def fp32_output_layer(model: torch.nn.Module) -> None:
    """Make the output layer compute its logits in float32 under autocast (the loss is taken in
    float32 from them); for models trained through `model(...).logits` rather than the fused head
    (pipeline.models.losses), whose logits are float32 already."""
    head = model.get_output_embeddings()
    if isinstance(head, torch.nn.Linear):
        head.forward = types.MethodType(_fp32_linear, head)


def fsdp_mixed_precision(precision: str):
    """FSDP2's policy: bf16 parameters in forward / backward, gradients reduced in float32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if precision == "bf16-mixed":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()


def output_layer_policy():
    """FSDP2's policy of the output layer: float32 parameters and inputs, so logits are float32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32)
