"""The inflection figure draws a minimum's interval only where the claims would print it."""

import pandas as pd
from test_claims import sweep_rows

from pipeline.analysis import sweep_figures
from pipeline.analysis.stats import deltas, inflection_table


def test_the_inflection_figure_draws_an_interval_only_where_p_u_clears_the_level(monkeypatch):
    u = deltas(sweep_rows(lambda x: 0.15 * x**2, noise=0.01), "ppl")
    flat = sweep_rows(lambda x: 0.0, noise=0.01, seed=1)
    flat.loc[flat["modification"] == "gaussian", "gamma"] = 2.0
    table = inflection_table(pd.concat([u, deltas(flat, "ppl")]).dropna(subset=["gamma"]))
    p_u = table.set_index("gamma")["p_u"]
    assert p_u[6.0] > 0.95 and p_u[2.0] <= 0.95
    drawn = {}
    monkeypatch.setattr(sweep_figures, "save_figure", lambda fig, stem, formats: drawn.setdefault("fig", fig))
    sweep_figures.plot_inflection(table, "unused", ["png"])
    (ax,) = drawn["fig"].axes
    labels = ax.get_legend_handles_labels()[1]
    assert "tiny: U fit's minimum, 95% interval (P(U) > 0.95)" in labels
    assert "tiny: P(U) ≤ 0.95: no minimum established" in labels
    notes = [t.get_text() for t in ax.texts]
    assert notes == [f"P(U) {p_u[2.0]:.2f}"]  # the flat γ: its P(U), no interval
    bars = [line for line in ax.lines if len(line.get_xdata()) == 2 and len(set(line.get_xdata())) == 1]
    assert [line.get_xdata()[0] for line in bars] == [6.0]  # one interval, at the established γ
