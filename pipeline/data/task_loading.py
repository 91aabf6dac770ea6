"""A task's items per split: read from its source (pipeline/data/task_sources.py), duplicates
dropped, divided into train/validation/test by a hash of each item's content and capped (see the
registry, pipeline/data/tasks.py, for the rules)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from pipeline.data.packages import (
    package_dir,
)
from pipeline.data.task_items import (
    SPLITS,
    ChatItem,
    ClassificationItem,
    Task,
    TaskError,
    item_text,
)
from pipeline.data.task_sources import EMBEDDED_SPLITS, Embedded, hub_split
from pipeline.data.tasks import TASKS, task_config, task_kind


@cache
def embedded_copy(name: str, pkgs: Path, _stamp: tuple) -> Embedded:
    """The task's embedded copy (cached per package-file mtime)."""
    return TASKS[name].embedded(pkgs)


def _key(name: str, item: Any) -> str:
    if isinstance(item, ClassificationItem):
        text = "\x00".join((item.context, item.prompt, *item.choices))
    elif isinstance(item, ChatItem):
        text = "\x00".join(f"{m.role}\x01{m.content}" for m in item.messages)
    else:
        text = item
    return f"{name}\x00{text}"


def _unit(key: str, salt: str = "") -> float:
    return int.from_bytes(hashlib.sha256((salt + key).encode()).digest()[:8], "big") / 2**64


def _assign(key: str, targets: tuple[str, ...], fractions: Mapping[str, float]) -> str:
    """Divide by hash among `targets` in proportion to their weights (all three: like corpus.split_of)."""
    if len(targets) == 1:
        return targets[0]
    weights = {
        "validation": fractions["validation"],
        "test": fractions["test"],
        "train": 1 - fractions["validation"] - fractions["test"],
    }
    order = [s for s in ("validation", "test", "train") if s in targets]
    u, total, acc = _unit(key), sum(weights[s] for s in order), 0.0
    for s in order:
        acc += weights[s] / total
        if u < acc:
            return s
    return order[-1]


def _split(
    name: str, sources: Mapping[str, tuple[tuple[str, ...], list]], c: Mapping
) -> tuple[dict[str, list], list[str]]:
    """sources: source split -> (our splits it feeds, [(where, item)])."""
    out: dict[str, list[tuple[float, Any]]] = {s: [] for s in SPLITS}
    notes = []
    for src, (targets, items) in sources.items():
        seen: set[str] = set()
        dropped = 0
        for _, item in items:
            if isinstance(item, str) and not item.strip():
                dropped += 1
                continue
            k = _key(name, item)
            if k in seen:
                dropped += 1
                continue
            seen.add(k)
            out[_assign(k, targets, c["split_fractions"])].append((_unit(k, "order\x00"), item))
        if dropped:
            notes.append(f"{name}: {dropped} duplicate or empty items of source split {src!r} dropped")
    splits = {}
    for s in SPLITS:
        ranked = [it for _, it in sorted(out[s], key=lambda p: p[0])]
        n = len(ranked)
        if c["max_items"][s] is not None:
            ranked = ranked[: c["max_items"][s]]
        if not ranked:
            raise TaskError(
                f"task {name}: split {s!r} is empty ({n} items before capping, "
                f"max_items {c['max_items'][s]}, "
                f"split_fractions {dict(c['split_fractions'])}); use more data or larger fractions"
            )
        splits[s] = ranked
    return splits, notes


def load_task(name: str, cfg: Mapping | None = None) -> Task:
    """A task's items per split from its `finetune.task_data` entry (`TaskData`)."""
    c = task_config(name, cfg)
    if c["source"] == "embedded":
        pkgs = package_dir(c["package_dir"])
        files = [pkgs / f for f in TASKS[name].embedded_files]
        stamp = tuple((f.name, f.stat().st_mtime_ns if f.is_file() else None) for f in files)
        raw, notes0, provenance = embedded_copy(name, pkgs.resolve(), stamp)
        sources = {src: (EMBEDDED_SPLITS[src], items) for src, items in raw.items()}
    else:
        by_hub: dict[str, list[str]] = {}
        for ours, hub in c["hub_splits"].items():
            by_hub.setdefault(hub, []).append(ours)
        skipped: list[str] = []
        sources = {
            hub: (tuple(ours), hub_split(TASKS[name], c, hub, skipped)) for hub, ours in by_hub.items()
        }
        notes0 = tuple(skipped)
        provenance = (
            f"hub {c['path']}" + (f" ({c['name']})" if c["name"] else "") + f" splits {c['hub_splits']}"
        )
    kind = task_kind(name)
    if kind == "classification":
        labels = {item.label for _, items in sources.values() for _, item in items}
        if len(labels) < 2:
            raise TaskError(
                f"task {name}: every item has label {sorted(labels)}; "
                "a classification task needs at least two classes"
            )
        for _, items in sources.values():
            for where, item in items:
                if not 0 <= item.label < len(item.choices):
                    raise TaskError(
                        f"{where}: label {item.label} out of range for {len(item.choices)} choices"
                    )
    splits, notes = _split(name, sources, c)
    return Task(name, kind, splits, provenance, tuple(notes0) + tuple(notes))


def task_texts(name: str, cfg: Mapping | None = None) -> list[str]:
    """The training-split texts of a task (e.g. for training the study's tokenizer on them too)."""
    return [item_text(it) for it in load_task(name, cfg).splits["train"]]


def task_stats(task: Task) -> dict[str, Any]:
    """Per-split item counts (and label counts for classification) for logs and summaries."""
    stats: dict[str, Any] = {
        "task": task.name,
        "kind": task.kind,
        "source": task.source,
        "notes": list(task.notes),
    }
    for s, items in task.splits.items():
        entry: dict[str, Any] = {"items": len(items)}
        if task.kind == "classification":
            counts = [0] * max(len(it.choices) for it in items)
            for it in items:
                counts[it.label] += 1
            entry["labels"] = counts
        elif task.kind == "chat":
            entry["assistant_turns"] = sum(m.role == "assistant" for it in items for m in it.messages)
            entry["chars"] = sum(len(m.content) for it in items for m in it.messages)
        else:
            entry["chars"] = sum(len(t) for t in items)
        stats[s] = entry
    return stats
