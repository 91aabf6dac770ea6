"""Rule curvature_figures: Figure 9 / Figure 10 analogues and sharpness vs tokens (Appendix D)."""

from pathlib import Path

import pandas as pd

from pipeline.analysis.curvature_figures import plot_finetune_lines, plot_gaussian_lines, plot_sharpness
from pipeline.runtime import setup_logging

setup_logging(snakemake.log[0])
lines = pd.read_parquet(snakemake.input.lines)
metrics = pd.read_parquet(snakemake.input.metrics)
out = snakemake.output
formats = [Path(p).suffix[1:] for p in out.sharpness]
plot_gaussian_lines(lines, Path(out.curvature_gaussian[0]).with_suffix(""), formats)
plot_finetune_lines(lines, Path(out.curvature_finetune[0]).with_suffix(""), formats)
plot_sharpness(metrics, snakemake.params.gammas, Path(out.sharpness[0]).with_suffix(""), formats)
