"""Two-level seeds: the cube of a setting's rows, its run means (the unit), and the t-bands over
pre-training seeds."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from pipeline.analysis.figure_registry import RUN_BAND
from pipeline.analysis.seeds import cube_mean, curve_bands, run_means, seed_cube, seeds_covered


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
    runs = run_means(cube)  # one value per run: its inner seeds averaged
    np.testing.assert_allclose(runs[:, 0], [1.05, 2.05, 3.0])


def test_null_seeds_are_one_seed_and_one_run():
    r = rows(0.0, 0.5).query("pretrain_seed == 0").assign(pretrain_seed=None)
    _, cube, outers, _ = seed_cube(r, "value")
    assert cube.shape == (1, 2, 3) and run_means(cube).shape == (1, 3)


def test_bands_are_t_intervals_over_pretraining_seeds_and_none_with_one():
    r = rows(1.0, 0.2).assign(setting="a")
    bands = curve_bands(r, ["setting"], "value")
    # run means at a budget: b + 0.1, b + 1.1, b + 2.1: sd 1, t(2) half-width 4.303 / sqrt(3)
    half = stats.t.ppf(0.975, 2) / np.sqrt(3)
    np.testing.assert_allclose(bands["high"] - bands["mean"], half)
    assert set(bands[["n_pretrain_seeds", "n_seeds"]].itertuples(index=False, name=None)) == {(3, 2)}
    one = curve_bands(r.query("pretrain_seed == 0"), ["setting"], "value")
    assert one["low"].isna().all() and one["mean"].notna().all()
    # the legend's words are the captions' (figure_registry.RUN_BAND, the rules' params.legend)
    assert seeds_covered(3, 2, "fine-tuning") == f"{RUN_BAND}: 3 (2 fine-tuning seeds averaged per run)"
    assert (
        seeds_covered(1, 3, "perturbation") == "1 pre-training seed: no band (3 perturbation seeds per run)"
    )
