"""Tokenization as a fan-out over text files (`pretrain.text_files`, e.g. C4 `en`'s json.gz files):
one job per file streams its documents through the tokenizer in batches and writes an OLMo-format
token shard (raw uint16/uint32 ids, no header, EOS after each document), its index (each document's
start offset, raw uint64) and a record (dtype, counts, source). Memory holds one batch of documents,
whatever the file's size; every output is written atomically, so a failed job leaves nothing that
looks finished and the files already tokenized stay done.

The tokenizer is `tokenizers`' own (Rust, `encode_batch`) on a `tokenizer.json`: the job adds only
the flattening of each batch into the shard (bench/bench_tokenize.py measures both).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import chain
from pathlib import Path
from typing import Any

from pipeline.data.token_shards import id_dtype
from pipeline.io import atomic_path, write_json

SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz", ".parquet")  # JSON: one document per line
HUB = "hf://datasets/"  # a hub dataset's file: hf://datasets/<repo>@<revision>/<file>


def hub_source(repo: str, revision: str, file: str) -> str:
    """The source of one file of a hub dataset at a revision (`pretrain.text_files.hub`)."""
    return f"{HUB}{repo}@{revision}/{file}"


def local_text_file(source: str) -> str:
    """A text file's local path: a local source itself; a hub dataset's file from the hub cache,
    downloaded there on first use (offline, HF_HUB_OFFLINE=1: the cache only, e.g. files fetched
    beforehand with `huggingface-cli download --repo-type dataset --revision ...`)."""
    if not source.startswith(HUB):
        return source
    from huggingface_hub import hf_hub_download

    repo, at = source[len(HUB) :].split("@", 1)
    revision, file = at.split("/", 1)
    return hf_hub_download(repo, file, repo_type="dataset", revision=revision)


def shard_name(path: str | Path) -> str:
    """A text file's shard name: its file name without the data suffix (c4-train.00000-of-01024)."""
    name = Path(path).name
    for suffix in sorted(SUFFIXES, key=len, reverse=True):
        if name.endswith(suffix):
            return re.sub(r"[^A-Za-z0-9._-]", "_", name[: -len(suffix)])
    raise ValueError(f"pretrain.text_files: {path}: expected one of {', '.join(SUFFIXES)}")


def read_documents(path: str | Path, field: str, batch_documents: int) -> Iterator[list[str]]:
    """The file's documents' `field`, `batch_documents` at a time, streamed by pyarrow's readers
    (C++: JSON lines, gzipped or not, by blocks; Parquet by record batches)."""
    path = Path(path)
    if path.name.endswith(".parquet"):
        import pyarrow.parquet as pq

        parquet = pq.ParquetFile(path)
        if field not in parquet.schema_arrow.names:
            raise ValueError(f"pretrain.text_files: {path} has no column {field!r} (text_field)")
        blocks = (b.column(0) for b in parquet.iter_batches(batch_size=batch_documents, columns=[field]))
    else:
        import pyarrow as pa
        import pyarrow.json as pj

        schema = pa.schema([(field, pa.string())])  # only the text is parsed
        only_text = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
        try:
            reader = pj.open_json(str(path), parse_options=only_text)
        except pa.ArrowInvalid as err:
            if "Empty JSON stream" in str(err):
                return  # no documents
            raise ValueError(f"pretrain.text_files: {path} is not JSON lines: {err}") from None
        blocks = (b.column(0) for b in reader)
    batch: list[str] = []
    for column in blocks:
        if column.null_count:
            raise ValueError(
                f"pretrain.text_files: {path} has a document without a string field {field!r} (text_field)"
            )
        batch += column.to_pylist()
        while len(batch) >= batch_documents:
            yield batch[:batch_documents]
            batch = batch[batch_documents:]
    if batch:
        yield batch


def tokenize_file(
    path: str | Path,
    tokenizer_file: str | Path,
    eos: str,
    out: str | Path,
    index: str | Path,
    record: str | Path,
    field: str = "text",
    batch_documents: int = 1024,
) -> dict[str, Any]:
    """Tokenize one text file into its shard (`out`), index and record; returns the record."""
    import numpy as np
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    eos_id = tokenizer.token_to_id(eos)
    if eos_id is None:
        raise ValueError(f"{tokenizer_file}: no end-of-document token {eos!r}")
    dtype = id_dtype(tokenizer.get_vocab_size())
    tokens = documents = 0
    with atomic_path(out) as tmp_out, atomic_path(index) as tmp_index:
        with open(tmp_out, "wb") as shard, open(tmp_index, "wb") as starts:
            for texts in read_documents(path, field, batch_documents):
                ids = [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)]
                lengths = np.fromiter((len(x) + 1 for x in ids), dtype=np.uint64, count=len(ids))
                flat = np.fromiter(
                    chain.from_iterable(chain(x, (eos_id,)) for x in ids),
                    dtype=dtype,
                    count=int(lengths.sum()),
                )
                (tokens + np.cumsum(lengths) - lengths).astype(np.uint64).tofile(starts)
                flat.tofile(shard)
                tokens, documents = tokens + len(flat), documents + len(ids)
        if tokens == 0:
            raise ValueError(f"pretrain.text_files: {path} holds no documents")
    info = {"source": str(path), "field": field, "dtype": dtype, "tokens": tokens, "documents": documents}
    write_json(record, info)
    return info
