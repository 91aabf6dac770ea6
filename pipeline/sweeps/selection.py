"""The score by which a learning rate is tuned, per fine-tuning run: the analysis's tuned view and
the adaptive search's rounds choose by the same numbers. The metrics a selection can use (the
`Selection` records) are declared in pipeline/sweeps/lr_search.py, which the workflow reads at
parse time; this module is job-time (pandas)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pipeline.sweeps.lr_search import SELECTIONS, Selection

if TYPE_CHECKING:
    import pandas as pd

TUNED_KEYS = ["model", "task", "modification", "lambda_reg", "checkpoint", "pretrain_seed", "budget"]


def selection_scores(sft: pd.DataFrame, select: Selection = SELECTIONS["ppl"]) -> pd.DataFrame:
    """Per fine-tuning run (TUNED_KEYS, learning_rate, seed): the score a tuned learning rate
    minimises, the `select` metric (negated when it is maximised); inf for a diverged run."""
    eval_data = sft["task"] if select.eval_data is None else select.eval_data
    sel = sft[
        (sft["eval_data"] == eval_data) & (sft["split"] == select.split) & (sft["metric"] == select.metric)
    ]
    bad = sel["diverged"].astype(bool) | ~np.isfinite(sel["value"].astype(float))
    value = -sel["value"].astype(float) if select.maximize else sel["value"].astype(float)
    return sel.assign(score=value.where(~bad, np.inf))[TUNED_KEYS + ["learning_rate", "seed", "score"]]
