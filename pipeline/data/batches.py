"""Model-ready batches: right-padded inputs with shifted labels (IGNORE_INDEX where no loss is
scored), and the seeded samplers that draw training batches as a pure function of the step (a
resumed run draws the same batches)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import torch

IGNORE_INDEX = -100  # label of a position no loss scores (torch's cross-entropy default)


class EpochOrder:
    """Index stream over n examples; epoch e visits them in a permutation seeded by (seed, e)."""

    def __init__(self, n: int, seed: int):
        if n < 1:
            raise ValueError("cannot sample from an empty training split")
        self.n, self.seed = n, seed

    @lru_cache(maxsize=4)  # noqa: B019 (a few permutations per sampler, which lives for the run)
    def _order(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(self.n)

    def take(self, first: int, count: int) -> list[int]:
        return [int(self._order(i // self.n)[i % self.n]) for i in range(first, first + count)]


class ChunkSampler:
    """Batches of contiguous token chunks; epoch e visits chunks in a permutation seeded by (seed, e).

    Chunk i covers tokens [i*L, i*L + L] (L+1 tokens: inputs and shifted targets).
    """

    def __init__(self, tokens: np.ndarray, seq_len: int, batch_size: int, seed: int):
        self.tokens = tokens
        self.seq_len = seq_len
        self.batch_size = batch_size
        self.seed = seed
        self.n_chunks = (len(tokens) - 1) // seq_len
        if self.n_chunks < 1:
            raise ValueError(f"{len(tokens)} tokens cannot fill one sequence of length {seq_len}")

        self.order = EpochOrder(self.n_chunks, seed)

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        idx = self.order.take(step * self.batch_size, self.batch_size)
        starts = np.asarray(idx, dtype=np.int64) * self.seq_len
        rows = np.stack([self.tokens[s : s + self.seq_len + 1] for s in starts]).astype(np.int64)
        rows = torch.from_numpy(rows)
        return {"input_ids": rows[:, :-1], "labels": rows[:, 1:]}


def pad_masked_batch(
    seqs: Sequence[np.ndarray], scored: Sequence[np.ndarray], pad: int
) -> dict[str, torch.Tensor]:
    """Right-padded inputs and shifted labels, IGNORE_INDEX where the target is not scored."""
    width = max(len(s) for s in seqs) - 1
    inputs = torch.full((len(seqs), width), pad, dtype=torch.long)
    labels = torch.full((len(seqs), width), IGNORE_INDEX, dtype=torch.long)
    for r, (s, m) in enumerate(zip(seqs, scored)):
        t = torch.from_numpy(np.asarray(s, dtype=np.int64))
        n = len(s) - 1
        inputs[r, :n] = t[:-1]
        target_scored = torch.from_numpy(np.asarray(m[1:], dtype=bool))
        labels[r, :n] = torch.where(target_scored, t[1:], IGNORE_INDEX)
    return {"input_ids": inputs, "labels": labels}


def pad_scored_batch(seqs: list[list[int]], n_scored: list[int], pad: int) -> dict[str, torch.Tensor]:
    """Right-padded inputs and shifted labels where only the last `n_scored` tokens count."""
    scored = [np.arange(len(s)) >= len(s) - k for s, k in zip(seqs, n_scored)]
    return pad_masked_batch(seqs, scored, pad)
