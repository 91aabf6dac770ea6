"""Rule finetune_analysis: the tuned-learning-rate view (Figure 6), optimal LR vs tokens and
its Figure 7 scenario (Figure 34); the learning rate is tuned on finetune.select_metric."""

import logging

import pandas as pd

from pipeline.analysis.stats import optimal_lr_table, tuned_table
from pipeline.io import write_parquet
from pipeline.runtime import setup_logging
from pipeline.sweeps.lr_search import SELECTIONS

setup_logging(snakemake.log[0])
metrics = pd.read_parquet(snakemake.input[0])
tuned = tuned_table(metrics, SELECTIONS[snakemake.params.select])  # finetune.select_metric
optimal = optimal_lr_table(tuned)
write_parquet(snakemake.output.tuned, tuned)
write_parquet(snakemake.output.optimal_lr, optimal)
logging.info("optimal learning rates:\n%s", optimal.to_string())
