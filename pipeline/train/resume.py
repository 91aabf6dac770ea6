"""The resume state of a run, in one format for one process and N ranks: the model (and optimizer)
state written with `torch.distributed.checkpoint` into a directory (each rank its shards; one
process the whole state), plus rank 0's `extra` (step, schedule, RNG states, losses, ...).

A state is written beside its place (`<path>.tmp`, in the background during training: `Saver`) and
swapped in once complete, so a kill at any moment leaves either the old or the new one (a kill
mid-swap leaves `<path>.old`, which `load_state` reads).
"""

from __future__ import annotations

import shutil
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

if TYPE_CHECKING:
    from pipeline.ranks import Ranks


def _previous(path: Path) -> Path:
    return path.with_name(path.name + ".old")


def _partial(path: Path) -> Path:
    return path.with_name(path.name + ".tmp")


# DCP warns on every save and load in a process without a process group that it assumes a single
# process: that is what it is here. Filtered for the process (the background writer's thread warns
# too, where a `catch_warnings` around the call does not reach).
warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)


def exists(path: str | Path) -> bool:
    path = Path(path)
    return path.is_dir() or _previous(path).is_dir()


def save_state(
    path: str | Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    extra: dict,
    ranks: Ranks,
) -> None:
    """Write the model (and optimizer) state of every rank and rank 0's `extra` to `path`, now."""
    saver = Saver(ranks, background=False)
    saver.save(path, model, optimizer, extra)


class Saver:
    """Writes a run's resume states, in the background (`dcp.async_save`) unless `background` is off:
    the state is copied to host memory before `save` returns, written to `<path>.tmp` while training
    goes on, and swapped in once complete (`poll`, `wait`), one write in flight at a time. A kill
    before the swap leaves the last complete state at `path`; the next save clears the partial one.

    In a sharded job the writer thread's collectives go through a process group of their own (gloo),
    so they never interleave with the training step's (as torchtitan does), and the ranks agree on
    when a time cadence is due through another (`due`).
    """

    def __init__(self, ranks: Ranks, background: bool = True):
        self.ranks = ranks
        self.background = background
        self.groups = None  # a sharded job's (writer, clock) groups, made where every rank first needs them
        self.pending: tuple[object, Path] | None = None  # (the write's future, its path)
        self.saved_at = time.perf_counter()

    def _group(self, which: int):
        if self.groups is None:
            self.groups = (dist.new_group(backend="gloo"), dist.new_group(backend="gloo"))
        return self.groups[which]

    def due(self, seconds: float | None) -> bool:
        """Whether `seconds` have passed since the last save (or the start) on any rank's clock: every
        rank gets the same answer (in a sharded job a one-number all-reduce on the host, no wait for
        the device); a collective, called by every rank at the same step. None: never."""
        if seconds is None:
            return False
        late = time.perf_counter() - self.saved_at >= seconds
        if not dist.is_initialized():
            return late
        flag = torch.tensor([int(late)])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._group(1))
        return bool(flag[0])

    def save(
        self, path: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, extra: dict
    ) -> None:
        """Write the model (and optimizer) state of every rank and rank 0's `extra` to `path`; a
        collective: every rank calls it at the same step."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        self.wait()
        path = Path(path)
        tmp = _partial(path)
        if self.ranks.main:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            torch.save(extra, tmp / "extra.pt")
        self.ranks.barrier()
        model_sd, optim_sd = get_state_dict(model, optimizer if optimizer is not None else [])
        state, single = {"model": model_sd, "optim": optim_sd}, not dist.is_initialized()
        self.saved_at = time.perf_counter()
        if self.background:
            group = None if single else self._group(0)
            future = dcp.async_save(state, checkpoint_id=tmp, process_group=group, no_dist=single)
            self.pending = (future, path)
            return
        dcp.save(state, checkpoint_id=tmp, no_dist=single)
        self._swap_in(path)
        self.ranks.barrier()

    def poll(self) -> None:
        """Swap in the state being written if its write is complete (a host check: no wait)."""
        if self.pending is not None and self.pending[0].done():
            self.wait()

    def wait(self) -> None:
        """Wait for the state being written and swap it in."""
        if self.pending is None:
            return
        future, path = self.pending
        self.pending = None
        future.result()
        self._swap_in(path)

    def _swap_in(self, path: Path) -> None:
        """Replace the state at `path` by the complete one beside it. Rank 0's write completes after
        every rank's (DCP's coordinator writes the metadata last), so no other rank is waited for."""
        if self.ranks.main:
            old = _previous(path)
            shutil.rmtree(old, ignore_errors=True)
            if path.exists():
                path.rename(old)
            _partial(path).rename(path)
            shutil.rmtree(old, ignore_errors=True)


def load_state(
    path: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None
) -> dict | None:
    """Restore what `save_state` wrote into `model` (and `optimizer`) in place; its `extra`, or None
    when there is no state at `path`."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    path = Path(path)
    if not exists(path):
        return None
    if not path.is_dir():
        path = _previous(path)
    optimizers = optimizer if optimizer is not None else []
    model_sd, optim_sd = get_state_dict(model, optimizers)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=path, no_dist=not dist.is_initialized())
    set_state_dict(model, optimizers, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return torch.load(path / "extra.pt", weights_only=False)


def remove(path: str | Path, ranks: Ranks) -> None:
    """Delete the state (the run is done)."""
    path = Path(path)
    ranks.barrier()
    if ranks.main:
        for p in (path, _previous(path), _partial(path)):
            shutil.rmtree(p, ignore_errors=True)
