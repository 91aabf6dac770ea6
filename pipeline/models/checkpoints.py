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

from pipeline.layout import PRETRAIN_RUN, study_path

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
    cache_dir: str | None = None  # hub: the HF cache to read (None: $HF_HUB_CACHE or the default)
    offline: bool | None = None  # hub: True loads from the cache only; None follows HF_HUB_OFFLINE
    params: int | None = None  # hub: parameter count, for job resources only

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(
                f"checkpoint {self.name!r}: source must be one of {SOURCES}, got {self.source!r}"
            )
        if not NAME_RE.fullmatch(self.name):
            raise ValueError(
                f"checkpoint name {self.name!r} may only contain letters, digits, '.', '_' and '-'"
            )
        if self.tokens is None or self.tokens <= 0:
            raise ValueError(
                f"checkpoint {self.name!r}: a positive token count is required, got {self.tokens!r}"
            )

    def row_fields(self, study: str) -> dict:
        """The metric-row columns that identify this checkpoint (pipeline.tables.metric_row)."""
        return dict(
            study=study,
            checkpoint=self.name,
            source=self.source,
            model=self.model,
            budget=float(self.tokens),
            budget_unit="tokens",
        )


def sweep_checkpoints(presets: list[str], budgets: list[int], study: str) -> list[CheckpointSpec]:
    """The runs of a study's own pre-training sweep, at their place in the results layout."""
    return [
        CheckpointSpec(
            f"{p}-{b}", "sweep", p, int(b), path=study_path(study, PRETRAIN_RUN, model=p, budget=b)
        )
        for p in presets
        for b in budgets
    ]


def local_checkpoints(entries: list[dict]) -> list[CheckpointSpec]:
    """Local `save_pretrained` directories, each with a name and its pre-training token count."""
    return [
        CheckpointSpec(e["name"], "local", e.get("model", "local"), int(e["tokens"]), path=e["path"])
        for e in entries
    ]


def hub_checkpoints(
    model_id: str | None,
    revisions: list[dict | str],
    preset: str | None = None,
    params: int | None = None,
    cache_dir: str | None = None,
    offline: bool | None = None,
) -> list[CheckpointSpec]:
    """Hub revisions of one model id (or of a Table 1 preset, `pipeline/models/hub.py`).

    Each revision is a name or `{revision, tokens}`; `tokens` may be left out when the preset
    knows it or the name carries it (`step10000-tokens41B`).
    """
    from pipeline.models.hub import checkpoint_name, resolve_hub

    hub = {"preset": preset, "model_id": model_id, "revisions": revisions, "params": params}
    model_id, resolved, n_params = resolve_hub(hub)
    return [
        CheckpointSpec(
            checkpoint_name(model_id, rev),
            "hub",
            model_id,
            tokens,
            model_id=model_id,
            revision=rev,
            cache_dir=cache_dir,
            offline=offline,
            params=n_params,
        )
        for rev, tokens in resolved
    ]


def study_checkpoints(config: dict) -> list[CheckpointSpec]:
    """The checkpoints a study's config names (see `checkpoints:` in config.yaml)."""
    ck = config["checkpoints"]
    source = ck["source"]
    if source == "sweep":
        pt = config["pretrain"]
        specs = sweep_checkpoints(pt["presets"], pt["budgets"], config["study"])
    elif source == "local":
        specs = local_checkpoints(ck.get("local") or [])
    else:
        hub = ck.get("hub") or {}
        specs = hub_checkpoints(
            hub.get("model_id"),
            hub.get("revisions") or [],
            hub.get("preset"),
            hub.get("params"),
            hub.get("cache_dir"),
            hub.get("offline"),
        )
    if not specs:
        raise ValueError(f"checkpoints: source {source!r} names no checkpoint")
    names = [s.name for s in specs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"checkpoints: duplicate checkpoint names {dupes}")
    return specs


def default_dtype(device: torch.device) -> torch.dtype:
    """bf16 on GPU (as the paper's models are trained), fp32 on CPU: how checkpoints are loaded and
    every model is evaluated on that device (base, perturbed, fine-tuned in one process or sharded),
    so a difference between two rows holds no precision change."""
    import torch

    return torch.bfloat16 if device.type == "cuda" else torch.float32


def dtype_name(of: torch.nn.Module | torch.dtype) -> str:
    """A dtype, or that of a model's parameters, as the rows record it (`extra.dtype`): "bfloat16"."""
    dtype = next(of.parameters()).dtype if hasattr(of, "parameters") else of
    return str(dtype).removeprefix("torch.")


