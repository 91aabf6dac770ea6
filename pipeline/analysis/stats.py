"""Analysis of a study's metrics: deltas vs the unmodified checkpoint, progressive
sensitivity, and the inflection point of catastrophic overtraining (Definition 4.2)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from pipeline.analysis.inflection import u_shape
from pipeline.analysis.seeds import cube_mean, run_means, seed_cube, seeds_covered
from pipeline.sweeps.lr_search import SELECTIONS, Selection
from pipeline.sweeps.selection import TUNED_KEYS, selection_scores

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
    mod = m[m["modification"] != "none"].merge(
        base, on=["checkpoint", "eval_data", "split"], how="left", validate="many_to_one"
    )
    mod["delta"] = mod["value"] - mod["base"]
    with np.errstate(divide="ignore", invalid="ignore"):
        mod["delta_log"] = np.log(mod["value"] / mod["base"])
    mod["metric"] = metric
    return mod


def finetuned(metrics: pd.DataFrame) -> pd.DataFrame:
    """The rows of fine-tuned models, of every fine-tuning method (`modification` is the method's
    name; the unmodified and the Gaussian-perturbed models are not fine-tuned)."""
    return metrics[~metrics["modification"].isin(("none", "gaussian"))]


def fixed_rate_runs(metrics: pd.DataFrame) -> pd.DataFrame:
    """The rows fixed-learning-rate curves over tokens are drawn from: every row except a
    fine-tuning seed that did not run at every budget of its (model, task, rate, λ). With
    `seeds_at: tuned` or a search the other seeds ran only where their rate was the tuned one;
    mixing them in would change the seed count along a curve."""
    sft = finetuned(metrics)
    keys = ["model", "task", "modification", "learning_rate", "lambda_reg"]
    budgets = sft.groupby(keys, dropna=False)["budget"].transform("nunique")
    seed_budgets = sft.groupby(keys + ["seed"], dropna=False)["budget"].transform("nunique")
    return metrics.drop(sft.index[seed_budgets < budgets])


def inflection_point(budgets: np.ndarray, values: np.ndarray) -> float:
    """Definition 4.2: the smallest budget r with L(r) < L(next budget); NaN if none.

    `budgets` must be sorted ascending; a NaN/inf value (diverged) counts as larger than any.
    """
    v = np.where(np.isfinite(values), values, np.inf)
    for i in range(len(v) - 1):
        if v[i] < v[i + 1]:
            return float(budgets[i])
    return math.nan


def sensitivity_table(d: pd.DataFrame) -> pd.DataFrame:
    """Per setting: Spearman ρ of the seed-mean Δ log-metric vs budget, and whether it rises strictly
    (the mean over pre-training seeds of the mean over the seeds within each: analysis/seeds.py)."""
    out = []
    for key, g in d.groupby(SETTING_KEYS, dropna=False, sort=True):
        budgets, cube, outers, inners = seed_cube(g, "delta_log")
        mean = cube_mean(cube)
        rho, p = (
            spearmanr(budgets, mean) if len(budgets) > 2 and np.isfinite(mean).all() else (math.nan, math.nan)
        )
        out.append(
            {
                **dict(zip(SETTING_KEYS, key)),
                "metric": g["metric"].iloc[0],
                "n_budgets": len(budgets),
                "n_pretrain_seeds": len(outers),
                "n_seeds": len(inners),
                "spearman_rho": float(rho),
                "p_value": float(p),
                "strictly_increasing": bool(np.all(np.diff(mean) > 0)),
                "delta_log_first": float(mean[0]),
                "delta_log_last": float(mean[-1]),
            }
        )
    return pd.DataFrame(out)


def inflection_table(d: pd.DataFrame, ci: float = 0.95) -> pd.DataFrame:
    """Per setting: Definition 4.2's inflection budget of the seed-mean modified metric (a point
    estimate on the grid, not a test), and beside it the U-shape detector on log(metric) against log
    tokens over the pre-training runs (pipeline/analysis/inflection.py): P(U) and the location of the
    minimum with its `ci` interval, in tokens. `seeds` says what the runs average.
    """
    out = []
    for key, g in d.groupby(SETTING_KEYS, dropna=False, sort=True):
        budgets, cube, outers, inners = seed_cube(g, "value")
        point = inflection_point(budgets, cube_mean(cube))
        units = np.log(run_means(cube))  # the pre-training run is the unit: one value per run
        fit = u_shape(
            np.repeat(budgets[None, :], len(units), axis=0).ravel(),
            units.ravel(),
            np.repeat(np.arange(len(units))[:, None], len(budgets), axis=1).ravel(),
            level=ci,
        )
        inner_kind = "perturbation" if (g["modification"] == "gaussian").all() else "fine-tuning"
        out.append(
            {
                **dict(zip(SETTING_KEYS, key)),
                "metric": g["metric"].iloc[0],
                "n_pretrain_seeds": len(outers),
                "n_seeds": len(inners),
                "seeds": seeds_covered(len(outers), len(inners), inner_kind),
                "inflection_budget": point,
                "ci_level": ci,
                "min_budget": float(budgets.min()),
                "max_budget": float(budgets.max()),
                "p_u": fit.p_u,
                "u_min_tokens": fit.min_tokens,
                "u_min_low": fit.min_low,
                "u_min_high": fit.min_high,
                "u_bounded": fit.bounded,
                "u_units": "pretrain_seed",
                "u_reason": fit.reason,
            }
        )
    return pd.DataFrame(out)


# --- fine-tuning: the tuned-learning-rate view (Section 3.4.2, Figures 6, 7 and 34) ---------------


def tuned_table(metrics: pd.DataFrame, select: Selection = SELECTIONS["ppl"]) -> pd.DataFrame:
    """Per (model, task, λ, checkpoint): the learning rate with the best seed-mean `select` metric
    (default: in-domain validation ppl), and every metric of the fine-tuned models at that rate.

    The mean is over the seeds every learning rate of the setting has: all seeds of a grid, the
    searching seed of an adaptive search (whose other seeds ran at its choice only). A learning
    rate with any diverged seed is never selected. Rows: one per (setting, eval_data, split,
    metric) with the seed mean, sd and count, the unmodified value, and whether the chosen rate is
    the lowest or highest evaluated (`at_edge`: the optimum may lie outside the grid).
    """
    sft = finetuned(metrics)
    if sft.empty:
        return pd.DataFrame(
            columns=TUNED_KEYS
            + ["learning_rate", "at_edge", "eval_data", "split", "metric", "mean", "sd", "n_seeds", "base"]
        )
    runs = selection_scores(sft, select)
    lrs_per_setting = runs.groupby(TUNED_KEYS, dropna=False)["learning_rate"].transform("nunique")
    lrs_per_seed = runs.groupby(TUNED_KEYS + ["seed"], dropna=False)["learning_rate"].transform("nunique")
    score = (
        runs[lrs_per_seed == lrs_per_setting]
        .groupby(TUNED_KEYS + ["learning_rate"], dropna=False)
        .agg(score=("score", "mean"))
        .reset_index()
    )
    span = score.groupby(TUNED_KEYS, dropna=False)["learning_rate"]
    score["at_edge"] = (score["learning_rate"] == span.transform("min")) | (
        score["learning_rate"] == span.transform("max")
    )
    ranked = score.sort_values(["score", "learning_rate"])
    best = ranked.groupby(TUNED_KEYS, dropna=False, sort=True).head(1)
    best = best[np.isfinite(best["score"])][TUNED_KEYS + ["learning_rate", "at_edge"]]
    chosen = sft.merge(best, on=TUNED_KEYS + ["learning_rate"], how="inner")
    out = (
        chosen.groupby(
            TUNED_KEYS + ["learning_rate", "at_edge", "eval_data", "split", "metric"], dropna=False
        )
        .agg(mean=("value", "mean"), sd=("value", "std"), n_seeds=("seed", "nunique"))
        .reset_index()
    )
    base = metrics[metrics["modification"] == "none"][
        ["checkpoint", "eval_data", "split", "metric", "value"]
    ].rename(columns={"value": "base"})
    return out.merge(
        base.drop_duplicates(["checkpoint", "eval_data", "split", "metric"]),
        on=["checkpoint", "eval_data", "split", "metric"],
        how="left",
    )


def _log_slope(x: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of log10 y on log10 x (decades of y per decade of x)."""
    if len(x) < 2:
        return math.nan
    return float(np.polyfit(np.log10(x), np.log10(y), 1)[0])


