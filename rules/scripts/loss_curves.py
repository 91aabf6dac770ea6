"""Rule loss_curves: training loss of every pre-training run."""

import json
from pathlib import Path

import pandas as pd

from pipeline.analysis.sweep_figures import plot_loss_curves
from pipeline.runtime import setup_logging

setup_logging(snakemake.log[0])
curves = []
for d in snakemake.input:
    summary = json.loads(Path(d, "summary.json").read_text())
    c = pd.read_parquet(Path(d, "loss_curve.parquet"))
    curves.append(c.assign(budget=summary["budget"], model=summary["preset"]))
formats = [Path(p).suffix[1:] for p in snakemake.output]
plot_loss_curves(pd.concat(curves, ignore_index=True), Path(snakemake.output[0]).with_suffix(""), formats)
