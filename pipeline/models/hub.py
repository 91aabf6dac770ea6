"""Hub checkpoints: Table 1's presets, token counts from revision names, the hub-cache layout,
and the start-up check that every revision a study names exists.

Light: no torch, and huggingface_hub only inside the functions that talk to the hub or its
cache, so the Snakefile can import this module at parse time.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pipeline.models.shapes import ModelShape

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HubPreset:
    """One model of Table 1 (Appendix B.1): its hub id, parameter count and revisions."""

    model_id: str
    params: int  # parameter count: sizes the jobs' resources (pipeline/models/presets.py)
    revisions: tuple[tuple[str, int], ...]  # (revision, pre-training tokens)
    description: str = ""
    shape: ModelShape | None = None  # its config.json's dimensions: the memory planner's input


def _olmo(names: Iterable[str]) -> tuple[tuple[str, int], ...]:
    return tuple((n, parse_tokens(n)) for n in names)


def _amber(names: Iterable[str]) -> tuple[tuple[str, int], ...]:
    return tuple((n, amber_tokens(n)) for n in names)


# LLM360/Amber has 360 revisions, ckpt_000 ... ckpt_359 (its model card, huggingface.co/LLM360/Amber),
# one per data chunk of LLM360's amber-train: 360 chunks of 1,706,976 sequences of 2,049 tokens
# (huggingface.co/datasets/LLM360/AmberDatasets), 1,259.13B tokens in all as the card says. ckpt_N
# has seen N + 1 chunks.
AMBER_CHECKPOINTS = 360
AMBER_CHUNK_TOKENS = 1_706_976 * 2_049
AMBER_REVISION = re.compile(r"ckpt_(\d{3})")


def amber_tokens(revision: str) -> int:
    """Pre-training tokens of Amber revision `ckpt_NNN`: N + 1 data chunks (Amber names carry no count)."""
    m = AMBER_REVISION.fullmatch(revision)
    if m is None or int(m.group(1)) >= AMBER_CHECKPOINTS:
        raise HubRevisionError(
            f"LLM360/Amber revision {revision!r}: expected ckpt_000 ... ckpt_{AMBER_CHECKPOINTS - 1:03d}"
        )
    return (int(m.group(1)) + 1) * AMBER_CHUNK_TOKENS


# Table 1 of the paper. OLMo revisions carry their token count in the name (`-tokens41B`); the
# table's "Token Budget" column is that count rounded to 0.1T. Amber's revisions do not: their counts
# follow from the chunk rule above (amber_tokens). Table 1's Amber counts are 12-16% below these, and
# its last revision, ckpt_410, does not exist: the preset has ckpt_359, the last one (docs/checkpoints.md).
HUB_PRESETS: dict[str, HubPreset] = {}


def _register() -> None:
    HUB_PRESETS["olmo-1b"] = HubPreset(
        "allenai/OLMo-1B-hf",
        1_180_000_000,
        _olmo(
            [
                "step10000-tokens41B",
                "step117850-tokens494B",
                "step358000-tokens1501B",
                "step447000-tokens1874B",
                "step561250-tokens2353B",
                "step738000-tokens3094B",
            ]
        ),
        "OLMo-1B (Groeneveld et al., 2024), Table 1",
        ModelShape(
            layers=16,
            hidden=2048,
            intermediate=8192,
            heads=16,
            kv_heads=16,
            vocab=50304,
            tied=True,
            context=2048,
        ),
    )
    HUB_PRESETS["olmo-2-7b"] = HubPreset(
        "allenai/OLMo-2-1124-7B",
        7_300_000_000,
        _olmo(
            [
                "stage1-step19000-tokens80B",
                "stage1-step120000-tokens504B",
                "stage1-step441000-tokens1850B",
                "stage1-step584000-tokens2450B",
                "stage1-step727000-tokens3050B",
                "stage1-step928646-tokens3896B",
            ]
        ),
        "OLMo-2-7B (OLMo et al., 2024), Table 1",
        ModelShape(
            layers=32, hidden=4096, intermediate=11008, heads=32, kv_heads=32, vocab=100352, context=4096
        ),
    )
    HUB_PRESETS["amber"] = HubPreset(
        "LLM360/Amber",
        6_740_000_000,
        _amber(["ckpt_040", "ckpt_102", "ckpt_244", "ckpt_306", "ckpt_358", "ckpt_359"]),
        "LLM360-Amber 7B (Liu et al., 2023), Table 1 (ckpt_359 for its ckpt_410; tokens by data chunk)",
        ModelShape(
            layers=32, hidden=4096, intermediate=11008, heads=32, kv_heads=32, vocab=32000, context=2048
        ),
    )
    # Not in the paper: the offline stand-in (pipeline/models/standin.py lays it out in a hub cache).
    # SmolLM2-135M was pre-trained on 2T tokens; the Instruct model adds SFT + DPO on top.
    HUB_PRESETS["smollm2-135m"] = HubPreset(
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        134_500_000,
        (("main", 2_000_000_000_000),),
        "SmolLM2-135M-Instruct: the offline stand-in (pipeline/models/standin.py), one revision",
        ModelShape(
            layers=30,
            hidden=576,
            intermediate=1536,
            heads=9,
            kv_heads=3,
            vocab=49152,
            tied=True,
            context=8192,
        ),
    )


# Parameter counts of known model ids (job resources); others come from `checkpoints.hub.params`
# or DEFAULT_HUB_PARAMS.
DEFAULT_HUB_PARAMS = 7_500_000_000  # conservative: the largest model of Table 1, rounded up

TOKENS_RE = re.compile(r"tokens(\d+(?:\.\d+)?)([KMBT])", re.IGNORECASE)
SCALE = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}
HEX40 = re.compile(r"[0-9a-f]{40}")


class HubRevisionError(ValueError):
    """A hub checkpoint that cannot be loaded: unknown revision, missing token count, no cache."""


def parse_tokens(revision: str) -> int | None:
    """Token count in a revision name (`step10000-tokens41B` -> 41e9; K/M/B/T suffixes), or None."""
    m = TOKENS_RE.search(revision)
    if m is None:
        return None
    return int(round(float(m.group(1)) * SCALE[m.group(2).upper()]))


def hub_shape(model_id: str) -> ModelShape | None:
    """The dimensions of a known hub model (HUB_PRESETS), else None."""
    return next((p.shape for p in HUB_PRESETS.values() if p.model_id == model_id), None)


def hub_params(model_id: str, declared: int | None = None) -> int:
    """Parameter count for a hub model's job resources: declared, known, or the conservative default."""
    if declared:
        return int(declared)
    for preset in HUB_PRESETS.values():
        if preset.model_id == model_id:
            return preset.params
    return DEFAULT_HUB_PARAMS


