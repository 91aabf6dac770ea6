"""A model's judged metrics against the reference, from its annotations (fractions, not %).

- win_rate, win_rate_se: alpaca-eval's `get_winrate` (mean of preference − 1, ties ½; the standard
  error of that mean) over the judged pairs; unparsable answers are left out and counted.
- lc_win_rate: the length-controlled win rate, AlpacaEval 2's GLM (alpaca-eval's design-matrix and
  LogisticRegressionCV helpers): preference ~ tanh(standardised length difference), predicted at no
  length difference. Offline the package's `length_controlled_minimal` formula is used: the default
  `length_controlled_v1` also needs instruction difficulties that exist only for AlpacaEval's own
  805 instructions (a hub download); its cross-validation needs a few varied preferences, so on a
  handful of pairs or a one-sided judge it is missing (null, the reason logged), not invented.
- mean_length: the mean length of the model's responses in characters (AlpacaEval's avg_length).
"""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pandas as pd

log = logging.getLogger(__name__)

METRICS = ("win_rate", "win_rate_se", "lc_win_rate", "mean_length", "n_judged", "n_unparsable")
LC_FORMULA = "length_controlled_minimal"
LC_MIN_PAIRS = 10  # below this the GLM's 5-fold cross-validation has too little to fit


def length_controlled(judged: pd.DataFrame) -> float | None:
    """Mean predicted win rate at zero length difference; None where the GLM cannot be fitted."""
    from alpaca_eval.metrics.glm_winrate import GLM_INFO, fit_LogisticRegressionCV, make_dmatrix_for_model

    if len(judged) < LC_MIN_PAIRS:
        log.info(
            "length-controlled win rate: %d judged pairs, fewer than %d: not fitted",
            len(judged),
            LC_MIN_PAIRS,
        )
        return None
    delta = judged["output_1"].str.len() - judged["output_2"].str.len()
    y = judged["preference"].astype(float) - 1
    if delta.std() == 0 or y.nunique() < 2:
        log.info("length-controlled win rate: no variation in length difference or preference: not fitted")
        return None
    info = GLM_INFO[LC_FORMULA]
    train = pd.DataFrame(
        {
            "preference": y.to_numpy(),
            "std_delta_len": (delta / delta.std()).to_numpy(),
            "not_gamed_baseline": True,
        }
    )
    test = train[["not_gamed_baseline"]].assign(std_delta_len=0.0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            xy, x_test = make_dmatrix_for_model(train, test, formula=info["formula"])
            model = fit_LogisticRegressionCV(xy, "preference", is_ytrue_proba=True, **info["kwargs"])
    except ValueError as err:
        log.info("length-controlled win rate: the GLM could not be fitted (%s)", err)
        return None
    return float(np.mean(model.predict_proba(x_test)[:, 1]))


def summarize(annotations: pd.DataFrame, is_reference: bool, lc: bool = True) -> dict[str, float | None]:
    """The METRICS of one model's annotations (its pairs against the reference)."""
    from alpaca_eval.metrics import get_winrate

    judged = annotations[annotations["preference"].notna()]
    n_unparsable = int((annotations["status"] == "unparsable").sum())
    if judged.empty:
        win, se = None, None
    else:
        m = get_winrate(judged[["preference"]])
        win, se = float(m["win_rate"]) / 100, float(m["standard_error"]) / 100
    lc_win = (0.5 if is_reference else length_controlled(judged)) if lc else None
    return {
        "win_rate": win,
        "win_rate_se": se,
        "lc_win_rate": lc_win,
        "mean_length": float(annotations["output_2"].str.len().mean()),
        "n_judged": float(len(judged)),
        "n_unparsable": float(n_unparsable),
    }
