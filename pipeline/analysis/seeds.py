"""Seeds at two levels: the pre-training run (`pretrain_seed`, one run per budget) and, within it, the
modification's own seed (`seed`: the perturbation's noise, the fine-tuning run's data order). The
pre-training run is the unit: a run's inner seeds are averaged first (they share the run's
pre-training randomness), a curve over budgets is the mean of the runs over pre-training seeds, and
its band is a t-interval over the seeds (df = seeds - 1; none with one seed, whose runs give no
run-level spread at a budget). pipeline/analysis/evidence.py has the statistics on the same runs.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import numpy as np
import pandas as pd
from scipy import stats

from pipeline.analysis.figure_registry import RUN_BAND

OUTER, INNER = "pretrain_seed", "seed"


def seed_cube(rows: pd.DataFrame, value: str) -> tuple[np.ndarray, np.ndarray, list, list]:
    """(budgets, cube, pre-training seeds, inner seeds) of one setting's rows: cube[p, s, b] is the
    mean `value` of pre-training seed p, inner seed s, budget b (NaN where that run does not exist).
    A null seed (an unmodified model; a hub checkpoint's pre-training seed) is one seed."""
    keyed = rows.assign(
        _outer=rows[OUTER].astype("Float64").fillna(-1) if OUTER in rows else -1,
        _inner=rows[INNER].astype("Float64").fillna(-1) if INNER in rows else -1,
    )
    table = keyed.pivot_table(
        index=["_outer", "_inner"], columns="budget", values=value, aggfunc="mean", dropna=False
    )
    table = table.reindex(sorted(table.columns), axis=1)
    outers = sorted(keyed["_outer"].unique())
    inners = sorted(keyed["_inner"].unique())
    full = pd.MultiIndex.from_product([outers, inners], names=["_outer", "_inner"])
    cube = table.reindex(full).to_numpy(dtype=float).reshape(len(outers), len(inners), table.shape[1])
    return table.columns.to_numpy(dtype=float), cube, outers, inners


def cube_mean(cube: np.ndarray) -> np.ndarray:
    """Per budget: the mean over pre-training seeds of their runs' means (`run_means`)."""
    with _quiet():
        return np.nanmean(run_means(cube), axis=0)


def run_means(cube: np.ndarray) -> np.ndarray:
    """(pre-training seeds x budgets): each run's mean over its inner seeds (NaN where it did not run)."""
    with _quiet():
        return np.nanmean(cube, axis=1)


def seeds_covered(n_outer: int, n_inner: int, inner_name: str) -> str:
    """What a band over a cube covers, for a legend (figure_registry.RUN_BAND, the captions' words):
    e.g. '95% t-band over the pre-training seeds: 3 (2 fine-tuning seeds averaged per run)', or
    '1 pre-training seed: no band (3 perturbation seeds per run)'."""
    inner = f"{n_inner} {inner_name} seed{'s' if n_inner != 1 else ''}"
    if n_outer >= 2:
        return f"{RUN_BAND}: {n_outer} ({inner} averaged per run)"
    return f"1 pre-training seed: no band ({inner} per run)"


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """numpy's 'mean of empty slice' warnings off: an all-NaN budget is a NaN, not a warning."""
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def curve_bands(rows: pd.DataFrame, keys: list[str], value: str, level: float = 0.95) -> pd.DataFrame:
    """Per setting (`keys`) and budget: the mean of `value` over the runs (each run's inner seeds
    averaged) and its `level` t-band over the pre-training seeds (NaN with fewer than two), with how
    many pre-training seeds and seeds within each it covers."""
    out = []
    for key, g in rows.groupby(keys, dropna=False, sort=True):
        budgets, cube, outers, inners = seed_cube(g, value)
        runs = run_means(cube)
        n = np.isfinite(runs).sum(axis=0)
        with _quiet():
            mean = np.nanmean(runs, axis=0)
            sd = np.nanstd(runs, axis=0, ddof=1)
        q = stats.t.ppf((1 + level) / 2, np.maximum(n - 1, 1))
        half = np.where(n >= 2, q * sd / np.sqrt(np.maximum(n, 1)), np.nan)
        key = key if isinstance(key, tuple) else (key,)
        for b, m, h in zip(budgets, mean, half):
            out.append({**dict(zip(keys, key)), "budget": b, "mean": m, "low": m - h, "high": m + h,
                        "n_pretrain_seeds": len(outers), "n_seeds": len(inners)})  # fmt: skip
    return pd.DataFrame(out)
