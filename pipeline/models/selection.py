"""What a fine-tuning method names in a model (`finetune.methods.<name>.params`) and its check,
torch-free: LoRA's settings, and the module and parameter names of one architecture (`ModelNames`)
that its targets and patterns must match. A job checks the model it loaded; the workflow checks a
cached copy of each checkpoint's names at parse time, without importing torch
(pipeline/workflow/methods.py). pipeline/models/trained_params.py applies the selection.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LoraSettings:
    """`params: {lora: {...}}`: rank r, scale alpha / r, the adapted modules (peft's matching: a
    module name's last component, e.g. q_proj), dropout on the adapter's input."""

    rank: int = 8
    alpha: float = 16.0
    target_modules: tuple[str, ...] = ("q_proj", "v_proj")
    dropout: float = 0.0


def lora_settings(params: str | dict) -> LoraSettings | None:
    """The LoRA settings of a `params` value (None: not LoRA)."""
    if not isinstance(params, dict) or "lora" not in params:
        return None
    s = dict(params["lora"] or {})
    if "target_modules" in s:
        s["target_modules"] = tuple(s["target_modules"])
    return LoraSettings(**s)


def describe(params: str | dict) -> str:
    """`params` for a log line."""
    lora = lora_settings(params)
    if lora is not None:
        return f"LoRA r={lora.rank}, alpha={lora.alpha:g} on {list(lora.target_modules)}"
    return params if isinstance(params, str) else f"modules {params['modules']}"


@dataclass(frozen=True)
class ModelNames:
    """One architecture as a method's selection sees it: its class, every module's class by name,
    each Linear's (in, out) features, its parameter names (named_parameters: a tied one once) and
    those of its output layer (None: it has none). JSON-able (`asdict`, `from_json`)."""

    model: str
    modules: dict[str, str]
    linear: dict[str, tuple[int, int]]
    params: tuple[str, ...]
    output: tuple[str, ...] | None

    @classmethod
    def of(cls, model: Any) -> ModelNames:
        """The names of a torch model (on any device, meta included)."""
        import torch

        named = dict(model.named_parameters())
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        ids = None if head is None else {id(p) for p in head.parameters()}
        return cls(
            type(model).__name__,
            {n: type(m).__name__ for n, m in model.named_modules() if n},
            {
                n: (m.in_features, m.out_features)
                for n, m in model.named_modules()
                if isinstance(m, torch.nn.Linear)
            },
            tuple(named),
            None if ids is None else tuple(n for n, p in named.items() if id(p) in ids),
        )

    @classmethod
    def from_json(cls, d: dict) -> ModelNames:
        """From its `dataclasses.asdict` as JSON."""
        linear = {n: tuple(v) for n, v in d["linear"].items()}
        output = None if d["output"] is None else tuple(d["output"])
        return cls(d["model"], d["modules"], linear, tuple(d["params"]), output)

    def last_components(self) -> list[str]:
        """The distinct last components of the module names (what LoRA targets match)."""
        last = {n.rsplit(".", 1)[-1] for n in self.modules}
        return sorted(name for name in last if not name.isdigit())


def check_lora_targets(names: ModelNames, lora: LoraSettings) -> None:
    """Every target names Linear modules, and the rank fits each adapted weight's dimensions."""
    for target in lora.target_modules:
        found = [n for n in names.modules if n.rsplit(".", 1)[-1] == target]
        if not found:
            raise ValueError(
                f"finetune.methods.*.params.lora.target_modules: {target!r} matches no module; the "
                f"model's module names are {names.last_components()}"
            )
        for name in found:
            if name not in names.linear:
                raise ValueError(
                    f"finetune.methods.*.params.lora.target_modules: {name} is a {names.modules[name]}, "
                    "not a Linear layer"
                )
            d_in, d_out = names.linear[name]
            if lora.rank > min(d_in, d_out):
                raise ValueError(
                    f"finetune.methods.*.params.lora.rank: {lora.rank} is larger than {name}'s dimensions "
                    f"({d_in} -> {d_out})"
                )


def selected_names(names: ModelNames, params: str | dict) -> set[str]:
    """The parameters `params` ("output" or {modules: [fnmatch patterns]}) trains; an error naming
    the key for an output layer the model lacks or a pattern that matches no parameter."""
    if params == "output":
        if names.output is None:
            raise ValueError(f"finetune.methods.*.params: output - {names.model} has no output layer")
        return set(names.output)
    chosen: set[str] = set()
    for pattern in params["modules"]:
        hits = {n for n in names.params if fnmatch.fnmatchcase(n, pattern)}
        if not hits:
            raise ValueError(
                f"finetune.methods.*.params.modules: {pattern!r} matches no parameter; the model's "
                f"module names are {names.last_components()} (fnmatch patterns over parameter names "
                f"such as {sorted(names.params)[:3]}, e.g. '*.mlp.*')"
            )
        chosen |= hits
    return chosen


def check_selection(names: ModelNames, params: str | dict) -> None:
    """What the job's selection checks, on an architecture's names: LoRA's targets and rank, or
    that the output layer exists / every `modules` pattern matches a parameter."""
    lora = lora_settings(params)
    if lora is not None:
        check_lora_targets(names, lora)
    elif params != "all":
        selected_names(names, params)
