"""Per-layer `torch.compile` of a causal LM (config `pretrain.compile`, `finetune.compile`).

Each decoder layer's `forward` is compiled on its own, not the whole model: compiling the whole
transformers model makes its mask code build an explicit (batch, 1, T, T) mask with
`is_causal=False`, which rules out SDPA's flash kernel; a layer compiled alone gets the mask the
eager model body made (None for unpadded causal batches), so SDPA keeps `is_causal=True`
(tests/models/test_compile.py counts 0 graph breaks and checks the SDPA calls). The layers'
module hooks (FSDP2's gathers, activation checkpointing) stay outside the compiled code.
"""

from __future__ import annotations

import logging
import shutil

import torch

from pipeline.models.build import decoder_layers

log = logging.getLogger(__name__)


def compile_support(device: torch.device) -> str | None:
    """Why the installed torch cannot compile for `device` (None: it can): dynamo's Python
    support, Triton for CUDA (inductor's GPU code), a C++ compiler for the CPU (inductor's CPU code)."""
    import torch._dynamo

    if not torch._dynamo.is_dynamo_supported():
        return "torch._dynamo does not support this Python"
    if device.type == "cuda":
        from torch.utils._triton import has_triton

        return None if has_triton() else "inductor needs Triton for CUDA code, and triton is not installed"
    if device.type == "cpu":
        from torch._inductor import config

        compiler = config.cpp.cxx[0] if config.cpp.cxx and config.cpp.cxx[0] else None
        found = [c for c in (compiler, "g++", "clang++", "c++") if c and shutil.which(c)]
        return None if found else "inductor's CPU code needs a C++ compiler (g++, clang++): none on PATH"
    return f"no compile backend for device {device.type!r}"


def resolve_compile(setting: bool | None, device: str | torch.device, key: str) -> bool:
    """Whether to compile: `setting` (config `key`), None meaning on for CUDA where torch can
    compile, off elsewhere. True where torch cannot compile stops here, at start-up, with the reason."""
    device = torch.device(device)
    if setting is False or (setting is None and device.type != "cuda"):
        return False  # without importing torch._dynamo (a second of a CPU job's start-up)
    reason = compile_support(device)
    if setting is None:
        return reason is None
    if reason is not None:
        raise ValueError(f"{key}: true, but torch cannot compile for {device.type} here: {reason}; set false")
    return True


def compile_layers(model: torch.nn.Module, backend: str | object = "inductor") -> int:
    """Compile each decoder layer's forward in place (parameter names and the state dict are
    unchanged); returns how many. `backend`: torch.compile's (tests pass a recording one)."""
    layers = decoder_layers(model)
    for layer in layers:
        layer.forward = torch.compile(type(layer).forward.__get__(layer), backend=backend)
    log.info("compiled %d decoder layers (%s)", len(layers), backend)
    return len(layers)


def uncompile_layers(model: torch.nn.Module) -> None:
    """Undo `compile_layers`: every module's own forward again (e.g. for the curvature stage's double
    backward, which compiled autograd does not support)."""
    for module in model.modules():
        if hasattr(vars(module).get("forward"), "_torchdynamo_orig_callable"):
            del module.forward
