"""A study's LLaVA data, written once by rule vlm_data and read by every LLaVA job.

`results/<study>/data/vlm/data.json` names where each part is: the images (the toy's image store,
or the cluster's image folder), stage 1's captions and stage 2's instructions in LLaVA's JSON
format, the five benchmark sets in their published schemas, and (toy) the chance levels. Rule
vlm_data checks every image of every record once, before any job trains (missing or unreadable:
an error naming the file, or skipped and counted with `multimodal.on_missing: skip`), and records
the counts.

Stage 2's records are split by a hash of their id: `VALIDATION_SHARE` of them (at least
`MIN_VALIDATION`) are the held-out conversations early stopping reads, the rest are trained on.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.io import atomic_path
from pipeline.multimodal.config import EVAL_SETS, LocalData, ToyDataConfig, VlmConfig
from pipeline.multimodal.eval_data import load_eval_set
from pipeline.multimodal.hub_data import resolve
from pipeline.multimodal.images import ImageDir, ImageStore
from pipeline.multimodal.llava_json import read_llava_json
from pipeline.multimodal.toy_data import make_toy_corpus, toy_paths

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pipeline.multimodal.eval_data import EvalItem
    from pipeline.multimodal.images import ImageSource
    from pipeline.multimodal.llava_json import LlavaRecord

DATA_JSON = "data.json"
VALIDATION_SHARE = 0.02
MIN_VALIDATION = 64


def write_toy_data(cfg: ToyDataConfig, out_dir: str | Path) -> dict[str, Any]:
    """Build the offline toy corpus under `out_dir` and its data.json; the record."""
    manifest = make_toy_corpus(cfg, out_dir)
    paths = toy_paths(out_dir)
    record = {
        "source": "toy",
        "images": {"store": str(paths["images"])},
        "stage1": str(paths["stage1"]),
        "stage2": str(paths["stage2"]),
        "eval": {name: str(paths[name]) for name in EVAL_SETS},
        "eval_image_dir": None,
        "chance": manifest["chance"],
        "counts": manifest.get("counts", {}),
    }
    return _write(out_dir, record)


def write_local_data(local: LocalData, cfg: VlmConfig, out_dir: str | Path) -> dict[str, Any]:
    """Check the cluster's LLaVA files (every record's image, every benchmark set read once) and
    write data.json naming them, hub references resolved to the hub cache's files
    (pipeline/multimodal/hub_data.py); the record. Errors name the key and the file."""
    missing = [name for name in EVAL_SETS if name not in local.eval]
    if missing:
        raise ValueError(f"multimodal.data.local.eval: no file for {missing} (each of {list(EVAL_SETS)})")
    key = "multimodal.data.local"
    local = dataclasses.replace(  # hub references (hf://datasets/..., hub) as files of the hub cache
        local,
        stage1=local.stage1 and resolve(local.stage1, f"{key}.stage1"),
        stage2=local.stage2 and resolve(local.stage2, f"{key}.stage2"),
        eval={name: resolve(local.eval[name], f"{key}.eval.{name}", eval_set=name) for name in EVAL_SETS},
    )
    for field in ("stage1", "stage2", "image_dir"):
        value = getattr(local, field)
        if value is None or not Path(value).exists():
            raise FileNotFoundError(f"{key}.{field}: {value!r} does not exist")
    images = ImageDir(local.image_dir)
    counts = {}
    for stage in ("stage1", "stage2"):
        data = read_llava_json(getattr(local, stage), images, on_missing=cfg.on_missing)
        counts[stage] = {"records": len(data.records), "skipped": data.missing.summary()}
    for name in EVAL_SETS:
        counts[name] = {"items": len(load_eval_set(name, local.eval[name], image_dir=local.eval_image_dir))}
    record = {
        "source": "local",
        "images": {"dir": str(local.image_dir)},
        "stage1": str(local.stage1),
        "stage2": str(local.stage2),
        "eval": {name: str(local.eval[name]) for name in EVAL_SETS},
        "eval_image_dir": local.eval_image_dir,
        "chance": None,
        "counts": counts,
    }
    return _write(out_dir, record)


def _write(out_dir: str | Path, record: dict) -> dict:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / DATA_JSON) as tmp:
        tmp.write_text(json.dumps(record, indent=1))
    return record


def is_validation(record_id: str) -> bool:
    """Whether a stage-2 record is held out (a hash of its id)."""
    h = int(hashlib.sha256(f"vlm-validation/{record_id}".encode()).hexdigest()[:8], 16)
    return h / 0xFFFFFFFF < VALIDATION_SHARE


@dataclass
class VlmData:
    """The parts of a study's LLaVA data that a job reads."""

    images: ImageSource
    records: list[LlavaRecord]
    eval_sets: dict[str, list[EvalItem]]
    chance: Mapping[str, Any] | None


def read_vlm_data(data_json: str | Path, stage: str, cfg: VlmConfig, benchmarks: bool = True) -> VlmData:
    """One stage's records (capped by `multimodal.max_records`) and, with `benchmarks`, the five sets
    (the first `multimodal.eval_max_items` items of each)."""
    d = json.loads(Path(data_json).read_text())
    images = ImageStore.read(d["images"]["store"]) if "store" in d["images"] else ImageDir(d["images"]["dir"])
    data = read_llava_json(d[stage], images, on_missing=cfg.on_missing)
    log.info("%s: %s", d[stage], data.missing.summary())
    records = data.records
    cap = cfg.max_records.get(stage)
    if cap is not None:
        records = records[:cap]
    sets = {}
    if benchmarks:
        for name in EVAL_SETS:
            items = load_eval_set(name, d["eval"][name], image_dir=d["eval_image_dir"])
            sets[name] = items[: cfg.eval_max_items] if cfg.eval_max_items else items
    return VlmData(images, records, sets, d.get("chance"))


def split_stage2(records: list[LlavaRecord]) -> tuple[list[LlavaRecord], list[LlavaRecord]]:
    """(train, validation) by a hash of each record's id; at least MIN_VALIDATION held out."""
    held = [r for r in records if is_validation(r.id)]
    if len(held) < MIN_VALIDATION:
        ranked = sorted(records, key=lambda r: hashlib.sha256(f"vlm-validation/{r.id}".encode()).hexdigest())
        held = ranked[: min(MIN_VALIDATION, len(records) // 10)]
    ids = {r.id for r in held}
    return [r for r in records if r.id not in ids], held