def resolve_hub(hub: dict) -> tuple[str, list[tuple[str, int]], int]:
    """(model_id, [(revision, tokens)], params) from the `checkpoints.hub` config section.

    With `preset`, the model id and (if `revisions` is empty) the revisions are Table 1's; listed
    revisions are then a subset or extension of it. A revision's token count is, in order, its
    `tokens`, the preset's, or the count in its name; none of these is an error.
    """
    preset_name = hub.get("preset")
    preset = None
    if preset_name:
        if preset_name not in HUB_PRESETS:
            raise HubRevisionError(
                f"checkpoints.hub.preset: unknown preset {preset_name!r} (known: {', '.join(HUB_PRESETS)})"
            )
        preset = HUB_PRESETS[preset_name]
    model_id = hub.get("model_id") or (preset.model_id if preset else None)
    if not model_id:
        raise HubRevisionError(
            "checkpoints.hub: a model_id (or a preset: "
            + " | ".join(HUB_PRESETS)
            + ") is required when checkpoints.source is 'hub'"
        )
    if preset and model_id != preset.model_id:
        raise HubRevisionError(
            f"checkpoints.hub: model_id {model_id!r} is not preset {preset_name!r}'s model "
            f"({preset.model_id!r}); drop one of them"
        )
    known = dict(preset.revisions) if preset else {}
    entries = hub.get("revisions") or ([{"revision": r} for r, _ in preset.revisions] if preset else [])
    out = []
    for entry in entries:
        entry = {"revision": entry} if isinstance(entry, str) else entry
        revision = str(entry["revision"])
        tokens = entry.get("tokens") or known.get(revision) or parse_tokens(revision)
        if not tokens:
            raise HubRevisionError(
                f"checkpoints.hub: revision {revision!r} of {model_id} has no token count: give it as "
                f"`{{revision: {revision}, tokens: N}}` "
                "(its name has no '-tokens<N>[KMBT]' part to read it from)"
            )
        out.append((revision, int(tokens)))
    return model_id, out, hub_params(model_id, hub.get("params"))


