"""Inflection detection and sensitivity statistics on constructed curves."""

import math

import numpy as np
import pandas as pd
import pytest

from pipeline.analysis.stats import deltas, inflection_point, inflection_table, sensitivity_table
from pipeline.tables import metric_row, metrics_frame

BUDGETS = np.array([1, 2, 4, 8, 16, 32], dtype=float) * 1e6


@pytest.mark.parametrize(
    "values, expected",
    [
        ([5.0, 4.0, 3.0, 3.5, 4.0, 5.0], 4e6),  # U-shape: first budget whose successor is worse
        ([5.0, 4.0, 3.0, 2.5, 2.0, 1.0], math.nan),  # keeps improving: no inflection in the sweep
        ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 1e6),  # worse from the start
        ([5.0, 4.0, 4.0, 3.0, 3.1, 2.0], 8e6),  # ties do not count; a later bump does
        ([5.0, 4.0, float("nan"), 3.0, 2.0, 1.0], 2e6),  # a diverged run counts as worse
    ],
)
def test_inflection_point_definition_4_2(values, expected):
    got = inflection_point(BUDGETS, np.array(values))
    assert (math.isnan(got) and math.isnan(expected)) or got == expected


def _rows(curves_by_gamma, base, seeds=(0, 1, 2), noise=0.0, rng=None):
    rows = []
    for b, v in zip(BUDGETS, base):
        rows.append(
            metric_row(
                checkpoint=f"m-{int(b)}",
                model="m",
                budget=b,
                modification="none",
                eval_data="pretrain",
                split="validation",
                metric="ppl",
                value=v,
            )
        )
    for gamma, curve in curves_by_gamma.items():
        for s in seeds:
            for b, v in zip(BUDGETS, curve):
                eps = rng.normal(0, noise) if rng is not None else 0.0
                rows.append(
                    metric_row(
                        checkpoint=f"m-{int(b)}",
                        model="m",
                        budget=b,
                        modification="gaussian",
                        gamma=gamma,
                        seed=s,
                        eval_data="pretrain",
                        split="validation",
                        metric="ppl",
                        value=v + eps,
                    )
                )
    return metrics_frame(rows)


def test_deltas_sensitivity_and_inflection_tables():
    base = np.array([40.0, 30.0, 24.0, 20.0, 18.0, 17.0])
    # multiplicative sensitivity growing with tokens, faster for the larger gamma
    curves = {1.0: base * np.exp(0.02 * np.arange(6)), 4.0: base * np.exp(0.15 * np.arange(6) ** 1.5)}
    m = _rows(curves, base, rng=np.random.default_rng(0), noise=0.01)
    d = deltas(m, "ppl")
    assert len(d) == 2 * 3 * 6
    assert np.allclose(d["delta"], d["value"] - d["base"])
    sens = sensitivity_table(d).set_index("gamma")
    assert sens.loc[1.0, "spearman_rho"] == pytest.approx(1.0)
    assert bool(sens.loc[4.0, "strictly_increasing"])
    infl = inflection_table(d).set_index("gamma")
    expected_4 = inflection_point(BUDGETS, curves[4.0])
    assert infl.loc[4.0, "inflection_budget"] == expected_4
    assert math.isnan(infl.loc[1.0, "inflection_budget"])  # small gamma: still improving
    assert not {"ci_low", "ci_high", "p_no_inflection"} & set(infl.columns)  # no bootstrap over seeds


def test_metric_row_rejects_unknown_columns():
    with pytest.raises(KeyError, match="unknown metric columns"):
        metric_row(checkpoint="x", tokens=3)


def test_non_finite_value_marks_row_diverged():
    assert metric_row(value=float("inf"))["diverged"] is True
    df = metrics_frame([metric_row(value=float("nan"))])
    assert bool(df["diverged"].iloc[0])
    assert isinstance(df, pd.DataFrame)
