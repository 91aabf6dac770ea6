"""Rule analysis: deltas vs base, progressive sensitivity and inflection points."""

import logging

import pandas as pd

from pipeline.analysis.stats import deltas, fixed_rate_runs, inflection_table, sensitivity_table
from pipeline.io import write_parquet
from pipeline.runtime import setup_logging

setup_logging(snakemake.log[0])
metrics = pd.read_parquet(snakemake.input[0])
# pre-training and in-domain perplexity of every modification (Gaussian γ, fine-tuning LR × λ), each
# curve over tokens from the seeds that ran at all its budgets
lm = fixed_rate_runs(metrics[(metrics["source"] != "theory") & (metrics["eval_data"] != "weights")])
d = deltas(lm, "ppl")
sens = sensitivity_table(d)
infl = inflection_table(d, ci=snakemake.params.ci)
write_parquet(snakemake.output.deltas, d)
write_parquet(snakemake.output.sensitivity, sens)
write_parquet(snakemake.output.inflection, infl)
logging.info("sensitivity:\n%s", sens.to_string())
logging.info("inflection:\n%s", infl.to_string())
