"""Rule linearization_figures: Table 1's analogue, the gap vs tokens, linearized vs real fine-tuning,
the NTK vs the outcome, Algorithm 2's layer test and WiSE-FT fronts
(pipeline/analysis/linearization_figures.py)."""

from pathlib import Path

import pandas as pd

from pipeline.analysis import linearization_figures as lf
from pipeline.runtime import setup_logging

setup_logging(snakemake.log[0])
metrics = pd.read_parquet(snakemake.input.metrics)
tuned = pd.read_parquet(snakemake.input.tuned)
out = snakemake.output
formats = [Path(f).suffix[1:] for f in out.linearization_table1]


def stem(name: str) -> Path:
    return Path(getattr(out, name)[0]).with_suffix("")


lf.plot_table1(metrics, tuned, stem("linearization_table1"), formats)
lf.plot_gap_tokens(metrics, stem("linearization_gap_tokens"), formats)
lf.plot_linearized_vs_real(metrics, stem("linearized_vs_real"), formats)
lf.plot_ntk(metrics, tuned, stem("ntk_outcome"), formats)
lf.plot_layer_selection(metrics, stem("layer_selection"), formats)
lf.plot_wise_ft(metrics, tuned, stem("wise_ft_front"), formats)
