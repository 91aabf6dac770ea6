"""The statistics a registered claim rests on (pipeline/analysis/claims.py), computed from a study's
rows with the seeds they hold: a trend over tokens with a hierarchical bootstrap interval, the
U-shape detector, and a rank correlation with a bootstrap interval; and the decision rules that turn
an interval into a verdict, stated before the data.

Every interval is a 95% interval; every bootstrap is seeded (`BOOTSTRAP`), so a rendering is a pure
function of the tables.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy.stats import spearmanr
from scipy.stats import t as t_dist

from pipeline.analysis.inflection import UShape, u_shape
from pipeline.analysis.seeds import bootstrap_means, cube_mean, seed_cube, seeds_covered, unit_values

if TYPE_CHECKING:
    import pandas as pd

LEVEL = 0.95
BOOTSTRAP = 4000  # resamples of every bootstrap interval
SEED = 0  # of every bootstrap
P_U = 0.95  # a U is established when P(U) exceeds this (pipeline/analysis/inflection.py)

SUPPORTED, NOT_ESTABLISHED, CONTRADICTED = "supported", "not established", "contradicted"


class NoRows(LookupError):
    """A claim's rows are not in the study: the claim renders as not computed, naming them."""


@dataclass(frozen=True)
class Estimate:
    """One statistic of one setting: its value, the 95% interval, and what it was computed over."""

    label: str  # the setting, e.g. "γ = 6" or "code, LR 3e-2"
    value: float
    low: float
    high: float
    n: str  # e.g. "7 budgets; 3 pre-training seeds x 3 perturbation seeds"
    verdict: str
    note: str = ""  # e.g. the U's minimum and its interval


def interval_verdict(low: float, high: float, sign: int) -> str:
    """The rule for a claimed direction (`sign` +1: above 0, -1: below): supported when the whole
    interval lies on the claimed side of 0, contradicted when it lies on the other side, otherwise
    (or without an interval) not established."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return NOT_ESTABLISHED
    if sign * low > 0 and sign * high > 0:
        return SUPPORTED
    if sign * low < 0 and sign * high < 0:
        return CONTRADICTED
    return NOT_ESTABLISHED


def all_of(verdicts: list[str]) -> str:
    """A claim made of several settings, each of which must hold: supported when all are,
    contradicted when all are contradicted, otherwise not established."""
    if verdicts and all(v == SUPPORTED for v in verdicts):
        return SUPPORTED
    if verdicts and all(v == CONTRADICTED for v in verdicts):
        return CONTRADICTED
    return NOT_ESTABLISHED


def any_of(verdicts: list[str]) -> str:
    """A claim that holds where at least one setting does (each setting's test made at the
    Bonferroni level by its caller): supported when any is, contradicted when all are."""
    if any(v == SUPPORTED for v in verdicts):
        return SUPPORTED
    if verdicts and all(v == CONTRADICTED for v in verdicts):
        return CONTRADICTED
    return NOT_ESTABLISHED


def _inner_name(rows: pd.DataFrame) -> str:
    mods = set(rows["modification"].dropna())
    if mods == {"gaussian"}:
        return "perturbation"
    return "fine-tuning" if mods and "none" not in mods else "evaluation"


def _covered(cube: np.ndarray, rows: pd.DataFrame) -> str:
    budgets = cube.shape[2]
    inner = int(np.max(np.sum(np.isfinite(cube).any(axis=2), axis=1)))
    return f"{budgets} budgets; {seeds_covered(cube.shape[0], inner, _inner_name(rows))}"


def trend(rows: pd.DataFrame, value: str, label: str, sign: int, rng: np.random.Generator) -> Estimate:
    """The least-squares slope of the seed-mean curve of `value` against log2 tokens (its change per
    doubling of pre-training), with a 95% percentile interval from the hierarchical bootstrap
    (pipeline/analysis/seeds.py), and its verdict for the claimed direction `sign`. Without any
    replicate (one run per budget) the interval is the slope's t-interval from the scatter about
    the fitted line (budgets - 2 degrees of freedom), and `n` says so."""
    budgets, cube, _, _ = seed_cube(rows, value)
    if len(budgets) < 3:
        raise NoRows(f"fewer than 3 budgets for {label}")
    x = np.log2(budgets)
    x = x - x.mean()

    def slope(curves: np.ndarray) -> np.ndarray:
        return (curves * x).sum(axis=-1) / (x * x).sum()

    mean = cube_mean(cube)
    point = float(slope(mean))
    covered = _covered(cube, rows)
    if cube.shape[0] * cube.shape[1] == 1:  # no replicate: the scatter about the line
        resid = mean - mean.mean() - point * x
        se = math.sqrt(float(resid @ resid) / (len(x) - 2) / float(x @ x))
        half = float(t_dist.ppf((1 + LEVEL) / 2, len(x) - 2)) * se
        low, high = point - half, point + half
        covered += "; no replicate: t-interval from the scatter about the fitted line"
    else:
        boots = slope(bootstrap_means(cube, BOOTSTRAP, rng))
        low, high = _percentiles(boots[np.isfinite(boots)])
    return Estimate(label, point, low, high, covered, interval_verdict(low, high, sign))


def u_fit(rows: pd.DataFrame, value: str) -> tuple[UShape, str]:
    """The U-shape detector (pipeline/analysis/inflection.py) on log(`value`) against tokens, over
    the replicate units (pre-training seeds where there are several, else the seeds within the one
    run), and what it was computed over."""
    budgets, cube, _, _ = seed_cube(rows, value)
    units, _ = unit_values(np.log(cube))
    tokens = np.repeat(budgets[None, :], len(units), axis=0)
    unit = np.repeat(np.arange(len(units))[:, None], len(budgets), axis=1)
    return u_shape(tokens.ravel(), units.ravel(), unit.ravel()), _covered(cube, rows)


def ushape(rows: pd.DataFrame, value: str, label: str, level: float = P_U) -> Estimate:
    """`u_fit`'s P(U) and its verdict: supported when P(U) > `level`; contradicted when the curve is
    still falling at its largest budgets (the slope of its upper half has a 95% interval below 0);
    otherwise not established."""
    fit, covered = u_fit(rows, value)
    if fit.p_u > level:
        verdict = SUPPORTED
    else:
        upper = rows[rows["budget"] >= rows["budget"].median()].assign(_log=lambda r: np.log(r[value]))
        falling = (
            upper["budget"].nunique() >= 3
            and trend(upper, "_log", label, -1, np.random.default_rng(SEED)).verdict == SUPPORTED
        )
        verdict = CONTRADICTED if falling else NOT_ESTABLISHED
    return Estimate(label, float(fit.p_u), math.nan, math.nan, covered, verdict, u_note(fit))


def u_note(fit: UShape) -> str:
    """P(U), and the minimum's location with its interval (open ends as ≤ / ≥)."""
    if not math.isfinite(fit.p_u):
        return f"not computed: {fit.reason}"
    note = f"P(U) = {fit.p_u:.3f}"
    if math.isfinite(fit.min_tokens):
        note += f"; minimum at {_tokens(fit.min_tokens)}"
        low, high = fit.min_low, fit.min_high
        if low > 0 and math.isfinite(high):
            note += f" ({_tokens(low)} to {_tokens(high)})"
        elif math.isfinite(high):
            note += f" (≤ {_tokens(high)})"
        elif low > 0:
            note += f" (≥ {_tokens(low)})"
    return note