def checkpoint_name(model_id: str, revision: str) -> str:
    """Path-safe checkpoint name: `allenai--OLMo-1B-hf--step10000-tokens41B`."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{model_id.replace('/', '--')}--{revision}")


# --- the hub cache -------------------------------------------------------------------------


def hub_cache_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """The cache hub models are read from: `cache_dir`, else $HF_HUB_CACHE, else huggingface_hub's default."""
    if cache_dir:
        return Path(cache_dir)
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def hub_offline(offline: bool | None = None) -> bool:
    """Offline: `offline` if set, else HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE (now, or as imported)."""
    if offline is not None:
        return bool(offline)
    env = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE")
    if env is not None:
        return env.strip().upper() in {"1", "ON", "YES", "TRUE"}
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def repo_cache_dir(model_id: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """`<cache>/models--org--name`, the hub cache's folder for one model repository."""
    return hub_cache_dir(cache_dir) / ("models--" + model_id.replace("/", "--"))


def cached_commit(model_id: str, revision: str, cache_dir: str | os.PathLike | None = None) -> str | None:
    """Commit hash a revision points to in the cache when its snapshot is there (with config.json),
    else None."""
    repo = repo_cache_dir(model_id, cache_dir)
    ref = repo / "refs" / revision
    if ref.is_file():
        commit = ref.read_text().strip()
    elif HEX40.fullmatch(revision):
        commit = revision
    else:
        return None
    return commit if (repo / "snapshots" / commit / "config.json").is_file() else None


def download_hint(model_id: str, revision: str, cache_dir: str | os.PathLike | None = None) -> str:
    return f"hf download {model_id} --revision {revision} --cache-dir {hub_cache_dir(cache_dir)}"


def snapshot_into_cache(
    src: str | os.PathLike, model_id: str, revision: str, cache_dir: str | os.PathLike
) -> str:
    """Lay a model directory out as a hub snapshot: blobs/<sha256>, snapshots/<commit>/<file>
    (relative symlinks to the blobs, copies where links are unsupported) and refs/<revision>.

    The commit hash is derived from the files' contents, so the same directory always gets the
    same commit. refs/<revision> is written last and atomically: a half-written snapshot is never
    referenced. Returns the commit hash.
    """
    src = Path(src)
    files = sorted(p for p in src.rglob("*") if p.is_file())
    if not (src / "config.json").is_file():
        raise FileNotFoundError(f"{src} is not a model directory (no config.json)")
    repo = repo_cache_dir(model_id, cache_dir)
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    digests = {}
    for f in files:
        digests[f] = file_sha256(f)
        blob = repo / "blobs" / digests[f]
        if not blob.exists():
            tmp = blob.with_name(f".tmp-{blob.name}-{os.getpid()}")
            try:
                os.link(f, tmp)  # same file system: no second copy of the weights
            except OSError:
                shutil.copyfile(f, tmp)
            os.replace(tmp, blob)
    manifest = "\n".join(f"{f.relative_to(src).as_posix()} {digests[f]}" for f in files)
    commit = hashlib.sha1(f"{model_id}\n{manifest}".encode()).hexdigest()
    snap = repo / "snapshots" / commit
    if not (snap / "config.json").is_file():
        tmp_snap = Path(
            tempfile.mkdtemp(
                prefix=f".tmp-{commit}-",
                dir=repo / "snapshots" if (repo / "snapshots").is_dir() else _mkdir(repo / "snapshots"),
            )
        )
        for f in files:
            rel = f.relative_to(src)
            dest = tmp_snap / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            target = os.path.relpath(repo / "blobs" / digests[f], snap / rel.parent)
            try:
                os.symlink(target, dest)
            except OSError:
                shutil.copyfile(f, dest)
        if snap.exists():
            shutil.rmtree(snap)
        os.replace(tmp_snap, snap)
    ref = repo / "refs" / revision
    ref.parent.mkdir(parents=True, exist_ok=True)
    tmp_ref = ref.with_name(f".tmp-{ref.name}-{os.getpid()}")
    tmp_ref.write_text(commit)
    os.replace(tmp_ref, ref)
    return commit


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --- start-up checks -----------------------------------------------------------------------


def check_hub_revisions(
    model_id: str,
    revisions: Iterable[str],
    offline: bool | None = None,
    cache_dir: str | os.PathLike | None = None,
    endpoint: str | None = None,
    timeout: float = 10.0,
) -> dict[str, str | None]:
    """Check that every revision of `model_id` can be loaded; {revision: commit hash} (None: not cached yet).

    Offline (`offline`, else HF_HUB_OFFLINE): each revision must be in the cache (refs/<revision>
    and its snapshot's config.json) - only files are read. Online: one request for the
    repository's branches and tags (`timeout` seconds); an unreachable hub is an error unless every
    revision is cached (loading then falls back to the cache, as transformers does). Every problem
    is a HubRevisionError naming the revision, the model and what to do.
    """
    revisions = list(dict.fromkeys(revisions))
    cache = hub_cache_dir(cache_dir)
    cached = {r: cached_commit(model_id, r, cache) for r in revisions}
    if hub_offline(offline):
        missing = [r for r in revisions if cached[r] is None]
        if missing:
            repo = repo_cache_dir(model_id, cache)
            where = f"the cache at {cache}" + ("" if repo.is_dir() else f" (which has no {repo.name} at all)")
            lines = [
                "offline (HF_HUB_OFFLINE=1 or checkpoints.hub.offline: true) and "
                f"revision {r!r} of {model_id} is not in {where}: "
                f"download it first with `{download_hint(model_id, r, cache)}` "
                "on a machine with network access"
                for r in missing
            ]
            raise HubRevisionError("\n".join(lines))
        return cached
    refs = _hub_refs(model_id, cache, endpoint, timeout, revisions, cached)
    if refs is None:  # hub unreachable, everything cached
        return cached
    names = {name: commit for name, commit in refs.items()}
    commits = set(names.values())
    out, missing = {}, []
    for r in revisions:
        if r in names:
            out[r] = names[r]
        elif HEX40.fullmatch(r) and (r in commits or _commit_exists(model_id, r, endpoint, timeout)):
            out[r] = r
        else:
            missing.append(r)
    if missing:
        lines = []
        for r in missing:
            close = difflib.get_close_matches(r, list(names), n=3, cutoff=0.6)
            hint = f" (close: {', '.join(close)})" if close else ""
            lines.append(f"revision {r!r} does not exist on the hub for {model_id}{hint}")
        raise HubRevisionError(
            "\n".join(lines) + f"\n{model_id} has {len(names)} branches and tags; "
            f"list them with huggingface_hub.list_repo_refs({model_id!r})"
        )
    return out


def _endpoint(endpoint: str | None) -> str:
    if endpoint:
        return endpoint.rstrip("/")
    if os.environ.get("HF_ENDPOINT"):
        return os.environ["HF_ENDPOINT"].rstrip("/")
    from huggingface_hub import constants

    return constants.ENDPOINT.rstrip("/")


def _transport_errors() -> tuple[type[Exception], ...]:
    """A failed connection, as raised by huggingface_hub's HTTP client: httpx2 (huggingface_hub 2)
    or httpx (1.x, e.g. a GPU image's own), whichever is installed."""
    errors = []
    for client in ("httpx2", "httpx"):
        try:
            errors.append(importlib.import_module(client).TransportError)
        except ImportError:
            pass
    return tuple(errors)


def _hub_refs(model_id, cache, endpoint, timeout, revisions, cached) -> dict[str, str] | None:
    """{branch or tag: commit} of a hub repository; None when the hub is unreachable but every
    revision is cached."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
    )
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    url = f"{_endpoint(endpoint)}/api/models/{model_id}/refs"
    try:
        response = get_session().get(url, headers=build_hf_headers(), timeout=timeout)
        hf_raise_for_status(response)
    except GatedRepoError as err:
        raise HubRevisionError(
            f"{model_id} is gated on the hub: accept its terms and log in "
            f"(`hf auth login` or HF_TOKEN) ({err})"
        ) from None
    except RepositoryNotFoundError:
        raise HubRevisionError(
            f"model id {model_id!r} does not exist on the hub at {_endpoint(endpoint)} "
            "(or is private: log in with `hf auth login` or set HF_TOKEN)"
        ) from None
    except (*_transport_errors(), OfflineModeIsEnabled, HfHubHTTPError, OSError) as err:
        if all(cached[r] for r in revisions):
            log.warning(
                "cannot reach the hub at %s (%s): using the cached revisions of %s",
                _endpoint(endpoint),
                err,
                model_id,
            )
            return None
        missing = [r for r in revisions if not cached[r]]
        raise HubRevisionError(
            f"cannot reach the hub at {_endpoint(endpoint)} to check revisions {missing} of {model_id} "
            f"({type(err).__name__}: {err}), "
            f"and they are not in the cache at {cache}: connect to the network, "
            "or download them where you can "
            f"(`{download_hint(model_id, missing[0], cache)}`) "
            "and run offline (HF_HUB_OFFLINE=1 or checkpoints.hub.offline: true)"
        ) from None
    data = response.json()
    return {
        item["name"]: item["targetCommit"] for kind in ("branches", "tags") for item in data.get(kind, [])
    }


def _commit_exists(model_id: str, commit: str, endpoint: str | None, timeout: float) -> bool:
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RevisionNotFoundError

    try:
        HfApi(endpoint=_endpoint(endpoint)).model_info(model_id, revision=commit, timeout=timeout)
    except RevisionNotFoundError:
        return False
    return True


def check_hub_checkpoints(specs: Iterable, timeout: float = 10.0) -> dict[str, str | None]:
    """Start-up check of a study's hub checkpoints ({name: commit}); a HubRevisionError lists what is wrong.

    Cheap: offline it reads a few files of the cache; online it makes one request per model id.
    Call it once before any job starts (the Snakefile's `onstart`, or at parse time when offline).
    """
    groups: dict[tuple, list] = {}
    for spec in specs:
        if spec.source == "hub":
            groups.setdefault((spec.model_id, spec.cache_dir, spec.offline), []).append(spec)
    out, errors = {}, []
    for (model_id, cache_dir, offline), group in groups.items():
        try:
            commits = check_hub_revisions(
                model_id, [s.revision for s in group], offline, cache_dir, timeout=timeout
            )
        except HubRevisionError as err:
            errors.append(str(err))
            continue
        out.update({s.name: commits.get(s.revision) for s in group})
    if errors:
        raise HubRevisionError("\n".join(errors))
    return out


_register()
