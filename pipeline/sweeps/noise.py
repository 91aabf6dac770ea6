"""Gaussian weight perturbations scaled by each tensor's initialisation std (Section 3.3, C.2)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import torch


def _tensor_seed(seed: int, name: str) -> int:
    """A seed per (seed, tensor name): the noise of a tensor does not depend on the others."""
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & 0x7FFF_FFFF_FFFF_FFFF


def tensor_noise(p: torch.Tensor, name: str, seed: int) -> torch.Tensor:
    """The unit float32 N(0, 1) noise of parameter `name` at `seed`, on the parameter's device."""
    gen = torch.Generator(device=p.device).manual_seed(_tensor_seed(seed, name))
    return torch.randn(p.shape, generator=gen, device=p.device, dtype=torch.float32)


@torch.no_grad()
def gaussian_direction(
    model: torch.nn.Module, init_std: Mapping[str, float], seed: int
) -> dict[str, torch.Tensor]:
    """ε of γ = 1: the noise `perturb_gaussian(model, init_std, γ, seed)` adds is γ·ε (float32; tensors
    with init std 0 are left out). Appendix D's Gaussian direction."""
    return {
        name: tensor_noise(p, name, seed).mul_(float(init_std[name]))
        for name, p in model.named_parameters()
        if float(init_std[name]) != 0.0
    }


@torch.no_grad()
def perturb_gaussian(model: torch.nn.Module, init_std: Mapping[str, float], gamma: float, seed: int) -> int:
    """In place θ ← θ + ε, ε ~ N(0, (γ · std_init(tensor))²) per tensor; returns #perturbed tensors.

    Noise is drawn in float32 on the parameter's device (CUDA-safe) and added in that
    precision before casting back (bf16 models keep their dtype). Tensors whose init std is
    0 (norm weights) are left unchanged.
    """
    if gamma < 0:
        raise ValueError(f"perturb.gammas: gamma must be >= 0, got {gamma}")
    missing = [n for n, _ in model.named_parameters() if n not in init_std]
    if missing:
        raise KeyError(f"init std missing for parameters {missing[:3]}{'...' if len(missing) > 3 else ''}")
    count = 0
    for name, p in model.named_parameters():
        scale = gamma * float(init_std[name])
        if scale == 0.0:
            continue
        noise = tensor_noise(p, name, seed)
        p.copy_((p.float() + noise.mul_(scale)).to(p.dtype))
        count += 1
    return count


@contextmanager
def perturbed(
    model: torch.nn.Module, init_std: Mapping[str, float], gamma: float, seed: int
) -> Iterator[torch.nn.Module]:
    """Temporarily perturb `model`; the original weights are restored exactly on exit.

    The backup lives on the CPU so a large GPU model does not need twice its memory.
    """
    backup = {
        n: p.detach().to("cpu", copy=True)
        for n, p in model.named_parameters()
        if gamma * init_std.get(n, 0.0) != 0.0
    }
    try:
        perturb_gaussian(model, init_std, gamma, seed)
        yield model
    finally:
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n in backup:
                    p.copy_(backup[n].to(p.device))
