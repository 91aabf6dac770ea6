"""Parse time of the fine-tuning methods (`finetune.methods`): every method that trains less than
every parameter names what exists in each checkpoint its text fine-tuning jobs load (rules finetune
and finetune_grid, the search's runs, ntk), before any job, dry run included.

A checkpoint's module and parameter names (pipeline/models/selection.py `ModelNames`) come from its
architecture on the meta device (a preset's, or a local or hub checkpoint's config.json; no weights,
nothing downloaded), built once per architecture and transformers version and kept in
.snakemake/overtrain/model-names/: torch (~5 s of imports) is loaded by the first parse with such
a method, not by the next ones. Light: no torch here.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import asdict
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.models.hub import cached_commit, repo_cache_dir
from pipeline.models.presets import SIZE_PRESETS
from pipeline.models.selection import ModelNames, check_selection
from pipeline.workflow.config import finetune_enabled, finetune_methods, tokenizer_vocab
from pipeline.workflow.multimodal import text_tasks
from pipeline.workflow.schema import ConfigError

if TYPE_CHECKING:
    from pipeline.models.checkpoints import CheckpointSpec

NAMES_CACHE = Path(".snakemake", "overtrain", "model-names")  # under the workflow's working directory
BUILD = Path(__file__).parents[1] / "models" / "build.py"


def check_methods(config: dict, specs: Iterable[CheckpointSpec], cache: Path = NAMES_CACHE) -> None:
    """Every method that trains less than every parameter (LoRA's targets and rank, `params.modules`'
    patterns, the output layer) against each of `specs`' names; a ConfigError naming the method's
    key, the pattern, the checkpoint and the model's module names. A LLaVA task trains every
    parameter (check_multimodal)."""
    methods = {m: s["params"] for m, s in finetune_methods(config).items() if s.get("params", "all") != "all"}
    if not (methods and finetune_enabled(config) and text_tasks(config)):
        return
    vocab, seen = tokenizer_vocab(config["tokenizer"]), set()
    for spec in specs:
        key = architecture_key(spec, vocab)
        if key in seen:
            continue
        seen.add(key)
        names = model_names(spec, vocab, key, cache)
        for method, params in methods.items():
            try:
                check_selection(names, params)
            except ValueError as err:
                named = str(err).replace("methods.*", f"methods.{method}")
                raise ConfigError(f"invalid config: {named} (checkpoint {spec.name})") from None


def config_at_hand(spec: CheckpointSpec) -> bool:
    """Whether a checkpoint's architecture is known without a download: a preset, a local directory,
    a hub revision in the cache (the others are checked when the run starts, after their revisions)."""
    return spec.source != "hub" or cached_commit(spec.model_id, spec.revision, spec.cache_dir) is not None


def architecture_key(spec: CheckpointSpec, vocab: int) -> str:
    """What a checkpoint's names follow from, as a digest: its preset, the study's vocabulary and the
    code that builds its config, or its config.json (a hub revision's from the cache, else its id);
    and the transformers version."""
    if spec.source == "sweep":  # the preset's transformers config is built in models/build.py
        what = {"preset": asdict(SIZE_PRESETS[spec.model]), "vocab": vocab, "build": BUILD.read_text()}
    elif spec.source == "local":
        what = {"config": Path(spec.path, "config.json").read_text()}
    else:
        commit = cached_commit(spec.model_id, spec.revision, spec.cache_dir)
        snapshot = repo_cache_dir(spec.model_id, spec.cache_dir) / "snapshots" / str(commit) / "config.json"
        what = {"config": snapshot.read_text()} if commit else {"hub": [spec.model_id, spec.revision]}
    what["transformers"] = version("transformers")
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:20]


def model_names(spec: CheckpointSpec, vocab: int, key: str, cache: Path) -> ModelNames:
    """A checkpoint's names: the cached copy under `key`, else built on the meta device (torch) and
    cached (written whole: a parse killed meanwhile leaves no half file)."""
    path = cache / f"{key}.json"
    if path.is_file():
        return ModelNames.from_json(json.loads(path.read_text()))
    from pipeline.models.loading import architecture  # heavy (torch): once per architecture

    names = ModelNames.of(architecture(spec, vocab, local_files_only=config_at_hand(spec)))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(asdict(names)))
    os.replace(tmp, path)
    return names
