"""Early stopping over epochs: the best epoch so far on ID validation, kept across a kill.

One process keeps the best weights in host memory and, with the history, in `best.pt`. A
sharded run (pipeline.train.distributed) writes them as a torch.distributed.checkpoint directory
`best_model.dcp` (each rank its shards) and rank 0 writes `best.pt` without weights.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from pipeline.io import atomic_path
from pipeline.train.distributed import SINGLE, Ranks, barrier, load_sharded, remove_sharded, save_sharded


class BestEpoch:
    """step, loss and history of the best epoch so far; `update` at each epoch end, `restore` after."""

    def __init__(self, state_dir: str | Path, ranks: Ranks = SINGLE):
        self.ranks = ranks
        self.file = Path(state_dir) / "best.pt"
        self.model_dir = Path(state_dir) / "best_model.dcp"
        self.best = (
            torch.load(self.file, weights_only=False)
            if self.file.is_file()
            else {"step": 0, "loss": math.inf, "history": [], "state": None}
        )

    @property
    def step(self) -> int:
        return self.best["step"]

    @property
    def loss(self) -> float:
        return self.best["loss"]

    @property
    def history(self) -> list[dict]:
        return self.best["history"]

    def update(self, model: torch.nn.Module, record: dict, loss: float, final: bool) -> bool:
        """Record an epoch's validation (`record` has its step); keep the weights when `loss` is
        the best so far. `final`: the run's last epoch (nothing left to resume: not written)."""
        step = record["step"]
        self.best["history"] = [h for h in self.history if h["step"] != step]  # a resumed run re-evaluates
        self.history.append(record)
        better = math.isfinite(loss) and loss < self.loss
        if better:
            self.best.update(step=step, loss=loss)
            if self.ranks.sharded:
                save_sharded(self.model_dir, model, None, {"step": step}, self.ranks)
            else:
                self.best["state"] = {
                    k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()
                }
        if not final and self.ranks.main:
            with atomic_path(self.file) as tmp:
                torch.save(self.best, tmp)
        barrier(self.ranks)
        return better

    def restore(self, model: torch.nn.Module, steps_done: int) -> bool:
        """Load the best epoch's weights into `model` unless they are the final ones."""
        if self.step in (0, steps_done):
            return False
        if self.ranks.sharded:
            load_sharded(self.model_dir, model, None)
        elif self.best["state"] is not None:
            model.load_state_dict(self.best["state"])
        else:
            return False
        return True

    def remove(self) -> None:
        """Delete the files (the run is done)."""
        if self.ranks.sharded:
            remove_sharded(self.model_dir, self.ranks)
        if self.ranks.main:
            self.file.unlink(missing_ok=True)
