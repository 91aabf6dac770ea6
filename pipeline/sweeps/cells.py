"""Grid cells of one checkpoint: the base model and each (γ, seed) Gaussian perturbation, evaluated
in place on one loaded model, each cell's result cached on disk so a killed or extended job only
computes the cells it lacks. Used by the perplexity and benchmark grids."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.io import write_json
from pipeline.sweeps.noise import perturbed

if TYPE_CHECKING:
    import torch

    from pipeline.models.checkpoints import CheckpointSpec

log = logging.getLogger(__name__)

# a checkpoint as `load_checkpoint` returns it: (model, tokenizer, init_std, init_std_source); a job
# that runs several evaluations loads it once and hands it to each (pipeline/train/checkpoint_eval.py)
Loaded = tuple["torch.nn.Module", object, dict, str]


@dataclass(frozen=True)
class Grid:
    """One checkpoint's grid: which checkpoint (its directory for a sweep or local one), its γ and
    seeds, the study its rows belong to, where finished cells are kept, the device."""

    spec: CheckpointSpec
    path: str | None
    gammas: list[float]
    seeds: list[int]
    study: str
    cache_dir: str | Path
    device: str = "cpu"

    def cells(self) -> list[tuple[float, int | None]]:
        return grid_cells(self.gammas, self.seeds)


def grid_cells(gammas: list[float], seeds: list[int]) -> list[tuple[float, int | None]]:
    """The unmodified model (γ 0, seed None) first, then every (γ, seed) perturbation."""
    return [(0.0, None)] + [(float(g), int(s)) for g in gammas for s in seeds]


def evaluate_cells(
    model: torch.nn.Module,
    init_std: dict,
    cells: list[tuple[float, int | None]],
    evaluate: Callable[[torch.nn.Module], dict],
    cache_dir: str | Path,
    cache_key: Callable[[float, int], str],
    describe: Callable[[dict], str],
    name: str,
) -> Iterator[tuple[float, int | None, dict]]:
    """(γ, seed, result) of each cell: `evaluate` on the model perturbed in place (restored after),
    or the cell's cached JSON result from an earlier (killed or smaller) run. Logs rate and ETA."""
    cache_dir = Path(cache_dir)
    t0, computed = time.perf_counter(), 0
    for i, (gamma, seed) in enumerate(cells):
        key_file = cache_dir / f"{cache_key(gamma, seed if seed is not None else -1)}.json"
        if key_file.is_file():
            result = json.loads(key_file.read_text())
        else:
            if seed is None:
                result = evaluate(model)
            else:
                with perturbed(model, init_std, gamma, seed):
                    result = evaluate(model)
            write_json(key_file, result)
            computed += 1
        elapsed = time.perf_counter() - t0
        log.info(
            "[%d/%d] %s gamma=%g seed=%s %s | %.2f cells/s, ETA %.0fs",
            i + 1,
            len(cells),
            name,
            gamma,
            seed,
            describe(result),
            (i + 1) / elapsed,
            elapsed / (i + 1) * (len(cells) - i - 1),
        )
        yield gamma, seed, result
    log.info("checkpoint %s: %d cells computed, %d from cache", name, computed, len(cells) - computed)


def cell_fields(gamma: float, seed: int | None) -> dict:
    """The metric-row columns of a cell: the base model or a Gaussian perturbation."""
    return (
        {"modification": "none"}
        if seed is None
        else {"modification": "gaussian", "gamma": gamma, "seed": seed}
    )
