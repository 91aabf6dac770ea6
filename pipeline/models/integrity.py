"""Hub revisions a study can trust: each revision resolved to a commit once at start-up, the
sha256 of its weight files recorded, and two checkpoints serving identical weights stopping the
study before any job uses them (hub branches have served the wrong weights:
EleutherAI/pythia#205, EleutherAI/pythia#108). The record is the study's hub lock,
`results/<study>/hub/lock.json`: {checkpoint: {repo, revision, commit, weights, weights_from}};
jobs load the locked commit (offline when its snapshot is cached) and every output row carries
(repo, revision, commit).

Light: huggingface_hub only inside the function that asks the hub for LFS metadata.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from pipeline.models.hub import (
    HubRevisionError,
    _endpoint,
    _transport_errors,
    check_hub_checkpoints,
    file_sha256,
    hub_cache_dir,
    hub_offline,
    repo_cache_dir,
)

log = logging.getLogger(__name__)

LOCK = "hub/lock.json"  # under results/<study>/ (pipeline/layout.py study_path)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def is_weight_file(name: str) -> bool:
    return name.endswith(WEIGHT_SUFFIXES)


def weight_hashes(
    model_id: str,
    commit: str,
    cache_dir: str | os.PathLike | None = None,
    offline: bool | None = None,
    endpoint: str | None = None,
    timeout: float = 10.0,
) -> tuple[dict[str, str], str]:
    """({weight file: sha256}, where from) of one commit: the hub's LFS metadata when online ("lfs":
    one request, no download), else computed from the cached snapshot's files ("cache"). Neither
    available is an error."""
    if not hub_offline(offline):
        hashes = _lfs_hashes(model_id, commit, endpoint, timeout)
        if hashes:
            return hashes, "lfs"
    snap = repo_cache_dir(model_id, cache_dir) / "snapshots" / commit
    files = (
        sorted(p for p in snap.rglob("*") if p.is_file() and is_weight_file(p.name)) if snap.is_dir() else []
    )
    if not files:
        raise HubRevisionError(
            f"{model_id} at commit {commit}: no weight file ({', '.join(WEIGHT_SUFFIXES)}) in the cache at "
            f"{hub_cache_dir(cache_dir)} and no LFS metadata from the hub to hash it by"
        )
    return {p.relative_to(snap).as_posix(): file_sha256(p) for p in files}, "cache"


def _lfs_hashes(model_id: str, commit: str, endpoint: str | None, timeout: float) -> dict[str, str]:
    """{weight file: LFS sha256} from model_info(files_metadata=True); {} when the hub does not answer."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    try:
        info = HfApi(endpoint=_endpoint(endpoint)).model_info(
            model_id, revision=commit, files_metadata=True, timeout=timeout
        )
    except (*_transport_errors(), OfflineModeIsEnabled, HfHubHTTPError, OSError) as err:
        log.warning("no LFS metadata for %s@%s (%s): hashing the cached files", model_id, commit, err)
        return {}
    return {
        s.rfilename: s.lfs.sha256
        for s in info.siblings or []
        if is_weight_file(s.rfilename) and getattr(s, "lfs", None) is not None
    }


def weights_digest(weights: Mapping[str, str]) -> str:
    """One sha256 for a checkpoint's weights: its single weight file's, else that of the sorted
    (file, sha256) list of its shards."""
    if len(weights) == 1:
        return next(iter(weights.values()))
    manifest = "\n".join(f"{name} {sha}" for name, sha in sorted(weights.items()))
    return hashlib.sha256(manifest.encode()).hexdigest()


def check_distinct(records: Mapping[str, Mapping]) -> None:
    """Two checkpoints with identical weights (one model at two "budgets") are an error naming
    both revisions and the hash."""
    seen: dict[str, str] = {}
    lines = []
    for name, rec in records.items():
        digest = weights_digest(rec["weights"])
        if digest in seen:
            first = records[seen[digest]]
            lines.append(
                f"identical weights: {first['repo']}@{first['revision']} (commit {first['commit'][:12]}, "
                f"{seen[digest]}) and {rec['repo']}@{rec['revision']} (commit {rec['commit'][:12]}, {name}) "
                f"both have weights sha256 {digest}"
            )
        else:
            seen[digest] = name
    if lines:
        raise HubRevisionError(
            "\n".join(lines) + "\nthe hub serves one model under two budgets: drop one of them from the "
            "study (and report it to the family, as in EleutherAI/pythia#205)"
        )


def lock_study(specs: Iterable, lock_path: str | os.PathLike, timeout: float = 10.0) -> dict[str, dict]:
    """Start-up: resolve every hub checkpoint's revision to a commit (one refs request per repo, or
    the cache offline), record its weights' sha256, stop on identical weights, and write the lock
    atomically. A checkpoint already in the lock keeps its commit: a revision that now points
    elsewhere is an error (delete the lock to accept the hub's new commit)."""
    specs = [s for s in specs if s.source == "hub"]
    if not specs:
        return {}
    lock_path = Path(lock_path)
    old = read_lock(lock_path)
    commits = check_hub_checkpoints(specs, timeout=timeout)
    records, moved = {}, []
    for spec in specs:
        commit = commits.get(spec.name)
        prior = old.get(spec.name)
        if prior and commit and prior["commit"] != commit:
            moved.append(
                f"{spec.model_id}@{spec.revision} now points to commit {commit}; the study's lock "
                f"({lock_path}) has {prior['commit']}"
            )
            continue
        if prior and (commit is None or prior["commit"] == commit):
            records[spec.name] = prior
            continue
        if commit is None:
            raise HubRevisionError(
                f"{spec.model_id}@{spec.revision}: no commit to lock (not cached, hub unreachable)"
            )
        weights, source = weight_hashes(spec.model_id, commit, spec.cache_dir, spec.offline, timeout=timeout)
        records[spec.name] = {
            "repo": spec.model_id,
            "revision": spec.revision,
            "commit": commit,
            "weights": weights,
            "weights_from": source,
        }
    if moved:
        raise HubRevisionError(
            "\n".join(moved) + "\nresults computed on the locked commits would mix with new weights: "
            f"delete {lock_path} to accept the hub's commits (and rerun the study)"
        )
    check_distinct(records)
    write_lock(lock_path, {**old, **records})
    return records


def write_lock(path: str | os.PathLike, records: Mapping[str, Mapping]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{path.name}-{os.getpid()}")
    tmp.write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def read_lock(path: str | os.PathLike | None) -> dict[str, dict]:
    """The lock's records ({} when there is none)."""
    if not path or not Path(path).is_file():
        return {}
    stat = Path(path).stat()
    return dict(_read(str(path), stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=8)
def _read(path: str, mtime_ns: int, size: int) -> dict[str, dict]:
    return json.loads(Path(path).read_text())


def locked_commit(name: str, lock_path: str | os.PathLike | None) -> str | None:
    """The commit a checkpoint's revision was locked to at start-up, else None."""
    rec = read_lock(lock_path).get(name)
    return rec["commit"] if rec else None
