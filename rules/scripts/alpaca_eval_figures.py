"""Rule alpaca_eval_figures: win rate vs pre-training tokens (Figure 2 left / Figure 11 analogue)."""

from pathlib import Path

import pandas as pd

from pipeline.analysis.alpaca_eval_figures import plot_win_rate
from pipeline.runtime import setup_logging

setup_logging(snakemake.log[0])
out = snakemake.output.alpaca_eval_win_rate
plot_win_rate(
    pd.read_parquet(snakemake.input.metrics),
    pd.read_parquet(snakemake.input.tuned),
    snakemake.params.reference,
    Path(out[0]).with_suffix(""),
    [Path(p).suffix[1:] for p in out],
)
