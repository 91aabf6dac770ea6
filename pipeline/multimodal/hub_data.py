"""LLaVA's data named on the hub instead of a local path: `multimodal.data.local` entries may be
`hf://datasets/<org>/<name>[@<revision>][/<path>]` (a file, e.g. LCS-558K's
blip_laion_cc_sbu_558k.json, or a folder), and an evaluation set may be `hub`: its published
lmms-lab dataset (pipeline/multimodal/benchmarks.py), only the files of the split lmms-eval reads.

huggingface_hub resolves each to a file or folder of the hub cache: downloaded where the network
allows, read from the cache alone offline (`HF_HUB_OFFLINE=1`, or `local_files_only`). LLaVA's
images stay in `image_dir`: the 665K mix draws them from five sources the hub does not hold together.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from pipeline.models.hub import hub_cache_dir
from pipeline.multimodal.benchmarks import benchmark

HUB = "hub"  # an evaluation set's value: its registry record's lmms-lab dataset
HF_URI = re.compile(r"hf://datasets/(?P<repo>[\w.-]+/[\w.-]+)(?:@(?P<revision>[\w.-]+))?(?:/(?P<path>.+))?")


@dataclass(frozen=True)
class HubRef:
    """A dataset repository at a revision, and a file or folder in it (None: the whole repository)."""

    repo: str
    revision: str = "main"
    path: str | None = None
    patterns: tuple[str, ...] = ()  # a folder's files to fetch (empty: all of it)

    def hint(self) -> str:
        return f"hf download {self.repo} {self.path or ''} --repo-type dataset --revision {self.revision}"


def hub_ref(value: str, eval_set: str | None = None) -> HubRef | None:
    """The hub reference `value` names (`hf://datasets/...`, or `hub` for evaluation set `eval_set`),
    None for a local path."""
    if value == HUB:
        if eval_set is None:
            raise ValueError("'hub' names an evaluation set's lmms-lab dataset; give hf://datasets/... here")
        b = benchmark(eval_set)
        if b.hub_name:  # config folders: the questions', and GQA's images'
            patterns = tuple(f"{name}/*" for name in (b.hub_name, b.images_name) if name)
        else:
            patterns = (f"*{b.split}-*.parquet", f"*{b.split}/*.parquet")
        return HubRef(b.hub_path, patterns=patterns)
    m = HF_URI.fullmatch(value)
    if m is None:
        return None
    path = m["path"].strip("/") if m["path"] else None
    return HubRef(m["repo"], m["revision"] or "main", path, (f"{path}/*",) if path else ())


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")


def resolve(
    value: str,
    key: str,
    eval_set: str | None = None,
    cache_dir: str | None = None,
    local_files_only: bool | None = None,
) -> str:
    """The local path `value` names: itself, or its hub file or folder in the cache (fetched unless
    offline). FileNotFoundError naming `key` and how to download it when the hub cannot give it."""
    ref = hub_ref(value, eval_set)
    if ref is None:
        return value
    from huggingface_hub import hf_hub_download, snapshot_download

    only_cache = offline() if local_files_only is None else local_files_only
    cache_dir = str(hub_cache_dir(cache_dir))  # $HF_HUB_CACHE as it is now, not at import
    try:
        if ref.path and Path(ref.path).suffix:  # one file
            return hf_hub_download(
                ref.repo,
                ref.path,
                repo_type="dataset",
                revision=ref.revision,
                cache_dir=cache_dir,
                local_files_only=only_cache,
            )
        root = snapshot_download(
            ref.repo,
            repo_type="dataset",
            revision=ref.revision,
            allow_patterns=list(ref.patterns) or None,
            cache_dir=cache_dir,
            local_files_only=only_cache,
        )
    except Exception as e:  # huggingface_hub's errors: offline, not cached, no such repo or file
        where = "the hub cache (offline)" if only_cache else "the hub or its cache"
        raise FileNotFoundError(f"{key}: {value} is not in {where} ({type(e).__name__}); {ref.hint()}") from e
    folder = Path(root, ref.path or "")
    if not folder.exists():
        raise FileNotFoundError(f"{key}: {value}: no {ref.path!r} in {ref.repo}@{ref.revision}; {ref.hint()}")
    return str(folder)
