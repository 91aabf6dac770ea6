"""Rule benchmark_figures: benchmark accuracy vs pre-training tokens (Figure 2 / Figures 11-22)."""

from pathlib import Path

import pandas as pd

from pipeline.analysis.benchmark_figures import plot_benchmarks
from pipeline.runtime import setup_logging

setup_logging(snakemake.log[0])
tuned = pd.read_parquet(snakemake.input.tuned) if snakemake.input.get("tuned") else None
out = list(snakemake.output)
plot_benchmarks(
    pd.read_parquet(snakemake.input.metrics),
    tuned,
    Path(out[0]).with_suffix(""),
    [Path(p).suffix[1:] for p in out],
)
