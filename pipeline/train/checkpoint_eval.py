"""Every evaluation of one checkpoint on one loaded model (rule evaluate): the held-out perplexity
of its base model and Gaussian grid, the lm-eval suite on the same grid, and the base model's
in-domain metrics on each fine-tuning task. Loading a hub checkpoint costs minutes on a GPU, and a
job's start-up (torch, transformers, lm-eval) seconds on a CPU, so they are paid once per checkpoint
and device rather than once per evaluation (as OpenEuroLLM's oellm-eval does, its PR #110).

Each evaluation keeps its own table and its own cache: a config change that touches one of them
reruns the job, and the others' cells come from their caches (the base in-domain metrics, a few
seconds, are recomputed). The perturbations are undone exactly after each cell (sweeps/noise.py),
so every evaluation sees the checkpoint's own weights.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.models.loading import load_checkpoint
from pipeline.sweeps.benchmark_grid import benchmark_grid
from pipeline.sweeps.perturb_grid import perturbation_grid
from pipeline.train.finetune import task_base_rows

if TYPE_CHECKING:
    from pipeline.sweeps.cells import Grid
    from pipeline.train.config import FinetuneConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Evaluations:
    """What one checkpoint is evaluated on: the corpus's held-out split (`eval:` settings, always);
    the lm-eval suite (`bench`: eval.benchmarks with its paths, None when off; its cells cached in
    `bench_cache`); the in-domain metrics of each text task (name -> task table) under `task_cfg`."""

    corpus: str | Path
    eval_cfg: dict
    bench: dict | None = None
    bench_cache: str | Path | None = None
    tasks: dict[str, str | Path] = field(default_factory=dict)
    task_cfg: FinetuneConfig | None = None


@dataclass
class CheckpointRows:
    """Tidy rows of each evaluation, one table each: perplexity grid, lm-eval grid (None when off),
    base in-domain metrics by task."""

    perturb: list[dict]
    lm_eval: list[dict] | None
    base: dict[str, list[dict]]


def evaluate_checkpoint(grid: Grid, evals: Evaluations) -> CheckpointRows:
    """Load `grid`'s checkpoint once and run every evaluation of `evals` on it (the perplexity grid
    caches its cells in grid.cache_dir)."""
    if evals.tasks and evals.task_cfg is None:
        raise ValueError("Evaluations.tasks needs task_cfg (the base evaluation's fine-tuning settings)")
    if evals.bench is not None and evals.bench_cache is None:
        raise ValueError("Evaluations.bench needs bench_cache (where its cells are kept)")
    spec = grid.spec
    loaded = load_checkpoint(spec, grid.path, grid.device)
    names = ["perplexity"] + (["lm-eval"] if evals.bench is not None else []) + list(evals.tasks)
    log.info("checkpoint %s loaded once for %d evaluations: %s", spec.name, len(names), ", ".join(names))
    perturb = perturbation_grid(grid, evals.corpus, evals.eval_cfg, loaded)
    base = {
        task: task_base_rows(
            spec, grid.path, table, task, evals.task_cfg, grid.study, grid.device, loaded=loaded
        )
        for task, table in evals.tasks.items()
    }
    lm_eval = None
    if evals.bench is not None:  # last: lm-eval wraps the model and tokenizer (HFLM)
        lm_eval = benchmark_grid(dataclasses.replace(grid, cache_dir=evals.bench_cache), evals.bench, loaded)
    return CheckpointRows(perturb=perturb, lm_eval=lm_eval, base=base)
