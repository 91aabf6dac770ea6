"""Two-level seeds: the cube of a setting's rows, its mean, the hierarchical bootstrap, the bands."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.analysis.seeds import (
    bootstrap_means,
    cube_mean,
    curve_bands,
    seed_cube,
    seeds_covered,
    unit_values,
)


def rows(pretrain_effect: float, seed_effect: float) -> pd.DataFrame:
    """3 pre-training seeds x 2 inner seeds x 3 budgets: value = budget + effects of each seed."""
    out = [
        {"pretrain_seed": p, "seed": s, "budget": b, "value": b + pretrain_effect * p + seed_effect * s}
        for p in range(3)
        for s in range(2)
        for b in (1.0, 2.0, 4.0)
    ]
    return pd.DataFrame(out)


def test_the_cube_and_its_mean_weigh_each_pretraining_seed_equally():
    r = rows(1.0, 0.1)
    r = r.drop(r[(r["pretrain_seed"] == 2) & (r["seed"] == 1)].index)  # seed 2 ran one inner seed
    budgets, cube, outers, inners = seed_cube(r, "value")
    assert budgets.tolist() == [1.0, 2.0, 4.0] and cube.shape == (3, 2, 3)
    assert np.isnan(cube[2, 1]).all()
    # mean over pre-training seeds of the mean within each: (0.05 + 1.05 + 2.0) / 3 above the budget
    np.testing.assert_allclose(cube_mean(cube), budgets + (0.05 + 1.05 + 2.0) / 3)
    units, kind = unit_values(cube)
    assert kind == "pretrain_seed" and units.shape == (3, 3)


def test_null_seeds_are_one_seed_and_one_run_has_inner_units():
    r = rows(0.0, 0.5).query("pretrain_seed == 0").assign(pretrain_seed=None)
    _, cube, outers, _ = seed_cube(r, "value")
    assert cube.shape == (1, 2, 3)
    units, kind = unit_values(cube)
    assert kind == "seed" and units.shape == (2, 3)


@pytest.mark.parametrize("pretrain_effect, seed_effect", [(1.0, 0.0), (0.0, 1.0)])
def test_the_bootstrap_resamples_both_levels(pretrain_effect, seed_effect):
    """Variation at either level alone widens the resampled means: both levels are resampled."""
    _, cube, _, _ = seed_cube(rows(pretrain_effect, seed_effect), "value")
    boots = bootstrap_means(cube, 2000, np.random.default_rng(0))
    assert boots.shape == (2000, 3) and boots.std(axis=0).min() > 0.05
    np.testing.assert_allclose(boots.mean(axis=0), cube_mean(cube), atol=0.05)


def test_bands_and_what_they_cover():
    r = rows(1.0, 0.2).assign(setting="a")
    bands = curve_bands(r, ["setting"], "value", 500, np.random.default_rng(0))
    assert (bands["low"] < bands["mean"]).all() and (bands["mean"] < bands["high"]).all()
    assert set(bands[["n_pretrain_seeds", "n_seeds"]].itertuples(index=False, name=None)) == {(3, 2)}
    assert seeds_covered(3, 2, "fine-tuning") == "3 pre-training seeds x 2 fine-tuning seeds"
    assert "not included" in seeds_covered(1, 3, "perturbation")
