"""A job's processes (ranks) and the data-parallel pattern of its evaluation work: every rank takes
its share of a list of work items, and the results come back to every rank in the list's order.

A leaf module (torch.distributed is imported only when a job has several ranks), so evaluation and
generation code can split work over ranks without depending on the training package. One process
is world size 1 of the same code: its share is everything and gathering returns its own results.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Ranks:
    """This process's place in the job: rank `rank` of `world`."""

    rank: int = 0
    world: int = 1

    @property
    def several(self) -> bool:
        """Whether the job's work is split over several processes (collectives are no-ops when not)."""
        return self.world > 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def rows(self, n: int) -> slice:
        """This rank's rows of a global batch of n rows (n must divide evenly)."""
        if n % self.world:
            raise ValueError(f"a global batch of {n} rows cannot be split evenly over {self.world} ranks")
        k = n // self.world
        return slice(self.rank * k, (self.rank + 1) * k)

    def share(self, n: int) -> range:
        """This rank's items of n work items, dealt round-robin (items of similar cost next to each
        other, e.g. batches sorted by length, spread evenly over the ranks)."""
        return range(self.rank, n, self.world)

    def all_sum(self, value):
        """The sum over ranks of a tensor, in place (the tensor itself for one process)."""
        if self.several:
            import torch.distributed as dist

            dist.all_reduce(value, op=dist.ReduceOp.SUM)
        return value

    def barrier(self) -> None:
        if self.several:
            import torch.distributed as dist

            dist.barrier()

    def broadcast(self, value: T) -> T:
        """Rank 0's `value` on every rank (a collective)."""
        if not self.several:
            return value
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def all_gather(self, value: T) -> list[T]:
        """Every rank's `value`, in rank order, on every rank (a collective)."""
        if not self.several:
            return [value]
        import torch.distributed as dist

        values: list = [None] * self.world
        dist.all_gather_object(values, value)
        return values


SINGLE = Ranks()


def map_shared(items: Sequence[T], work: Callable[[list[T]], list[R]], ranks: Ranks) -> list[R]:
    """`work` over `items` split across ranks: each rank runs `work` once on its round-robin share
    (one result per item, in order), and every rank returns all results in the order of `items`.
    Every rank must call it (it gathers)."""
    mine = list(ranks.share(len(items)))
    results = work([items[i] for i in mine])
    if len(results) != len(mine):
        raise RuntimeError(f"rank {ranks.rank}: {len(results)} results for {len(mine)} work items")
    out: list = [None] * len(items)
    for r, part in enumerate(ranks.all_gather(results)):
        for i, value in zip(Ranks(r, ranks.world).share(len(items)), part, strict=True):
            out[i] = value
    return out
