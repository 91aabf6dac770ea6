"""The statistics a registered claim rests on (pipeline/analysis/claims.py), computed from a study's
rows with the pre-training run as the unit, and the decision rules that turn an interval into a
verdict, stated before the data.

Randomness enters at three levels: the pre-training seed; within a seed, each budget's run (cosine
runs are separate runs; WSD branches share one stable run and so are not); and inner seeds
(perturbation, fine-tuning) nested in a run. Every statistic first averages a run's inner seeds
(they are not independent replicates of the run), then:

- a trend over tokens is each pre-training seed's least-squares slope against log2 tokens, with a
  t-interval over the seeds (df = seeds - 1: the summary-statistics analysis of a random-slope
  model, exact under normal errors whatever the within-seed correlation, so it holds for WSD
  branches too); with one pre-training seed, the slope of the runs with a t-interval from their
  scatter about the line (df = budgets - 2), valid only where the budgets are separate runs;
- a U-shape is the detector of pipeline/analysis/inflection.py on the runs, the seeds as paired
  units: it needs two or more pre-training seeds;
- a paired difference is a t-interval over its units (df = units - 1);
- a rank correlation is Spearman's ρ with a Fisher-z interval (Bonett & Wright 2000's variance).

No percentile bootstrap: over a handful of units its "95%" interval is about the range of the units
(coverage 0.75 with 3). Every not-established verdict comes with the smallest effect its design
detects with 80% power at its own noise (`detectable`). bench/claims_calibration.py simulates
each statistic at the studies' noise structures and prints its coverage and false-supported rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
from scipy.stats import norm, spearmanr
from scipy.stats import t as t_dist

from pipeline.analysis.inflection import UShape, detectable_rise, u_shape
from pipeline.analysis.seeds import run_means, seed_cube
from pipeline.analysis.verdicts import (
    CONTRADICTED,
    LEVEL,
    NOT_COMPUTED,
    NOT_ESTABLISHED,
    NOT_REACHED,
    P_U,
    POWER,
    SUPPORTED,
    interval_verdict,
)

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Estimate:
    """One statistic of one setting: its value, the 95% interval, and what it was computed over."""

    label: str  # the setting, e.g. "γ = 6" or "code, LR 3e-2"
    value: float
    low: float
    high: float
    n: str  # at the run level, e.g. "3 pre-training seeds (the unit) x 7 budgets = 21 runs; ..."
    verdict: str
    note: str = ""  # e.g. the U's minimum and its interval; for not computed, the reason
    detectable: float = math.nan  # the effect the design detects with 80% power, in the estimate's units
    pretraining_variance: bool = False  # the interval covers pre-training variance (stable across machines)


def not_computed(label: str, n: str, reason: str) -> Estimate:
    """A setting whose design gives its statistic no power (or no rows): a verdict of its own."""
    return Estimate(label, math.nan, math.nan, math.nan, n, NOT_COMPUTED, f"not computed: {reason}")


def _inner_name(rows: pd.DataFrame) -> str:
    mods = set(rows["modification"].dropna())
    if mods == {"gaussian"}:
        return "perturbation"
    return "fine-tuning" if mods and "none" not in mods else "evaluation"


def design(cube: np.ndarray, rows: pd.DataFrame) -> str:
    """n at the run level, in words: the unit, the runs, and the inner seeds averaged in each."""
    if not cube.size:
        return "no runs"
    runs = run_means(cube)
    n_runs, (P, K) = int(np.isfinite(runs).sum()), runs.shape
    inner = int(np.max(np.sum(np.isfinite(cube).any(axis=2), axis=1)))
    within = f"; {inner} {_inner_name(rows)} seeds averaged within each run" if inner > 1 else ""
    if P >= 2:
        return f"{P} pre-training seeds (the unit) x {K} budgets = {n_runs} runs{within}"
    return f"1 pre-training seed: {n_runs} runs, one per budget (pre-training variance not covered){within}"


def t_interval(value: float, se: float, df: int) -> tuple[float, float]:
    half = float(t_dist.ppf((1 + LEVEL) / 2, df)) * se
    return value - half, value + half


def detectable(se: float, df: int) -> float:
    """The true effect a two-sided LEVEL t-test with this se and df finds with probability POWER."""
    return (float(t_dist.ppf((1 + LEVEL) / 2, df)) + float(t_dist.ppf(POWER, df))) * se


def _slope(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares slope of y on x and the residual sum of squares."""
    xc = x - x.mean()
    b = float(xc @ (y - y.mean()) / (xc @ xc))
    r = y - y.mean() - b * xc
    return b, float(r @ r)


