"""Seeds at two levels: the pre-training run (`pretrain_seed`) and, within it, the modification's
own seed (`seed`: the perturbation's noise, the fine-tuning run's data order). A curve over budgets
is the mean over pre-training seeds of the mean over the seeds within each; its uncertainty comes
from a hierarchical bootstrap that resamples pre-training seeds, then the seeds within each
(Davison & Hinkley 1997, Section 3.8: resampling at both levels of a two-stage design), so an
interval covers both sources of variation where the study has both, and says so where it has one.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import numpy as np
import pandas as pd

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
    """Per budget: the mean over pre-training seeds of the mean over the seeds within each."""
    with _quiet():
        return np.nanmean(np.nanmean(cube, axis=1), axis=0)


def unit_values(cube: np.ndarray) -> tuple[np.ndarray, str]:
    """(units x budgets, what a unit is): the replicates an inferential test treats as independent.
    With two or more pre-training seeds, each one's mean over its inner seeds; with one, the inner
    seeds (their spread leaves pre-training variance out, and the name says so)."""
    with _quiet():
        if cube.shape[0] >= 2:
            return np.nanmean(cube, axis=1), OUTER
        return cube[0], INNER


def bootstrap_means(cube: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """(n, budgets) curve means of `n` hierarchical resamples: pre-training seeds with replacement,
    then within each drawn one its inner seeds with replacement (a level with one seed stays fixed)."""
    p, s, _ = cube.shape
    outer = rng.integers(0, p, size=(n, p))
    inner = rng.integers(0, s, size=(n, p, s))
    drawn = cube[outer[:, :, None], inner]  # (n, p, s, budgets)
    with _quiet():
        return np.nanmean(np.nanmean(drawn, axis=2), axis=1)


def seeds_covered(n_outer: int, n_inner: int, inner_name: str) -> str:
    """What an interval over a cube covers, in words: e.g. '3 pre-training seeds x 2 fine-tuning
    seeds', or '1 pre-training run, 3 perturbation seeds (pre-training variance not included)'."""
    inner = f"{n_inner} {inner_name} seed{'s' if n_inner != 1 else ''}"
    if n_outer >= 2:
        return f"{n_outer} pre-training seeds x {inner}"
    return f"1 pre-training run, {inner} (pre-training variance not included)"


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """numpy's 'mean of empty slice' warnings off: an all-NaN budget is a NaN, not a warning."""
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def curve_bands(
    rows: pd.DataFrame, keys: list[str], value: str, n: int, rng: np.random.Generator, level: float = 0.95
) -> pd.DataFrame:
    """Per setting (`keys`) and budget: the seed-mean curve of `value` and its `level` percentile
    band from `n` hierarchical resamples (the band of a setting with one run only is its mean), with
    how many pre-training seeds and seeds within each it covers."""
    out = []
    for key, g in rows.groupby(keys, dropna=False, sort=True):
        budgets, cube, outers, inners = seed_cube(g, value)
        boots = bootstrap_means(cube, n, rng)
        with _quiet():
            low, high = np.nanquantile(boots, [(1 - level) / 2, (1 + level) / 2], axis=0)
        key = key if isinstance(key, tuple) else (key,)
        for b, m, lo, hi in zip(budgets, cube_mean(cube), low, high):
            out.append({**dict(zip(keys, key)), "budget": b, "mean": m, "low": lo, "high": hi,
                        "n_pretrain_seeds": len(outers), "n_seeds": len(inners)})  # fmt: skip
    return pd.DataFrame(out)
