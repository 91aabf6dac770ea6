"""Rule figures: progressive sensitivity (Figure 3 analogue) and inflection point vs gamma."""

from pathlib import Path

import pandas as pd

from pipeline.analysis.sweep_figures import plot_inflection, plot_progressive_sensitivity
from pipeline.runtime import setup_logging

setup_logging(snakemake.log[0])
metrics = pd.read_parquet(snakemake.input.metrics)
base = metrics[
    (metrics["modification"] == "none") & (metrics["metric"] == "ppl") & (metrics["eval_data"] == "pretrain")
]
d = pd.read_parquet(snakemake.input.deltas)
infl = pd.read_parquet(snakemake.input.inflection)
infl = infl[(infl["modification"] == "gaussian") & (infl["eval_data"] == "pretrain")]
formats = [Path(p).suffix[1:] for p in snakemake.output.progressive_sensitivity]
plot_progressive_sensitivity(
    d[d["modification"] == "gaussian"],
    base,
    infl,
    Path(snakemake.output.progressive_sensitivity[0]).with_suffix(""),
    formats,
    pd.read_parquet(snakemake.input.reference[0]) if snakemake.input.reference else None,
)
plot_inflection(infl, Path(snakemake.output.inflection_point[0]).with_suffix(""), formats)
