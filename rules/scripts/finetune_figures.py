"""Rule finetune_figures: fixed-LR (Figures 4/5), tuned-LR (Figures 6/34) and distance (Figure 8) views."""

from pathlib import Path

import pandas as pd

from pipeline.analysis.findings import figure7_scenarios
from pipeline.analysis.finetune_figures import plot_distance, plot_fixed_lr, plot_tuned
from pipeline.analysis.study_tables import StudyTables
from pipeline.runtime import setup_logging

setup_logging(snakemake.log[0])
metrics = pd.read_parquet(snakemake.input.metrics)
base = metrics[(metrics["modification"] == "none") & (metrics["metric"] == "ppl")]
d = pd.read_parquet(snakemake.input.deltas)
infl = pd.read_parquet(snakemake.input.inflection)
out = snakemake.output
formats = [Path(p).suffix[1:] for p in out.finetune_fixed_lr]
reference = pd.read_parquet(snakemake.input.reference[0]) if snakemake.input.reference else None
plot_fixed_lr(
    d,
    base,
    infl,
    Path(out.finetune_fixed_lr[0]).with_suffix(""),
    formats,
    snakemake.params.max_pretrain_ppl,
    reference,
)
plot_tuned(
    pd.read_parquet(snakemake.input.tuned),
    pd.read_parquet(snakemake.input.optimal_lr),
    Path(out.finetune_tuned[0]).with_suffix(""),
    formats,
    reference,
    figure7_scenarios(StudyTables(Path(snakemake.input.metrics).parent, snakemake.config["study"])),
)
plot_distance(metrics, Path(out.finetune_distance[0]).with_suffix(""), formats)