def run_slope(x: np.ndarray, runs: np.ndarray, min_budgets: int = 3) -> tuple[float, float, int, str]:
    """(slope, se, df, reason) of runs (pre-training seeds x budgets) against x: the mean of each
    seed's slope (over its `min_budgets` or more finite budgets; 2 give a valid two-point slope, the
    t over seeds needing no scatter within one) with its standard error over the seeds; with one
    seed, the slope of its runs with the se from their scatter about the line (3 budgets or more).
    NaN and a reason where the design cannot give one."""
    fits = [_slope(x[ok], r[ok]) for r in runs if (ok := np.isfinite(r)).sum() >= min_budgets]
    if len(runs) >= 2:
        if len(fits) < 2:
            return (
                math.nan,
                math.nan,
                0,
                f"fewer than 2 pre-training seeds with {min_budgets} or more budgets",
            )
        slopes = np.array([b for b, _ in fits])
        return float(slopes.mean()), float(slopes.std(ddof=1) / math.sqrt(len(slopes))), len(slopes) - 1, ""
    ok = np.isfinite(runs[0]) if len(runs) else np.zeros(0, bool)
    if len(fits) < 1 or ok.sum() < 3:
        return math.nan, math.nan, 0, f"{int(ok.sum())} budget(s) with a finite value: a trend needs 3"
    (b, rss), xs = fits[0], x[ok]
    df = int(ok.sum()) - 2
    return b, math.sqrt(rss / df / float(((xs - xs.mean()) ** 2).sum())), df, ""


BRANCHES = (
    "one pre-training seed of WSD branches: its budgets are decays of one stable run, not separate "
    "runs, so their scatter about a line is no run-level interval"
)


def trend(rows: pd.DataFrame, value: str, label: str, sign: int, branches: bool = False) -> Estimate:
    """The change of `value` per doubling of pre-training tokens, the pre-training run as the unit
    (run_slope; module docstring), with its 95% t-interval, verdict for the claimed direction `sign`
    and the slope it detects with 80% power. `branches`: the budgets of a seed are WSD branches of
    one stable run (a t over seeds still holds; one seed's scatter does not)."""
    if rows.empty:
        return not_computed(label, "no runs", "no rows")
    budgets, cube, _, _ = seed_cube(rows, value)
    n = design(cube, rows)
    if len(budgets) < 3:
        return not_computed(label, n, f"{len(budgets)} budget(s): a trend needs at least 3")
    finite = cube[np.isfinite(cube)]
    if finite.size and np.ptp(finite) <= 1e-12 * max(1.0, float(np.abs(finite).max())):
        return not_computed(label, n, "the metric is constant")
    runs = run_means(cube)
    if branches and len(runs) < 2:
        return not_computed(label, n, BRANCHES)
    point, se, df, reason = run_slope(np.log2(budgets), runs)
    if reason:
        return not_computed(label, n, reason)
    if not se > 0:
        return not_computed(label, n, "no variation between units: no interval")
    low, high = t_interval(point, se, df)
    return Estimate(
        label,
        point,
        low,
        high,
        n,
        interval_verdict(low, high, sign),
        detectable=detectable(se, df),
        pretraining_variance=runs.shape[0] >= 2,
    )


def u_runs(
    budgets: np.ndarray,
    runs: np.ndarray,
    level: float = LEVEL,
    curvature_rate: float = 1.0,
    selected_at: float | None = None,
) -> UShape:
    """The U-shape detector on runs (pre-training seeds x budgets, already on the analysed scale), the
    seeds as paired units; `curvature_rate` is the minimum interval's smoothness bound (inflection.py:
    1, registered; other values only for bench/claims_calibration.py's sensitivity check);
    `selected_at`: the minimum's interval given that the test cleared that level (inflection.py)."""
    tokens = np.repeat(np.asarray(budgets, float)[None, :], len(runs), axis=0)
    unit = np.repeat(np.arange(len(runs))[:, None], runs.shape[1], axis=1)
    return u_shape(tokens.ravel(), runs.ravel(), unit.ravel(), level, curvature_rate, selected_at)


