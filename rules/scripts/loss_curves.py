"""Rule loss_curves: every pre-training run's loss curve and record (seed, budget, epochs, ...), and
the pre-training figure."""

import json
from pathlib import Path

import pandas as pd

from pipeline.analysis.sweep_figures import plot_loss_curves
from pipeline.fields import field_named
from pipeline.io import write_parquet
from pipeline.runtime import setup_logging
from pipeline.train.config import PretrainConfig

setup_logging(snakemake.log[0])
curves, runs = [], []
for d in snakemake.input:
    s = json.loads(Path(d, "summary.json").read_text())
    run = {"model": s["preset"], "pretrain_seed": s["seed"], "budget": s["budget"]}
    kept = ("tokens_trained", "steps", "epochs", "final_loss", "diverged", "vocab_size", "decay_start_step")
    # how it was trained; a run from before these were recorded: their defaults (PretrainConfig)
    how = {k: s.get(k, field_named(PretrainConfig, k).default) for k in ("schedule", "parameterization")}
    runs.append({**run, **{k: s.get(k) for k in kept}, **how})
    curves.append(pd.read_parquet(Path(d, "loss_curve.parquet")).assign(**run))
runs = pd.DataFrame(runs).sort_values(["model", "pretrain_seed", "budget"], ignore_index=True)
write_parquet(snakemake.output.runs, runs)
out = snakemake.output.pretrain_loss
plot_loss_curves(
    pd.concat(curves, ignore_index=True),
    runs,
    Path(out[0]).with_suffix(""),
    [Path(p).suffix[1:] for p in out],
)
