"""Training and validation batches of encoded conversations with their images.

LLaVA-1.5 groups a batch by modality (`group_by_modality_length`): a batch is all image
conversations or all text-only ones. Here an epoch is the image batches and the text batches in
one order drawn from (seed, epoch), each modality's rows from its own permutation; a step's batch is
a pure function of the step (a resumed run draws the same ones). An image batch carries
`pixel_values`, one image per row in row order (what `LlavaForConditionalGeneration` scatters into
the rows' image tokens).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from pipeline.data.batches import EpochOrder, pad_masked_batch
from pipeline.multimodal.images import load_image

if TYPE_CHECKING:
    import torch

    from pipeline.multimodal.conversation import EncodedConversations
    from pipeline.multimodal.images import ImageSource
    from pipeline.multimodal.tower import Preprocess


class ConversationSampler:
    """Single-modality batches of `batch_size` conversations (module docstring)."""

    def __init__(
        self,
        enc: EncodedConversations,
        images: ImageSource,
        preprocess: Preprocess,
        batch_size: int,
        seed: int,
        pad: int,
    ):
        self.enc, self.images, self.preprocess, self.pad = enc, images, preprocess, pad
        self.batch_size, self.seed = batch_size, seed
        self.rows = {
            True: [i for i, key in enumerate(enc.images) if key is not None],
            False: [i for i, key in enumerate(enc.images) if key is None],
        }
        self.orders = {m: EpochOrder(len(r), seed + int(m)) for m, r in self.rows.items() if r}
        self.per_modality = {m: -(-len(r) // batch_size) for m, r in self.rows.items()}
        self.steps_per_epoch = sum(self.per_modality.values())
        if self.steps_per_epoch == 0:
            raise ValueError("no conversation to train on")

    @lru_cache(maxsize=4)  # noqa: B019 (a few epochs' schedules per sampler, which lives for the run)
    def _schedule(self, epoch: int) -> list[tuple[bool, int]]:
        """(modality, its batch index within the epoch) of each step of `epoch`, shuffled."""
        slots = [(m, k) for m in (True, False) for k in range(self.per_modality[m])]
        order = np.random.default_rng([self.seed, epoch, 7]).permutation(len(slots))
        return [slots[i] for i in order]

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        epoch, within = divmod(step, self.steps_per_epoch)
        modality, k = self._schedule(epoch)[within]
        n = len(self.rows[modality])
        first = epoch * n + k * self.batch_size  # this modality's position in its own index stream
        picked = self.orders[modality].take(first, self.batch_size)
        return self.make([self.rows[modality][i] for i in picked])

    def make(self, rows: Sequence[int]) -> dict[str, torch.Tensor]:
        """The batch of conversations `rows` (all with an image, or none)."""
        batch = pad_masked_batch(
            [self.enc.ids[i] for i in rows], [self.enc.scored[i] for i in rows], self.pad
        )
        keys = [self.enc.images[i] for i in rows]
        if any(k is not None for k in keys):
            if any(k is None for k in keys):
                raise ValueError("a batch mixes conversations with and without an image")
            where = [f"conversation {self.enc.record_ids[i]!r}" for i in rows]
            batch["pixel_values"] = self.preprocess(
                [load_image(k, self.images, w) for k, w in zip(keys, where)]
            )
        return batch


def evaluation_batches(sampler: ConversationSampler, batch_size: int) -> Callable[[], Iterator[dict]]:
    """Every conversation once, in file order, in single-modality batches of `batch_size`."""

    def batches() -> Iterator[dict[str, torch.Tensor]]:
        for modality in (True, False):
            rows = sampler.rows[modality]
            for s in range(0, len(rows), batch_size):
                yield sampler.make(rows[s : s + batch_size])

    return batches