def rank_correlation(
    x: np.ndarray, y: np.ndarray, label: str, sign: int, rng: np.random.Generator, n: str
) -> Estimate:
    """Spearman's ρ of paired observations with a 95% percentile interval from resampling the pairs,
    and its verdict for the claimed sign of the association."""
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if len(x) < 4:
        raise NoRows(f"fewer than 4 pairs for {label}")
    point = float(spearmanr(x, y)[0])
    idx = rng.integers(0, len(x), size=(BOOTSTRAP, len(x)))
    with warnings.catch_warnings():  # a resample of tied values has no ρ: dropped below
        warnings.simplefilter("ignore")
        boots = np.array([spearmanr(x[i], y[i])[0] for i in idx])
    low, high = _percentiles(boots[np.isfinite(boots)])
    return Estimate(label, point, low, high, n, interval_verdict(low, high, sign))


def mean_difference(diffs: np.ndarray, label: str, sign: int, rng: np.random.Generator, n: str) -> Estimate:
    """The mean of paired differences with a 95% percentile bootstrap interval over the pairs (no
    interval from one pair), and its verdict for the claimed sign."""
    diffs = diffs[np.isfinite(diffs)]
    if not len(diffs):
        raise NoRows(f"no pairs for {label}")
    point = float(diffs.mean())
    if len(diffs) < 2:
        return Estimate(label, point, math.nan, math.nan, n, NOT_ESTABLISHED)
    boots = diffs[rng.integers(0, len(diffs), size=(BOOTSTRAP, len(diffs)))].mean(axis=1)
    low, high = _percentiles(boots)
    return Estimate(label, point, low, high, n, interval_verdict(low, high, sign))


def _percentiles(samples: np.ndarray) -> tuple[float, float]:
    lo, hi = np.quantile(samples, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    return float(lo), float(hi)


def _tokens(x: float) -> str:
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"
