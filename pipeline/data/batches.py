"""Model-ready batches: right-padded inputs with shifted labels (IGNORE_INDEX where no loss is
scored), and the seeded samplers that draw training batches as a pure function of the step (a
resumed run draws the same batches)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import torch

IGNORE_INDEX = -100  # label of a position no loss scores (torch's cross-entropy default)


# Above this many examples an epoch's order is computed index by index (`FeistelPermutation`) instead
# of held as an array: 2^24 int64 indices are 128 MiB per epoch (pre-training on 128B tokens in
# chunks of 1024 would need ~1 GiB). Below it, numpy's permutation, as every study so far used.
IN_MEMORY_ORDER = 2**24


class FeistelPermutation:
    """A pseudo-random permutation of [0, n) in constant memory: a 4-round Feistel network on the
    smallest even power of 2 >= n, keyed by `key`, with cycle-walking back into [0, n) (the standard
    construction of format-preserving encryption; Black & Rogaway 2002, "Ciphers with Arbitrary
    Finite Domains")."""

    ROUNDS = 4

    def __init__(self, n: int, key: np.random.Generator):
        self.n = n
        self.half = max(1, (max(n - 1, 1).bit_length() + 1) // 2)  # bits per half
        self.mask = (1 << self.half) - 1
        self.keys = [int(k) for k in key.integers(0, 2**32, self.ROUNDS)]

    def _round(self, x: int, k: int) -> int:
        return ((x * 0x9E3779B1 + k) ^ (x >> 7) ^ (k >> 3)) * 0x85EBCA6B & self.mask

    def _encrypt(self, i: int) -> int:
        left, right = i >> self.half, i & self.mask
        for k in self.keys:
            left, right = right, left ^ self._round(right, k)
        return (left << self.half) | right

    def __getitem__(self, i: int) -> int:
        j = self._encrypt(i)
        while j >= self.n:  # cycle-walking: a bijection of the larger domain stays one of [0, n)
            j = self._encrypt(j)
        return j


class EpochOrder:
    """Index stream over n examples; epoch e visits them in a permutation seeded by (seed, e): held in
    memory up to `in_memory` examples, computed index by index above (constant memory)."""

    def __init__(self, n: int, seed: int, in_memory: int = IN_MEMORY_ORDER):
        if n < 1:
            raise ValueError("cannot sample from an empty training split")
        self.n, self.seed, self.in_memory = n, seed, in_memory

    @lru_cache(maxsize=4)  # noqa: B019 (a few permutations per sampler, which lives for the run)
    def _order(self, epoch: int) -> np.ndarray | FeistelPermutation:
        rng = np.random.default_rng([self.seed, epoch])
        return rng.permutation(self.n) if self.n <= self.in_memory else FeistelPermutation(self.n, rng)

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