# Figure 7: how the optimal learning rate moves with pre-training tokens, and what that predicts.
SCENARIOS = {
    "constant": "constant optimal LR: ID and pre-training metrics both degrade",
    "slowly decreasing": "slowly decreasing optimal LR: only the pre-training metric degrades",
    "quickly decreasing": "quickly decreasing optimal LR: neither degrades",
    "increasing": "increasing optimal LR (not among Figure 7's scenarios)",
}


SCENARIO_CLAIMS = {"lr": "optimal-lr-falls", "pretrain": "tuned-overtraining", "in_domain": "tuned-in-domain"}


def figure7_scenario(verdicts: dict[str, str]) -> str:
    """A task's Figure 7 scenario from the registered claims' verdicts for it (keys of
    SCENARIO_CLAIMS: the optimal LR falls; the pre-training ppl at the tuned rate turns up; the
    in-domain ppl keeps improving), worded no stronger than they are."""
    lr, pre, ind = (verdicts.get(k, "not computed") for k in SCENARIO_CLAIMS)
    if lr == "supported" and ind == "supported" and pre == "supported":
        return "slowly decreasing optimal LR: only the pre-training ppl turns up (claims supported)"
    if lr == "supported" and ind == "supported" and pre in ("contradicted", "not reached within the budgets"):
        return f"decreasing optimal LR, no pre-training upturn ({pre}): quickly decreasing so far"
    return f"scenario not established (LR falls: {lr}; pre-training upturn: {pre}; in-domain improves: {ind})"


