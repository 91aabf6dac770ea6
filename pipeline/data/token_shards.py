"""Pre-tokenized training data on disk, read slice by slice: the OLMo / OLMo-core format (raw 1-D
arrays of token ids with no header, uint16 or uint32, EOS between documents; OLMo-core's "Data
loading" guide), as `pretrain.token_shards` names them, or the study's own `data/train_tokens.npy`.

Torch-free and light (numpy only, and only in the functions that open shards): the Snakefile checks
the shards at start-up (`check_shards`) from their sizes alone, before any job.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DTYPES = {"uint16": 2, "uint32": 4}  # bytes per token id


def id_dtype(vocab_size: int) -> str:
    """The narrowest id type of the format that holds the vocabulary's ids."""
    return "uint16" if vocab_size <= 2**16 else "uint32"


@dataclass(frozen=True)
class ShardSet:
    """`pretrain.token_shards`: the shard files (globs expanded, in order) and their id type."""

    paths: tuple[str, ...]
    dtype: str

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype]

    def sizes(self) -> list[int]:
        """Tokens per shard, from the file sizes."""
        return [os.path.getsize(p) // self.itemsize for p in self.paths]


def expand_paths(key: str, patterns: list[str], expected: str) -> list[str]:
    """Files and glob patterns as files, in order (each glob sorted); a clear error naming `key` for a
    pattern that matches nothing (a file that is missing) or something that is not a regular file (a
    folder's size is no count of tokens)."""
    paths: list[str] = []
    for pattern in patterns:
        found = sorted(glob.glob(str(pattern)))
        if not found:
            raise ValueError(f"{key}: {pattern} matches no file (expected {expected})")
        for path in found:
            if not os.path.isfile(path):
                what = "a folder" if os.path.isdir(path) else "not a regular file"
                raise ValueError(f"{key}: {path} is {what} (expected {expected})")
        paths += found
    return paths


def shard_set(section: dict) -> ShardSet:
    """The shard set of `pretrain.token_shards` ({paths: [files or globs], dtype}); a clear error for
    a pattern that matches nothing or a file that is missing."""
    expected = "token shards: raw uint16/uint32 arrays, OLMo's format"
    return ShardSet(
        tuple(expand_paths("pretrain.token_shards.paths", section["paths"], expected)), section["dtype"]
    )


def pretrain_shards(section: dict, inputs: Sequence[str]) -> ShardSet | None:
    """The shards a job of the study reads, from the `pretrain` config section and the job's token
    inputs: the study's own (`text_files`, tokenized by rule tokenize_shard, each with its record
    naming its id type), `token_shards`, or None (the study's split)."""
    if section.get("text_files"):
        dtypes = {json.loads(Path(p).with_suffix(".json").read_text())["dtype"] for p in inputs}
        if len(dtypes) != 1:
            raise ValueError(f"the study's token shards disagree on their id type: {sorted(dtypes)}")
        return ShardSet(tuple(inputs), dtypes.pop())
    return shard_set(section["token_shards"]) if section.get("token_shards") else None


def check_shards(shards: ShardSet, vocab_size: int) -> int:
    """Every shard whole (a size in whole token ids, not empty) and its id type able to hold the
    vocabulary; the tokens available."""
    if vocab_size > 256**shards.itemsize:
        raise ValueError(
            f"pretrain.token_shards.dtype: {shards.dtype} holds ids below {256**shards.itemsize:,}, but the "
            f"vocabulary has {vocab_size:,} tokens; expected uint32"
        )
    for path in shards.paths:
        size = os.path.getsize(path)
        if size == 0 or size % shards.itemsize:
            raise ValueError(
                f"pretrain.token_shards: {path} is truncated or empty ({size:,} bytes, not a whole number "
                f"of {shards.dtype} ids); expected a complete shard"
            )
    return sum(shards.sizes())


class TokenStream:
    """Token files as one sequence of token ids, read by positioned reads (`os.pread`) of the slices
    asked for: the job's memory stays the same whatever the files' size. Supports `len` and
    contiguous slicing, which is what the samplers use.

    Not a memmap: the kernel maps more of a memmapped file than each random chunk touches (pages
    around it), and the mapped pages count in the job's RSS until the map is closed; pre-training
    samples chunks at random over the whole file, so its peak RSS grew by +73% from 1x to 20x the
    corpus against +3% by positioned reads (bench/bench_tokenize.py prints both)."""

    def __init__(self, paths: tuple[str, ...], dtype: str, header_bytes: tuple[int, ...] | None = None):
        import numpy as np

        self.paths, self.dtype = paths, np.dtype(dtype)
        self.header_bytes = header_bytes or (0,) * len(paths)  # where each file's ids begin
        sizes = [
            (os.path.getsize(p) - o) // self.dtype.itemsize
            for p, o in zip(paths, self.header_bytes, strict=True)
        ]
        self.starts = np.cumsum([0, *sizes])

    @classmethod
    def of_shards(cls, shards: ShardSet) -> TokenStream:
        """`pretrain.token_shards`: raw files, no header."""
        return cls(shards.paths, shards.dtype)

    @classmethod
    def of_npy(cls, path: str | Path) -> TokenStream:
        """A 1-D `.npy` array (the study's own split): its ids past the header."""
        import numpy as np

        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read_header = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, fortran, dtype = read_header(f)
            if len(shape) != 1:
                raise ValueError(f"{path}: expected a 1-D array of token ids, got shape {shape}")
            return cls((str(path),), dtype.str, (f.tell(),))

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getitem__(self, index: slice) -> Any:
        import numpy as np

        start, stop, step = index.indices(len(self))
        if step != 1:
            raise ValueError("token files are read in contiguous slices")
        pieces = []
        i = int(np.searchsorted(self.starts, start, side="right")) - 1
        while start < stop:
            offset = start - int(self.starts[i])
            take = min(stop - start, int(self.starts[i + 1]) - start)
            pieces.append(self._read(i, offset, take))
            start += take
            i += 1
        return np.concatenate(pieces) if len(pieces) != 1 else pieces[0]

    def _read(self, part: int, offset: int, count: int) -> Any:
        """`count` ids of file `part` from its id `offset` (opened per read: a sweep may have more
        shards than a process may hold open)."""
        import numpy as np

        size = self.dtype.itemsize
        fd = os.open(self.paths[part], os.O_RDONLY)
        try:
            data = os.pread(fd, count * size, self.header_bytes[part] + offset * size)
        finally:
            os.close(fd)
        if len(data) != count * size:
            raise ValueError(
                f"{self.paths[part]}: {len(data)} bytes where {count * size} were expected (truncated?)"
            )
        return np.frombuffer(data, dtype=self.dtype)


def open_tokens(path: str | Path | None, shards: ShardSet | None) -> TokenStream:
    """The training tokens a pre-training job reads: the shards (`pretrain.token_shards`), else the
    study's own split (`path`, a .npy file)."""
    return TokenStream.of_shards(shards) if shards is not None else TokenStream.of_npy(path)
