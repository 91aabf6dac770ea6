"""Where a study's base checkpoints come from: its own pre-training sweep, local
directories, or hub revisions (model id + revision + token count). Light: the Snakefile reads the
specs at parse time; jobs load them with pipeline/models/loading.py."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipeline.layout import PRETRAIN_RUN, PRETRAIN_STABLE_TWIN, study_path
from pipeline.models.families import family_checkpoints
from pipeline.models.hub import checkpoint_name, resolve_hub
from pipeline.models.integrity import LOCK, locked_commit

SOURCES = ("sweep", "local", "hub")
# where a checkpoint sits on its learning-rate schedule (the rows' schedule_phase): annealed at its
# budget (every run of a sweep: cosine to zero, or a WSD decay) or on WSD's stable run
# (`pretrain.stable_twins`); unknown (None) for hub and local checkpoints
PHASES = ("decayed", "stable")
STABLE_SUFFIX = "-stable"
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
    pretrain_seed: int | None = None  # the pre-training run's seed (sweep; a hub family's published seed)
    lock: str | None = None  # hub: the study's lock (revision -> commit, weights' sha256; integrity.py)
    phase: str | None = None  # "stable" for a WSD stable twin; None: a sweep run's own (decayed)

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(
                f"checkpoint {self.name!r}: source must be one of {SOURCES}, got {self.source!r}"
            )
        if not NAME_RE.fullmatch(self.name):
            raise ValueError(
                f"checkpoint name {self.name!r} may only contain letters, digits, '.', '_' and '-'"
            )
        if self.phase not in (None, *PHASES):
            raise ValueError(
                f"checkpoint {self.name!r}: phase must be one of {PHASES} or None, got {self.phase!r}"
            )
        if self.tokens is None or self.tokens <= 0:
            raise ValueError(
                f"checkpoint {self.name!r}: a positive token count is required, got {self.tokens!r}"
            )

    @property
    def schedule_phase(self) -> str | None:
        """PHASES: a sweep run is decayed at its budget unless it is a stable twin; None elsewhere."""
        return self.phase or ("decayed" if self.source == "sweep" else None)

    def row_fields(self, study: str) -> dict:
        """The metric-row columns that identify this checkpoint (pipeline.tables.metric_row)."""
        return dict(
            study=study,
            checkpoint=self.name,
            source=self.source,
            model=self.model,
            budget=float(self.tokens),
            budget_unit="tokens",
            pretrain_seed=self.pretrain_seed,
            schedule_phase=self.schedule_phase,
            repo=self.model_id,
            revision=self.revision,
            commit=self.commit,
        )

    @property
    def commit(self) -> str | None:
        """The commit a hub revision was locked to at start-up (None before, and off the hub)."""
        return locked_commit(self.name, self.lock) if self.source == "hub" else None


def sweep_name(preset: str, budget: int, seed: int) -> str:
    """A sweep run's checkpoint name: preset, budget and pre-training seed, e.g. `tiny-1000000-s0`."""
    return f"{preset}-{budget}-s{seed}"


def sweep_checkpoints(
    presets: list[str], budgets: list[int], seeds: list[int], study: str, stable_twins: bool = False
) -> list[CheckpointSpec]:
    """The runs of a study's own pre-training sweep (preset x pre-training seed x budget), at their
    place in the results layout; with `stable_twins` (WSD), each budget's undecayed twin after it."""
    specs = []
    for p in presets:
        for s in seeds:
            for b in budgets:
                at = dict(model=p, budget=b, pretrain_seed=s)
                name = sweep_name(p, b, s)
                path = study_path(study, PRETRAIN_RUN, **at)
                specs.append(CheckpointSpec(name, "sweep", p, int(b), path, pretrain_seed=int(s)))
                if stable_twins:
                    path = study_path(study, PRETRAIN_STABLE_TWIN, **at)
                    twin = name + STABLE_SUFFIX
                    specs.append(
                        CheckpointSpec(twin, "sweep", p, int(b), path, pretrain_seed=int(s), phase="stable")
                    )
    return specs


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
    lock: str | None = None,
) -> list[CheckpointSpec]:
    """Hub revisions of one model id (or of a Table 1 preset, `pipeline/models/hub.py`).

    Each revision is a name or `{revision, tokens}`; `tokens` may be left out when the preset
    knows it or the name carries it (`step10000-tokens41B`).
    """

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
            lock=lock,
        )
        for rev, tokens in resolved
    ]


def family_specs(hub: dict, lock: str | None = None) -> list[CheckpointSpec]:
    """A family's checkpoints (pipeline/models/families.py): its published seeds become the
    runs' `pretrain_seed`, all under one `model` label, so the statistics treat them as the
    evidence study treats its own pre-training seeds."""
    return [
        CheckpointSpec(
            checkpoint_name(c.repo, c.revision),
            "hub",
            c.model,
            c.tokens,
            model_id=c.repo,
            revision=c.revision,
            cache_dir=hub.get("cache_dir"),
            offline=hub.get("offline"),
            params=hub.get("params") or c.params,
            pretrain_seed=c.pretrain_seed,
            lock=lock,
        )
        for c in family_checkpoints(hub)
    ]


def study_checkpoints(config: dict) -> list[CheckpointSpec]:
    """The checkpoints a study's config names (see `checkpoints:` in config.yaml)."""
    ck = config["checkpoints"]
    source = ck["source"]
    if source == "sweep":
        pt = config["pretrain"]
        twins = bool(pt.get("stable_twins"))  # WSD only: the start-up checks say so
        specs = sweep_checkpoints(pt["presets"], pt["budgets"], pt["seeds"], config["study"], twins)
    elif source == "local":
        specs = local_checkpoints(ck.get("local") or [])
    elif (ck.get("hub") or {}).get("family"):
        specs = family_specs(ck["hub"], study_path(config["study"], LOCK))
    else:
        hub = ck.get("hub") or {}
        specs = hub_checkpoints(
            hub.get("model_id"),
            hub.get("revisions") or [],
            hub.get("preset"),
            hub.get("params"),
            hub.get("cache_dir"),
            hub.get("offline"),
            lock=study_path(config["study"], LOCK),
        )
    if not specs:
        raise ValueError(f"checkpoints: source {source!r} names no checkpoint")
    names = [s.name for s in specs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"checkpoints: duplicate checkpoint names {dupes}")
    return specs
