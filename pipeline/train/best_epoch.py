"""Early stopping over epochs: the best epoch so far on ID validation, kept across a kill.

The best weights are a resume state (`best_model`, pipeline/train/resume.py: each rank its shards,
one process the whole model); rank 0 writes the step, loss and history to `best.pt`.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from pipeline.io import atomic_path
from pipeline.ranks import SINGLE, Ranks
from pipeline.train import resume


class BestEpoch:
    """step, loss and history of the best epoch so far; `update` at each epoch end, `restore` after."""

    def __init__(self, state_dir: str | Path, ranks: Ranks = SINGLE):
        self.ranks = ranks
        self.file = Path(state_dir) / "best.pt"
        self.model_dir = Path(state_dir) / "best_model"
        self.best = (
            torch.load(self.file, weights_only=False)
            if self.file.is_file()
            else {"step": 0, "loss": math.inf, "history": []}
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
            if not final:  # the final weights are the model's own: `restore` leaves them
                resume.save_state(self.model_dir, model, None, {"step": step}, self.ranks)
        if not final and self.ranks.main:
            with atomic_path(self.file) as tmp:
                torch.save(self.best, tmp)
        self.ranks.barrier()
        return better

    def restore(self, model: torch.nn.Module, steps_done: int) -> bool:
        """Load the best epoch's weights into `model` unless they are the final ones."""
        if self.step in (0, steps_done):
            return False
        return resume.load_state(self.model_dir, model, None) is not None

    def remove(self) -> None:
        """Delete the files (the run is done)."""
        resume.remove(self.model_dir, self.ranks)
        if self.ranks.main:
            self.file.unlink(missing_ok=True)