def load_checkpoint(
    spec: CheckpointSpec,
    path: str | None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
):
    """Load (model, tokenizer, init_std, init_std_source) once for a whole job.

    A hub checkpoint is `from_pretrained(model_id, revision=...)` from `spec.cache_dir` (only from
    the cache when offline; a revision missing there is a HubRevisionError saying how to fetch it).
    On GPU the weights go straight to the device.

    init_std comes from the `init_std.json` the sweep recorded at initialisation; for a
    checkpoint without one it is the family's init distribution from its config, and
    init_std_source says "config" so the outputs record the approximation.
    """
    import torch
    from transformers import AutoModelForCausalLM

    from pipeline.models.attention import use_small_head_attention
    from pipeline.models.build import init_std_from_config

    device = torch.device(device)
    dtype = dtype or default_dtype(device)
    placement = {"device_map": str(device)} if device.type == "cuda" else {}
    if spec.source == "hub":
        location, kwargs = spec.model_id, hub_kwargs(spec)
        if kwargs["local_files_only"]:
            from pipeline.models.hub import check_hub_revisions

            check_hub_revisions(spec.model_id, [spec.revision], offline=True, cache_dir=spec.cache_dir)
        kwargs = with_adapter_lookup(kwargs)
    else:
        location, kwargs = path or spec.path, {}
        if not Path(location, "config.json").is_file():
            raise FileNotFoundError(
                f"checkpoint {spec.name!r}: {location} is not a model directory (no config.json)"
            )
    model = AutoModelForCausalLM.from_pretrained(location, dtype=dtype, **kwargs, **placement)
    if not placement:
        model = model.to(device)
    use_small_head_attention(model)  # CPU models with small heads (bench/bench_attention.py)
    model.eval()
    tokenizer = load_checkpoint_tokenizer(spec, path)
    std_file = Path(location, "init_std.json") if spec.source != "hub" else None
    if std_file is not None and std_file.is_file():
        init_std, source = json.loads(std_file.read_text()), "recorded"
    else:
        init_std, source = init_std_from_config(model, model.config), "config"
        log.warning(
            "checkpoint %s has no recorded init std: using the family's N(0, %.3g^2) from its config",
            spec.name,
            getattr(model.config, "initializer_range", 0.02),
        )
    return model, tokenizer, init_std, source


def load_checkpoint_tokenizer(spec: CheckpointSpec, path: str | None):
    """The checkpoint's own tokenizer (a hub checkpoint's from the same revision)."""
    from pipeline.data.tokenizer import load_tokenizer

    return _hub_tokenizer(spec) if spec.source == "hub" else load_tokenizer(path or spec.path)


def hub_kwargs(spec: CheckpointSpec) -> dict:
    """from_pretrained arguments of a hub checkpoint: revision, cache_dir, local_files_only."""
    from pipeline.models.hub import hub_offline

    return {
        "revision": spec.revision,
        "cache_dir": spec.cache_dir,
        "local_files_only": hub_offline(spec.offline),
    }


def with_adapter_lookup(kwargs: dict) -> dict:
    """Hub `from_pretrained` kwargs for a model: transformers 5.23 looks for a PEFT
    adapter_config.json without the cache_dir and local_files_only it was given
    (Auto*.from_pretrained); offline that is a hub request with five retries (~25 s) per load.
    Hand them to the adapter lookup explicitly."""
    adapter = {"cache_dir": kwargs["cache_dir"], "local_files_only": kwargs["local_files_only"]}
    return {**kwargs, "adapter_kwargs": adapter}


def _hub_tokenizer(spec: CheckpointSpec):
    """The checkpoint's own tokenizer (same revision); padding falls back to EOS (Llama/Amber has none)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(spec.model_id, **hub_kwargs(spec))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def fingerprint(spec: CheckpointSpec, path: str | None) -> str:
    """Identity of a checkpoint's weights, for caching results computed from it.

    A hub checkpoint is its model id and the commit its revision resolves to in the cache (a
    branch such as `main` that moves to a new commit gets a new fingerprint).
    """
    if spec.source == "hub":
        from pipeline.models.hub import cached_commit

        commit = cached_commit(spec.model_id, spec.revision, spec.cache_dir)
        key = f"{spec.model_id}@{commit or spec.revision}"
    else:
        files = (
            sorted(Path(path or spec.path).glob("*.safetensors"))
            + sorted(Path(path or spec.path).glob("*.bin"))
            + [Path(path or spec.path, "config.json")]
        )
        key = ";".join(f"{f.name}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files if f.exists())
    return hashlib.sha256(key.encode()).hexdigest()[:16]