def u_fit(rows: pd.DataFrame, value: str) -> tuple[np.ndarray, np.ndarray, str]:
    """(budgets, runs, what they are) for the U-shape detector: log(`value`) of each run (its inner
    seeds averaged), pre-training seeds x budgets."""
    budgets, cube, _, _ = seed_cube(rows, value)
    return budgets, np.log(run_means(cube)), design(cube, rows)


ONE_RUN = (
    "one pre-training seed: a U needs run-level replicates (two or more pre-training seeds); the "
    "inner seeds of a run are not independent runs"
)


def u_verdict(
    budgets: np.ndarray,
    runs: np.ndarray,
    level: float = P_U,
    interval_level: float = LEVEL,
    curvature_rate: float = 1.0,
) -> tuple[UShape, str]:
    """The detector on runs (pre-training seeds x budgets, on the analysed scale) and a U claim's
    verdict by its registered rule: supported when P(U) > `level`; contradicted when the curve
    reliably falls at its largest budgets (the run-level slope over the upper half of the budgets,
    the median budget included, has a 95% interval below 0) and the minimum's interval lies wholly at
    or beyond the largest budget; not reached within the budgets when the upper half's slope is
    negative and the minimum's estimate is at the largest budget, short of that; otherwise not
    established; not computed where the detector is. The minimum's interval is at `interval_level`."""
    budgets = np.asarray(budgets, float)
    fit = u_runs(budgets, runs, interval_level, curvature_rate)
    if not math.isfinite(fit.p_u):
        return fit, NOT_COMPUTED
    if fit.p_u > level:
        return fit, SUPPORTED
    upper = slice((len(budgets) - 1) // 2, len(budgets))
    slope, se, df, reason = run_slope(np.log2(budgets[upper]), runs[:, upper], min_budgets=2)
    top = budgets[-1] * (1 - 1e-9)
    if not reason and se > 0 and t_interval(slope, se, df)[1] < 0 and fit.min_low >= top:
        return fit, CONTRADICTED
    if slope < 0 and fit.min_tokens >= top:
        return fit, NOT_REACHED
    return fit, NOT_ESTABLISHED


def ushape(
    rows: pd.DataFrame, value: str, label: str, level: float = P_U, interval_level: float = LEVEL
) -> Estimate:
    """`u_verdict` on the rows' runs (log `value`), with P(U), the minimum where it clears `level`
    (its interval at `interval_level`) and the rise between two of the upper budgets the design
    finds with 80% power."""
    if rows.empty:
        return not_computed(label, "no runs", "no rows")
    budgets, runs, n = u_fit(rows, value)
    if len(runs) < 2:
        return not_computed(label, n, ONE_RUN)
    fit, verdict = u_verdict(budgets, runs, level, interval_level)
    if verdict == NOT_COMPUTED:
        return not_computed(label, n, fit.reason)
    note = u_note(fit, level)
    if verdict == SUPPORTED:
        conditioned = u_runs(budgets, runs, selected_at=level)
        note += f"; given that the test passed (selective {LEVEL:.0%}): {_interval(conditioned)}"
    return Estimate(
        label,
        float(fit.p_u),
        math.nan,
        math.nan,
        n,
        verdict,
        note,
        detectable=detectable_rise(fit, level, POWER),
        pretraining_variance=True,
    )


def fcr_level(selected: int, family: int, level: float = LEVEL) -> float:
    """The level of the intervals printed for the `selected` of a family's `family` settings, so that
    the expected share of printed intervals that miss their truth (the false coverage-statement
    rate) stays at most 1 - `level` (Benjamini & Yekutieli 2005): 1 - selected (1 - level) / family.
    An interval printed only after its setting passed a test is otherwise not a `level` interval:
    the sweeps that pass a test of little power are those whose noise steepened the curve."""
    return 1 - max(selected, 1) * (1 - level) / max(family, 1)


def ushapes(settings: list[tuple[str, pd.DataFrame]], value: str, level: float = P_U) -> list[Estimate]:
    """`ushape` over a claim's family of settings, each tested at `level`; the minima of the R of m
    settings that clear it print their intervals at `fcr_level(R, m)`, the family named in the note."""
    first = [ushape(rows, value, label, level) for label, rows in settings]
    selected = [e.verdict == SUPPORTED for e in first]
    tested = sum(e.verdict != NOT_COMPUTED for e in first)  # a setting not computed cannot be selected
    adjusted = fcr_level(sum(selected), tested)
    if not any(selected) or adjusted <= LEVEL:  # nothing printed, or every tested setting printed
        return first
    fcr = (
        f"the minimum's interval at {adjusted:.2%}, {sum(selected)} of {tested} tested settings selected "
        "(false coverage-statement rate ≤ 5%, Benjamini & Yekutieli 2005)"
    )

    def printed(label: str, rows: pd.DataFrame) -> Estimate:
        wider = ushape(rows, value, label, level, adjusted)
        return replace(wider, note=f"{wider.note}; {fcr}")

    return [printed(*s) if chosen else e for s, e, chosen in zip(settings, first, selected)]


def u_note(fit: UShape, level: float = P_U) -> str:
    """P(U), and where it clears `level` the minimum's location with its interval (open ends as ≤ / ≥)."""
    if not math.isfinite(fit.p_u):
        return f"not computed: {fit.reason}"
    note = f"P(U) = {fit.p_u:.3f}"
    if fit.p_u > level and math.isfinite(fit.min_tokens):
        note += f"; minimum at {_tokens(fit.min_tokens)}"
        if fit.min_low > 0 or math.isfinite(fit.min_high):
            note += f" ({_interval(fit)})"
    return note


def _interval(fit: UShape) -> str:
    """The minimum's interval in tokens, an open side as ≤ / ≥."""
    low, high = fit.min_low, fit.min_high
    if low > 0 and math.isfinite(high):
        return f"{_tokens(low)} to {_tokens(high)}"
    if math.isfinite(high):
        return f"≤ {_tokens(high)}"
    return f"≥ {_tokens(low)}" if low > 0 else "anywhere in or beyond the grid"


def spearman_interval(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Spearman's ρ of the finite pairs with its 95% Fisher-z interval (variance (1 + ρ²/2) / (n - 3),
    Bonett & Wright 2000); NaNs below 4 pairs or for a constant variable."""
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = np.asarray(x, float)[ok], np.asarray(y, float)[ok]
    if len(x) < 4 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan, math.nan, math.nan
    point = float(spearmanr(x, y)[0])
    z, se = math.atanh(float(np.clip(point, -0.9999, 0.9999))), math.sqrt((1 + point**2 / 2) / (len(x) - 3))
    q = float(norm.ppf((1 + LEVEL) / 2))
    return point, math.tanh(z - q * se), math.tanh(z + q * se)


def rank_correlation(x: np.ndarray, y: np.ndarray, label: str, sign: int, n: str, runs: bool) -> Estimate:
    """Spearman's ρ of paired observations (`runs`: each pair a pre-training run of its own seed)
    with its 95% interval (spearman_interval), its verdict for the claimed sign, and the |ρ|
    detected with 80% power."""
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if len(x) < 4:
        return not_computed(label, n, f"{len(x)} pair(s): a rank correlation needs at least 4")
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return not_computed(label, n, "a constant variable has no rank correlation")
    point, low, high = spearman_interval(x, y)
    q = float(norm.ppf((1 + LEVEL) / 2))
    rho_d = 0.0
    for _ in range(50):  # atanh(ρ) = (q + z_power) sqrt((1 + ρ²/2) / (n - 3)): a contraction in ρ
        rho_d = math.tanh((q + float(norm.ppf(POWER))) * math.sqrt((1 + rho_d**2 / 2) / (len(x) - 3)))
    return Estimate(label, point, low, high, n, interval_verdict(low, high, sign), "", rho_d, runs)


def mean_difference(diffs: np.ndarray, label: str, sign: int, n: str, runs: bool) -> Estimate:
    """The mean of paired differences, one per unit (`runs`: a unit is a pre-training run or seed),
    with a 95% t-interval over the units, its verdict for the claimed sign and the mean difference
    detected with 80% power."""
    diffs = diffs[np.isfinite(diffs)]
    if len(diffs) < 2:
        return not_computed(label, n, f"{len(diffs)} unit(s): a paired difference needs at least 2")
    point, se, df = float(diffs.mean()), float(diffs.std(ddof=1) / math.sqrt(len(diffs))), len(diffs) - 1
    if not se > 0:
        return not_computed(label, n, "identical differences: no interval")
    low, high = t_interval(point, se, df)
    return Estimate(
        label, point, low, high, n, interval_verdict(low, high, sign), "", detectable(se, df), runs
    )


def _tokens(x: float) -> str:
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"
