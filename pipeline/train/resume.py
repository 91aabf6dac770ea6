"""The resume state of a run, in one format for one process and N ranks: the model (and optimizer)
state written with `torch.distributed.checkpoint` into a directory (each rank its shards; one
process the whole state), plus rank 0's `extra` (step, schedule, RNG states, losses, ...).

A state is written beside its place and swapped in, so a kill at any moment leaves either the old
or the new one (a kill mid-swap leaves `<path>.old`, which `load_state` reads).
"""

from __future__ import annotations

import shutil
import warnings
from contextlib import contextmanager
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


@contextmanager
def _one_process_quiet():
    """DCP warns on every save and load in a process without a process group that it assumes a
    single process: that is what it is here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
        yield


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
    """Write the model (and optimizer) state of every rank and rank 0's `extra` to `path`."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    path = Path(path)
    tmp = _partial(path)
    if ranks.main:
        shutil.rmtree(tmp, ignore_errors=True)
    ranks.barrier()
    model_sd, optim_sd = get_state_dict(model, optimizer if optimizer is not None else [])
    with _one_process_quiet():
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=tmp, no_dist=not dist.is_initialized())
    if ranks.main:
        torch.save(extra, tmp / "extra.pt")
        old = _previous(path)
        shutil.rmtree(old, ignore_errors=True)
        if path.exists():
            path.rename(old)
        tmp.rename(path)
        shutil.rmtree(old, ignore_errors=True)
    ranks.barrier()


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
    with _one_process_quiet():
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
