"""What fine-tuning trains (`finetune.methods.<name>.params`): every parameter, the output layer
only, the parameters of named module groups, or LoRA adapters through `peft` (Hu et al., 2022).

After `select`, exactly the trained parameters have `requires_grad` (the optimizer, the proximal
term and the curvature line read that flag). A LoRA model is merged back into a plain model
(`merge`) before every evaluation that follows training and before ‖θ_ft − θ_pre‖: its adapted
weights then carry `requires_grad`, so everything downstream sees what fine-tuning changed.
What a method names, and its check, are torch-free (pipeline/models/selection.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys
from collections.abc import Iterator

import torch

from pipeline.models.selection import (
    LoraSettings,
    ModelNames,
    check_lora_targets,
    describe,
    lora_settings,
    selected_names,
)

log = logging.getLogger(__name__)


def lora_parameter_count(model: torch.nn.Module, lora: LoraSettings) -> int:
    """Σ r (d_in + d_out) over the adapted Linear layers: A is r x d_in, B is d_out x r."""
    return sum(
        lora.rank * (m.in_features + m.out_features)
        for n, m in model.named_modules()
        if n.rsplit(".", 1)[-1] in lora.target_modules and isinstance(m, torch.nn.Linear)
    )


def select(model: torch.nn.Module, params: str | dict) -> torch.nn.Module:
    """The model to train, only the parameters `params` names trainable: the model itself, or a
    peft model around it for LoRA (adapters B initialised to zero: the same function at step 0)."""
    lora = lora_settings(params)
    if lora is not None:
        return _wrap_lora(model, lora)
    if params == "all":
        return model
    names = selected_names(ModelNames.of(model), params)
    for n, p in model.named_parameters():
        p.requires_grad_(n in names)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    log.info(
        "training %s: %d of %d parameters",
        describe(params),
        trained,
        sum(p.numel() for p in model.parameters()),
    )
    return model


def _wrap_lora(model: torch.nn.Module, lora: LoraSettings) -> torch.nn.Module:
    from peft import LoraConfig, get_peft_model

    check_lora_targets(ModelNames.of(model), lora)
    config = LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        target_modules=list(lora.target_modules),
        lora_dropout=lora.dropout,
        bias="none",
    )
    wrapped = get_peft_model(model, config)
    trained = sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
    log.info("training %s: %d adapter parameters", describe({"lora": dataclasses.asdict(lora)}), trained)
    return wrapped


def is_lora(model: torch.nn.Module) -> bool:
    """A peft model; without importing peft (seconds per job) when no job module has."""
    peft = sys.modules.get("peft")
    return peft is not None and isinstance(model, peft.PeftModel)


def base_model(model: torch.nn.Module) -> torch.nn.Module:
    """The causal LM inside a peft model (what is sharded and what `merge` returns); else the model."""
    return model.get_base_model() if is_lora(model) else model


def base_parameters(model: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    """(name, parameter) of the model's own weights, named as in the plain model (and as after
    `merge`): a peft model's adapters left out, its `.base_layer` wrappers seen through."""
    if not is_lora(model):
        return list(model.named_parameters())
    out = []
    for name, p in base_model(model).named_parameters():
        if ".lora_" in name:
            continue
        out.append((name.replace(".base_layer.", "."), p))
    return out


def merge(model: torch.nn.Module) -> torch.nn.Module:
    """A plain model with the fine-tuned weights: LoRA adapters merged (W + (alpha / r) B A), the
    adapted weights marked trainable; any other model as it is."""
    if not is_lora(model):
        return model
    targets = set(model.peft_config["default"].target_modules)
    merged = model.merge_and_unload()
    adapted = {f"{n}.weight" for n, m in merged.named_modules() if n.rsplit(".", 1)[-1] in targets}
    for n, p in merged.named_parameters():
        p.requires_grad_(n in adapted)
    return merged


@contextlib.contextmanager
def selected(model: torch.nn.Module, params: str | dict, seed: int) -> Iterator[torch.nn.Module]:
    """`select(model, params)` for a while (LoRA adapters drawn after `torch.manual_seed(seed)`, as
    a fine-tuning job of that seed draws them), then the model as it was: adapters unloaded (never
    merged), every `requires_grad` flag back. For a look at what a method trains (its NTK)."""
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    torch.manual_seed(seed)
    chosen = select(model, params)
    try:
        yield chosen
    finally:
        if is_lora(chosen):
            chosen.unload()
        for n, p in model.named_parameters():
            p.requires_grad_(flags[n])
