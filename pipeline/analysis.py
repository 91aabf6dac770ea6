"""Analysis of a study's metrics: deltas vs the unmodified checkpoint, progressive
sensitivity, and the inflection point of catastrophic overtraining (Definition 4.2)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

# Columns that identify one modification setting (one line in the figures).
SETTING_KEYS = ["model", "modification", "gamma", "task", "learning_rate", "lambda_reg", "eval_data", "split"]


def deltas(metrics: pd.DataFrame, metric: str = "ppl") -> pd.DataFrame:
    """Each modified row next to its checkpoint's unmodified value.

    delta = value − base; delta_log = ln(value / base) (for ppl this is the change in mean
    NLL, the scale-free measure of sensitivity).
    """
    m = metrics[metrics["metric"] == metric]
    base = m[m["modification"] == "none"][["checkpoint", "eval_data", "split", "value", "diverged"]]
    base = base.rename(columns={"value": "base", "diverged": "base_diverged"})
    mod = m[m["modification"] != "none"].merge(base, on=["checkpoint", "eval_data", "split"], how="left", validate="many_to_one")
    mod["delta"] = mod["value"] - mod["base"]
    with np.errstate(divide="ignore", invalid="ignore"):
        mod["delta_log"] = np.log(mod["value"] / mod["base"])
    mod["metric"] = metric
    return mod


def inflection_point(budgets: np.ndarray, values: np.ndarray) -> float:
    """Definition 4.2: the smallest budget r with L(r) < L(next budget); NaN if none.

    `budgets` must be sorted ascending; a NaN/inf value (diverged) counts as larger than any.
    """
    v = np.where(np.isfinite(values), values, np.inf)
    for i in range(len(v) - 1):
        if v[i] < v[i + 1]:
            return float(budgets[i])
    return math.nan


def _seed_matrix(group: pd.DataFrame, value: str) -> tuple[np.ndarray, np.ndarray]:
    """(budgets, seeds × budgets matrix) of `value` for one setting."""
    wide = group.pivot_table(index="seed", columns="budget", values=value, aggfunc="mean", dropna=False)
    wide = wide.reindex(sorted(wide.columns), axis=1)
    return wide.columns.to_numpy(dtype=float), wide.to_numpy(dtype=float)


def sensitivity_table(d: pd.DataFrame) -> pd.DataFrame:
    """Per setting: Spearman ρ of the seed-mean Δ log-metric vs budget, and whether it rises strictly."""
    out = []
    for key, g in d.groupby(SETTING_KEYS, dropna=False, sort=True):
        budgets, mat = _seed_matrix(g, "delta_log")
        mean = np.nanmean(mat, axis=0)
        rho, p = spearmanr(budgets, mean) if len(budgets) > 2 and np.isfinite(mean).all() else (math.nan, math.nan)
        out.append(
            {
                **dict(zip(SETTING_KEYS, key)),
                "metric": g["metric"].iloc[0],
                "n_budgets": len(budgets),
                "n_seeds": mat.shape[0],
                "spearman_rho": float(rho),
                "p_value": float(p),
                "strictly_increasing": bool(np.all(np.diff(mean) > 0)),
                "delta_log_first": float(mean[0]),
                "delta_log_last": float(mean[-1]),
            }
        )
    return pd.DataFrame(out)


def inflection_table(d: pd.DataFrame, n_bootstrap: int, seed: int, ci: float = 0.95) -> pd.DataFrame:
    """Per setting: inflection budget of the seed-mean modified metric, with a bootstrap over seeds.

    The interval resamples seeds with replacement; `p_no_inflection` is the share of
    resamples whose curve never turns up within the sweep.
    """
    rng = np.random.default_rng(seed)
    out = []
    for key, g in d.groupby(SETTING_KEYS, dropna=False, sort=True):
        budgets, mat = _seed_matrix(g, "value")
        point = inflection_point(budgets, np.nanmean(mat, axis=0))
        n = mat.shape[0]
        boots = np.array([inflection_point(budgets, np.nanmean(mat[rng.integers(0, n, n)], axis=0)) for _ in range(n_bootstrap)])
        found = boots[np.isfinite(boots)]
        lo, hi = (np.quantile(found, [(1 - ci) / 2, 1 - (1 - ci) / 2], method="inverted_cdf") if len(found) else (math.nan, math.nan))
        out.append(
            {
                **dict(zip(SETTING_KEYS, key)),
                "metric": g["metric"].iloc[0],
                "n_seeds": n,
                "inflection_budget": point,
                "ci_low": float(lo),
                "ci_high": float(hi),
                "ci_level": ci,
                "p_no_inflection": float(1 - len(found) / max(len(boots), 1)),
                "min_budget": float(budgets.min()),
                "max_budget": float(budgets.max()),
            }
        )
    return pd.DataFrame(out)
