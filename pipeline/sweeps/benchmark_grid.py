"""One job of the benchmark sweep: a checkpoint's lm-eval suite on the base model and on every
(γ, seed) Gaussian perturbation of it (Figure 2 / Figures 11-22 analogues for perturbations).

The checkpoint is loaded once and each cell is one `simple_evaluate` call over all tasks
(pipeline.evaluate.benchmarks); cells are cached like the perplexity sweep's, so a killed job, an
added γ or changed perplexity settings only compute what they lack. Run by rule evaluate on the
model its other evaluations share (pipeline/train/checkpoint_eval.py).
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import TYPE_CHECKING

from pipeline.evaluate.benchmark_registry import benchmark_settings
from pipeline.evaluate.benchmarks import configured_rows, eval_configured
from pipeline.models.loading import fingerprint, load_checkpoint
from pipeline.sweeps.cells import cell_fields, evaluate_cells

if TYPE_CHECKING:
    from pipeline.sweeps.cells import Grid, Loaded

log = logging.getLogger(__name__)


def _cell_key(ckpt_fp: str, gamma: float, seed: int, bench_cfg: dict) -> str:
    blob = json.dumps(
        {"ckpt": ckpt_fp, "gamma": gamma, "seed": seed, "benchmarks": bench_cfg}, sort_keys=True
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def summarize(results: dict) -> str:
    """One log fragment: acc of every task of a cell."""
    return " ".join(f"{task}={r['acc']:.3f}" for task, r in results.items())


def benchmark_grid(grid: Grid, bench_cfg: dict, loaded: Loaded | None = None) -> list[dict]:
    """lm-eval accuracies of the unmodified checkpoint and each (γ, seed) perturbation; tidy rows.
    `loaded`: the checkpoint already loaded by the job, else it is loaded here."""
    spec = grid.spec
    model, tokenizer, init_std, std_source = loaded or load_checkpoint(spec, grid.path, grid.device)
    ckpt_fp = fingerprint(spec, grid.path)
    settings = benchmark_settings(bench_cfg)
    common = spec.row_fields(grid.study)
    rows = []
    cells = evaluate_cells(
        model,
        init_std,
        grid.cells(),
        lambda m: eval_configured(m, tokenizer, bench_cfg),
        grid.cache_dir,
        lambda g, s: _cell_key(ckpt_fp, g, s, settings),
        summarize,
        spec.name,
    )
    for gamma, seed, results in cells:
        rows += configured_rows(
            results, bench_cfg, **common, **cell_fields(gamma, seed), extra={"init_std_source": std_source}
        )
    return rows