def optimal_lr_table(tuned: pd.DataFrame, flat_slope: float = 0.1, id_split: str = "test") -> pd.DataFrame:
    """Per (model, task, fine-tuning method, λ, pre-training seed): the optimal-LR trajectory over
    budgets and its Figure 7 scenario.

    lr_slope: decades of optimal LR per decade of tokens; |slope| < flat_slope is constant.
    id_degrades / pretrain_degrades: the tuned in-domain `id_split` ppl / pre-training ppl
    curve has an inflection point (Definition 4.2) within the sweep. A decreasing LR is
    'slowly' decreasing when the pre-training ppl still degrades, 'quickly' when it does not.
    """
    out = []
    keys = ["model", "task", "modification", "lambda_reg", "pretrain_seed"]  # each pre-training run's
    for key, g in tuned.groupby(keys, dropna=False, sort=True):
        lr = g.drop_duplicates("budget").sort_values("budget")
        budgets, lrs = lr["budget"].to_numpy(float), lr["learning_rate"].to_numpy(float)
        slope = _log_slope(budgets, lrs)

        def curve(eval_data: str, split: str) -> np.ndarray:
            rows = g[(g["eval_data"] == eval_data) & (g["split"] == split) & (g["metric"] == "ppl")]
            c = rows.set_index("budget")["mean"]
            return c.reindex(budgets).to_numpy(float)

        pre_curve = (
            curve("pretrain", g.loc[g["eval_data"] == "pretrain", "split"].iloc[0])
            if (g["eval_data"] == "pretrain").any()
            else np.full(len(budgets), np.nan)
        )
        id_curve = curve(key[1], id_split)
        pre_infl, id_infl = inflection_point(budgets, pre_curve), inflection_point(budgets, id_curve)
        trend = (
            "constant"
            if not np.isfinite(slope) or abs(slope) < flat_slope
            else ("decreasing" if slope < 0 else "increasing")
        )
        if trend == "decreasing":
            scenario = "slowly decreasing" if np.isfinite(pre_infl) else "quickly decreasing"
        else:
            scenario = trend
        expected = {
            "constant": (True, True),
            "slowly decreasing": (False, True),
            "quickly decreasing": (False, False),
        }.get(scenario)
        out.append(
            {
                **dict(zip(keys, key)),
                "budgets": budgets.tolist(),
                "optimal_lrs": lrs.tolist(),
                # the optimum sits on the grid's (or search's) edge: it may lie outside
                "lr_at_edge": lr["at_edge"].astype(bool).tolist(),
                "lr_slope": slope,
                "lr_trend": trend,
                "pretrain_inflection": pre_infl,
                "id_inflection": id_infl,
                "pretrain_degrades": bool(np.isfinite(pre_infl)),
                "id_degrades": bool(np.isfinite(id_infl)),
                "scenario": scenario,
                "scenario_description": SCENARIOS[scenario],
                "matches_figure7": None
                if expected is None
                else (bool(np.isfinite(id_infl)), bool(np.isfinite(pre_infl))) == expected,
            }
        )
    return pd.DataFrame(out)
