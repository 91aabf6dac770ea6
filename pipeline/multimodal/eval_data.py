"""The five VLM benchmarks read from local parquet files in their published lmms-lab schemas, their
prompts as lmms-eval builds them, and the writer of files in those schemas (the offline toy's).

A file is what the hub serves (`datasets` parquet): images as `{"bytes", "path"}` structs (HF's
`Image` feature); `load_eval_set` takes one parquet file or a folder (a snapshot of the dataset
repository, or the toy's `eval/<name>/`) and reads the benchmark's split from it. GQA is two
configs: the questions (`testdev_balanced_instructions`) and the images (`testdev_balanced_images`,
joined on `imageId` == `id`, as lmms-eval's `gqa_process_docs` does).

Prompts (`EvalItem.prompt`) are lmms-eval's default `doc_to_text` (lmms_eval/tasks/<name>/utils.py),
without the image placeholder: lmms-eval's `llava_hf` puts "<image>\\n" in front of a context that
has none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.io import atomic_path
from pipeline.multimodal.benchmarks import (
    MME_REPLACED,
    POPE_SPLITS,
    VlmBenchmarkError,
    benchmark,
)
from pipeline.multimodal.images import decode_image

if TYPE_CHECKING:
    from PIL import Image


@dataclass(frozen=True)
class EvalItem:
    """One question of a benchmark."""

    benchmark: str
    id: str
    image: bytes = field(repr=False)  # the encoded image as stored (PNG, JPEG, ...)
    question: str  # the question as published
    prompt: str  # lmms-eval's doc_to_text: the user turn after "<image>\n"
    answers: tuple[str, ...]  # mme, gqa, pope: (answer,); ai2d: (the letter,); textvqa: the 10 references
    fields: Mapping[str, str] = field(default_factory=dict)  # mme: category, question_id; pope: category
    where: str = ""  # file and row, for messages

    def pil(self) -> Image.Image:
        """The image as a PIL RGB image (lmms-eval's doc_to_visual: `.convert("RGB")`)."""
        return decode_image(self.image, self.where or f"{self.benchmark} item {self.id}")


def letters(n: int) -> list[str]:
    return [chr(ord("A") + i) for i in range(n)]


def mme_prompt(question: str, post_prompt: str) -> str:
    """mme_doc_to_text: the question stripped, " Please answer yes or no." removed, the post_prompt added."""
    return question.strip().replace(MME_REPLACED, "") + post_prompt


def gqa_prompt(question: str, post_prompt: str) -> str:
    """gqa_doc_to_text: the question as it is, then the post_prompt."""
    return f"{question}{post_prompt}"


def ai2d_prompt(question: str, options: Sequence[str], post_prompt: str) -> str:
    """ai2d_doc_to_text (prompt_format mcq): the question, an "A. option" line per option, the post_prompt."""
    choices = "\n".join(f"{letter}. {option}" for letter, option in zip(letters(len(options)), options))
    return f"{question}\n{choices}{post_prompt}"


def pope_prompt(question: str, post_prompt: str) -> str:
    """pope_doc_to_text: the question stripped, then the post_prompt."""
    return f"{question.strip()}{post_prompt}"


def textvqa_prompt(question: str, post_prompt: str) -> str:
    """textvqa_doc_to_text (ocr: false): `question.capitalize()` (which lower-cases the rest), post_prompt."""
    return f"{question.capitalize()}{post_prompt}"


def _parquet_files(name: str, path: Path, config: str | None, split: str) -> list[Path]:
    """The parquet files of one split: `path` itself, or under it (in the config's folder if there is
    one) those named `<split>*.parquet`."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise VlmBenchmarkError(f"{name}: {path} does not exist (a parquet file or a folder of them)")
    root = path / config if config and (path / config).is_dir() else path
    files = sorted(p for p in root.rglob(f"{split}*.parquet") if p.is_file())
    if name == "pope" and not files:  # the Full config: one file set per POPE split
        files = sorted(p for s in POPE_SPLITS for p in root.rglob(f"{s}*.parquet") if p.is_file())
    if not files:
        raise VlmBenchmarkError(f"{name}: no {split}*.parquet under {root}")
    return files


def _rows(name: str, files: list[Path], columns: Sequence[str]) -> list[tuple[str, dict]]:
    """(where, row) of every row of `files`, each file checked to have `columns`."""
    import pyarrow.parquet as pq

    out = []
    for f in files:
        have = pq.read_schema(f).names
        missing = [c for c in columns if c not in have]
        if missing:
            raise VlmBenchmarkError(
                f"{name}: {f} lacks columns {missing} of the published schema (has {have}); "
                f"is it {benchmark(name).hub_path}?"
            )
        for i, row in enumerate(pq.read_table(f, columns=list(columns)).to_pylist()):
            out.append((f"{f} row {i}", row))
    return out


def _image(value: Any, where: str, image_dir: Path | None) -> bytes:
    """An HF Image value ({"bytes", "path"}) -> encoded bytes (a path alone: read under `image_dir`)."""
    if isinstance(value, dict):
        if value.get("bytes"):
            return value["bytes"]
        if value.get("path"):
            p = Path(value["path"])
            p = p if p.is_absolute() or image_dir is None else image_dir / p
            if not p.is_file():
                raise VlmBenchmarkError(f"{where}: image file {p} does not exist")
            return p.read_bytes()
    if isinstance(value, bytes | bytearray) and value:
        return bytes(value)
    raise VlmBenchmarkError(f"{where}: no image (expected a {{'bytes', 'path'}} struct)")


def _text(row: Mapping, key: str, where: str) -> str:
    value = row.get(key)
    if not isinstance(value, str):
        raise VlmBenchmarkError(f"{where}: column {key!r} is {value!r}, expected a string")
    return value


def _yes_no(row: Mapping, where: str, normalise: Callable[[str], str]) -> str:
    answer = _text(row, "answer", where)
    if normalise(answer) not in ("yes", "no"):
        raise VlmBenchmarkError(f"{where}: answer {answer!r} is not yes or no")
    return answer


def _mme(rows, post, image_dir):
    out = []
    for where, r in rows:
        q = _text(r, "question", where)
        answer = _yes_no(r, where, lambda a: a.lower().strip().replace(".", ""))
        fields = {"category": _text(r, "category", where), "question_id": _text(r, "question_id", where)}
        img = _image(r["image"], where, image_dir)
        out.append(EvalItem("mme", str(len(out)), img, q, mme_prompt(q, post), (answer,), fields, where))
    return out


def _strings(row: dict, column: str, where: str) -> list[str]:
    """A column holding a non-empty list of strings (AI2D's options, TextVQA's answers)."""
    value = row.get(column)
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise VlmBenchmarkError(f"{where}: {column!r} must be a non-empty list of strings, got {value!r}")
    return value


def _ai2d(rows, post, image_dir):
    out = []
    for where, r in rows:
        q, options = _text(r, "question", where), _strings(r, "options", where)
        answer = _text(r, "answer", where)
        if not answer.strip().isdigit() or not 0 <= int(answer) < len(options):
            raise VlmBenchmarkError(
                f"{where}: answer {answer!r} is not an index of the {len(options)} options"
            )
        letter = letters(len(options))[int(answer)]
        img = _image(r["image"], where, image_dir)
        fields = {"options": "\n".join(options)}
        out.append(
            EvalItem("ai2d", str(len(out)), img, q, ai2d_prompt(q, options, post), (letter,), fields, where)
        )
    return out


def _pope(rows, post, image_dir):
    out = []
    for where, r in rows:
        q = _text(r, "question", where)
        answer = _yes_no(r, where, lambda a: a.lower().strip())
        category = _text(r, "category", where)
        if category not in POPE_SPLITS:
            raise VlmBenchmarkError(f"{where}: category {category!r} is not one of {POPE_SPLITS}")
        img = _image(r["image"], where, image_dir)
        qid = str(r["question_id"])
        fields = {"category": category, "question_id": qid}
        out.append(EvalItem("pope", str(len(out)), img, q, pope_prompt(q, post), (answer,), fields, where))
    return out


def _textvqa(rows, post, image_dir):
    out = []
    for where, r in rows:
        q, answers = _text(r, "question", where), _strings(r, "answers", where)
        img = _image(r["image"], where, image_dir)
        fields = {"image_id": str(r["image_id"])}
        qid = str(r["question_id"])
        out.append(EvalItem("textvqa", qid, img, q, textvqa_prompt(q, post), tuple(answers), fields, where))
    return out


def _gqa(rows, post, image_rows, image_dir):
    images: dict[str, bytes] = {}
    for where, r in image_rows:
        images.setdefault(_text(r, "id", where), _image(r["image"], where, image_dir))
    out = []
    for where, r in rows:
        q, image_key = _text(r, "question", where), _text(r, "imageId", where)
        if image_key not in images:
            raise VlmBenchmarkError(
                f"{where}: imageId {image_key!r} is not in the GQA images ({len(images)} read)"
            )
        answer = _text(r, "answer", where)
        fields = {"imageId": image_key}
        out.append(
            EvalItem("gqa", str(r["id"]), images[image_key], q, gqa_prompt(q, post), (answer,), fields, where)
        )
    return out


def load_eval_set(
    name: str,
    path: str | Path,
    images: str | Path | None = None,
    image_dir: str | Path | None = None,
) -> list[EvalItem]:
    """The items of benchmark `name` (mme | gqa | ai2d | pope | textvqa) from local parquet files in its
    published schema, in file order.

    path: a parquet file, or a folder holding the split's files (GQA: the questions' config folder
    or its parent); images (GQA only): the images' parquet file or folder (default: `path`'s parent
    folder's `testdev_balanced_images`); image_dir: where an image given by path alone is read.
    Errors (VlmBenchmarkError) name the file, the row and the column."""
    b = benchmark(name)
    path = Path(path)
    idir = Path(image_dir) if image_dir is not None else None
    rows = _rows(name, _parquet_files(name, path, b.hub_name, b.split), b.columns)
    if name == "gqa":
        if images is None:
            tries = [d / b.images_name for d in (path, path.parent, path.parent.parent)]
            found = [d for d in tries if d.is_dir()]
            if not found:
                raise VlmBenchmarkError(f"gqa: no images given and none of {[str(d) for d in tries]} exists")
            images = found[0]
        image_files = _parquet_files(name, Path(images), b.images_name, b.split)
        return _gqa(rows, b.post_prompt, _rows(name, image_files, ("id", "image")), idir)
    build = {"mme": _mme, "ai2d": _ai2d, "pope": _pope, "textvqa": _textvqa}[name]
    return build(rows, b.post_prompt, idir)


# The published features (HF `datasets` feature dicts) of what the toy writes: the columns of the
# lmms-lab datasets' cards (GQA: the columns read plus fullAnswer, isBalanced and types, of its
# testdev_balanced_instructions config).
def published_features(kind: str):
    """The `datasets.Features` of a published table: mme | gqa | gqa_images | ai2d | pope | textvqa."""
    from datasets import Features, Image, List, Value

    s = Value("string")
    spec: dict[str, dict[str, Any]] = {
        "mme": {"question_id": s, "image": Image(), "question": s, "answer": s, "category": s},
        "gqa": {
            "id": s,
            "imageId": s,
            "question": s,
            "answer": s,
            "fullAnswer": s,
            "isBalanced": Value("bool"),
            "types": {"structural": s, "semantic": s, "detailed": s},
        },
        "gqa_images": {"id": s, "image": Image()},
        "ai2d": {"question": s, "options": List(s), "answer": s, "image": Image()},
        "pope": {
            "id": s,
            "question_id": s,
            "question": s,
            "answer": s,
            "image_source": s,
            "image": Image(),
            "category": s,
        },
        "textvqa": {
            "image_id": s,
            "question_id": Value("int32"),
            "question": s,
            "question_tokens": List(s),
            "image": Image(),
            "image_width": Value("int32"),
            "image_height": Value("int32"),
            "flickr_original_url": s,
            "flickr_300k_url": s,
            "answers": List(s),
            "image_classes": List(s),
            "set_name": s,
            "ocr_tokens": List(s),
        },
    }
    return Features(spec[kind])


def image_value(png: bytes, path: str) -> dict[str, Any]:
    """An HF `Image` value: the encoded bytes and a file name."""
    return {"bytes": png, "path": path}


def write_published(kind: str, rows: Sequence[Mapping[str, Any]], path: str | Path) -> None:
    """Write rows as a parquet file in a published schema (`published_features`), with the HF
    features in the schema metadata (so `datasets` decodes the images), atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    features = published_features(kind)
    schema = features.arrow_schema
    table = pa.Table.from_pylist([{k: r[k] for k in schema.names} for r in rows], schema=schema)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
