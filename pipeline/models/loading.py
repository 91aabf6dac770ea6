"""Loading a study's checkpoint (`CheckpointSpec`, pipeline/models/checkpoints.py) for a job: its
weights in the device's evaluation dtype, its own tokenizer, its recorded initialisation scale,
and the identity of its weights for caches. Job-time (torch, transformers)."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from pipeline.data.tokenizer import load_tokenizer
from pipeline.models.attention import use_small_head_attention
from pipeline.models.build import init_std_from_config, model_config
from pipeline.models.hub import cached_commit, check_hub_revisions, hub_offline

if TYPE_CHECKING:
    from pipeline.models.checkpoints import CheckpointSpec

log = logging.getLogger(__name__)


def default_dtype(device: torch.device) -> torch.dtype:
    """bf16 on GPU (as the paper's models are trained), fp32 on CPU: how checkpoints are loaded and
    every model is evaluated on that device (base, perturbed, fine-tuned in one process or sharded),
    so a difference between two rows holds no precision change."""
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

    device = torch.device(device)
    dtype = dtype or default_dtype(device)
    placement = {"device_map": str(device)} if device.type == "cuda" else {}
    if spec.source == "hub":
        location, kwargs = spec.model_id, hub_kwargs(spec)
        if kwargs["local_files_only"]:
            check_hub_revisions(spec.model_id, [kwargs["revision"]], offline=True, cache_dir=spec.cache_dir)
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
    return _hub_tokenizer(spec) if spec.source == "hub" else load_tokenizer(path or spec.path)


def hub_kwargs(spec: CheckpointSpec) -> dict:
    """from_pretrained arguments of a hub checkpoint: revision, cache_dir, local_files_only. With
    the study's lock, the revision is the commit it was locked to at start-up, read from the
    cache alone when its snapshot is there (no request to the hub per job)."""
    commit = spec.commit
    cached = commit is not None and cached_commit(spec.model_id, commit, spec.cache_dir) is not None
    return {
        "revision": commit or spec.revision,
        "cache_dir": spec.cache_dir,
        "local_files_only": hub_offline(spec.offline) or cached,
    }


def architecture(spec: CheckpointSpec, vocab_size: int, local_files_only: bool = False) -> torch.nn.Module:
    """A checkpoint's model on the meta device: its modules and shapes without weights or memory
    (a sweep checkpoint's preset before it is pre-trained, with the study's `vocab_size`);
    local_files_only: a hub checkpoint's config from the cache, without asking the hub."""
    if spec.source == "sweep":
        config = model_config(spec.model, vocab_size, 0, 1)
    elif spec.source == "local":
        config = AutoConfig.from_pretrained(spec.path)
    else:
        kwargs = hub_kwargs(spec) | ({"local_files_only": True} if local_files_only else {})
        config = AutoConfig.from_pretrained(spec.model_id, **kwargs)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def with_adapter_lookup(kwargs: dict) -> dict:
    """Hub `from_pretrained` kwargs for a model: transformers 5.23 looks for a PEFT
    adapter_config.json without the cache_dir and local_files_only it was given
    (Auto*.from_pretrained); offline that is a hub request with five retries (~25 s) per load.
    Hand them to the adapter lookup explicitly."""
    adapter = {"cache_dir": kwargs["cache_dir"], "local_files_only": kwargs["local_files_only"]}
    return {**kwargs, "adapter_kwargs": adapter}


def _hub_tokenizer(spec: CheckpointSpec):
    """The checkpoint's own tokenizer (same revision); padding falls back to EOS (Llama/Amber has none)."""
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
        commit = spec.commit or cached_commit(spec.model_id, spec.revision, spec.cache_dir)
        key = f"{spec.model_id}@{commit or spec.revision}"
    else:
        files = (
            sorted(Path(path or spec.path).glob("*.safetensors"))
            + sorted(Path(path or spec.path).glob("*.bin"))
            + [Path(path or spec.path, "config.json")]
        )
        key = ";".join(f"{f.name}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files if f.exists())
    return hashlib.sha256(key.encode()).hexdigest()[:16]
