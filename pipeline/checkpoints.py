"""Where a study's base checkpoints come from: its own pre-training sweep, local
directories, or hub revisions (model id + revision + token count)."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported lazily: the Snakefile imports this module at parse time
    import torch


log = logging.getLogger(__name__)

SOURCES = ("sweep", "local", "hub")
NAME_RE = re.compile(r"[A-Za-z0-9._-]+")


@dataclass(frozen=True)
class CheckpointSpec:
    """One base model of a study. `name` is unique and safe as a path component."""

    name: str
    source: str
    model: str  # size preset (sweep) or family / model id
    tokens: int
    path: str | None = None  # directory (sweep output or local)
    model_id: str | None = None
    revision: str | None = None

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"checkpoint {self.name!r}: source must be one of {SOURCES}, got {self.source!r}")
        if not NAME_RE.fullmatch(self.name):
            raise ValueError(f"checkpoint name {self.name!r} may only contain letters, digits, '.', '_' and '-'")
        if self.tokens is None or self.tokens <= 0:
            raise ValueError(f"checkpoint {self.name!r}: a positive token count is required, got {self.tokens!r}")


def sweep_checkpoints(presets: list[str], budgets: list[int], sweep_dir: str) -> list[CheckpointSpec]:
    return [CheckpointSpec(f"{p}-{b}", "sweep", p, int(b), path=f"{sweep_dir}/{p}/{b}") for p in presets for b in budgets]


def local_checkpoints(entries: list[dict]) -> list[CheckpointSpec]:
    """Local `save_pretrained` directories, each with a name and its pre-training token count."""
    return [CheckpointSpec(e["name"], "local", e.get("model", "local"), int(e["tokens"]), path=e["path"]) for e in entries]


def hub_checkpoints(model_id: str, revisions: list[dict]) -> list[CheckpointSpec]:
    """Hub revisions of one model id; each entry has `revision` and `tokens`."""
    safe = model_id.replace("/", "--")
    return [CheckpointSpec(f"{safe}--{r['revision']}", "hub", model_id, int(r["tokens"]), model_id=model_id, revision=r["revision"]) for r in revisions]


def study_checkpoints(config: dict) -> list[CheckpointSpec]:
    """The checkpoints a study's config names (see `checkpoints:` in config.yaml)."""
    ck = config["checkpoints"]
    source = ck["source"]
    if source == "sweep":
        sweep_dir = f"results/{config['study']}/pretrain"
        specs = sweep_checkpoints(config["pretrain"]["presets"], config["pretrain"]["budgets"], sweep_dir)
    elif source == "local":
        specs = local_checkpoints(ck.get("local") or [])
    else:
        hub = ck.get("hub") or {}
        specs = hub_checkpoints(hub.get("model_id"), hub.get("revisions") or [])
    if not specs:
        raise ValueError(f"checkpoints: source {source!r} names no checkpoint")
    names = [s.name for s in specs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"checkpoints: duplicate checkpoint names {dupes}")
    return specs


def default_dtype(device: "torch.device") -> "torch.dtype":
    """bf16 on GPU (as the paper's models are trained), fp32 on CPU."""
    import torch

    return torch.bfloat16 if device.type == "cuda" else torch.float32


def load_checkpoint(spec: CheckpointSpec, path: str | None, device: "str | torch.device" = "cpu", dtype: "torch.dtype | None" = None):
    """Load (model, tokenizer, init_std, init_std_source) once for a whole job.

    init_std comes from the `init_std.json` the sweep recorded at initialisation; for a
    checkpoint without one it is the family's init distribution from its config, and
    init_std_source says "config" so the outputs record the approximation.
    """
    import torch
    from transformers import AutoModelForCausalLM

    from pipeline.models import init_std_from_config
    from pipeline.tokenizer import load_tokenizer

    device = torch.device(device)
    dtype = dtype or default_dtype(device)
    if spec.source == "hub":
        location, kwargs = spec.model_id, {"revision": spec.revision}
    else:
        location, kwargs = path or spec.path, {}
        if not Path(location, "config.json").is_file():
            raise FileNotFoundError(f"checkpoint {spec.name!r}: {location} is not a model directory (no config.json)")
    model = AutoModelForCausalLM.from_pretrained(location, dtype=dtype, **kwargs).to(device)
    model.eval()
    tokenizer = load_tokenizer(location) if spec.source != "hub" else _hub_tokenizer(spec)
    std_file = Path(location, "init_std.json") if spec.source != "hub" else None
    if std_file is not None and std_file.is_file():
        init_std, source = json.loads(std_file.read_text()), "recorded"
    else:
        init_std, source = init_std_from_config(model, model.config), "config"
        log.warning("checkpoint %s has no recorded init std: using the family's N(0, %.3g^2) from its config", spec.name, model.config.initializer_range)
    return model, tokenizer, init_std, source


def _hub_tokenizer(spec: CheckpointSpec):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(spec.model_id, revision=spec.revision)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def fingerprint(spec: CheckpointSpec, path: str | None) -> str:
    """Identity of a checkpoint's weights, for caching results computed from it."""
    if spec.source == "hub":
        key = f"{spec.model_id}@{spec.revision}"
    else:
        files = sorted(Path(path or spec.path).glob("*.safetensors")) + sorted(Path(path or spec.path).glob("*.bin")) + [Path(path or spec.path, "config.json")]
        key = ";".join(f"{f.name}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files if f.exists())
    return hashlib.sha256(key.encode()).hexdigest()[:16]
