"""Pre-tokenized training data on disk, read by memmap: the OLMo / OLMo-core format (raw 1-D arrays of
token ids with no header, uint16 or uint32, EOS between documents; OLMo-core's "Data loading" guide),
as `pretrain.token_shards` names them, or the study's own `data/train_tokens.npy`.

Torch-free and light (numpy only, and only in the functions that open shards): the Snakefile checks
the shards at start-up (`check_shards`) from their sizes alone, before any job.
"""

from __future__ import annotations

import glob
import os
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
    pattern that matches nothing (a file that is missing)."""
    paths: list[str] = []
    for pattern in patterns:
        found = sorted(glob.glob(str(pattern)))
        if not found:
            raise ValueError(f"{key}: {pattern} matches no file (expected {expected})")
        paths += found
    return paths


def shard_set(section: dict) -> ShardSet:
    """The shard set of `pretrain.token_shards` ({paths: [files or globs], dtype}); a clear error for
    a pattern that matches nothing or a file that is missing."""
    expected = "token shards: raw uint16/uint32 arrays, OLMo's format"
    return ShardSet(
        tuple(expand_paths("pretrain.token_shards.paths", section["paths"], expected)), section["dtype"]
    )


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
    """The shards as one sequence of token ids, read by memmap (constant memory: pages are read as
    slices touch them). Supports `len` and slicing, which is what the samplers use."""

    def __init__(self, shards: ShardSet):
        import numpy as np

        self.parts = [np.memmap(p, dtype=shards.dtype, mode="r") for p in shards.paths]
        self.starts = np.cumsum([0] + [len(p) for p in self.parts])

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getitem__(self, index: slice) -> Any:
        import numpy as np

        start, stop, step = index.indices(len(self))
        if step != 1:
            raise ValueError("token shards are read in contiguous slices")
        pieces = []
        i = int(np.searchsorted(self.starts, start, side="right")) - 1
        while start < stop:
            offset = start - int(self.starts[i])
            take = min(stop - start, len(self.parts[i]) - offset)
            pieces.append(self.parts[i][offset : offset + take])
            start += take
            i += 1
        return np.concatenate(pieces) if len(pieces) != 1 else np.asarray(pieces[0])


def open_tokens(path: str | Path | None, shards: ShardSet | None) -> Any:
    """The training tokens a pre-training job reads: the shards (`pretrain.token_shards`), else the
    study's own split (`path`, a .npy memmap)."""
    import numpy as np

    return TokenStream(shards) if shards is not None else np.load(path, mmap_mode="r")
