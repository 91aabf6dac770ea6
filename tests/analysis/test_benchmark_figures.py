"""The benchmark figure on a synthetic sweep: chance lines, lm-eval standard errors, and what the bars
cover."""

import itertools

import pytest
from matplotlib.collections import PolyCollection

from pipeline.analysis.benchmark_figures import BARS, SE_BAND, plot_benchmarks, with_stderr
from pipeline.analysis.stats import tuned_table
from pipeline.tables import metric_row, metrics_frame

BUDGETS = (1e6, 2e6, 4e6)
SE = 0.02


def benchmark_metrics():
    """PIQA (acc) and ARC-Easy (acc_norm) with their stderr rows on three checkpoints: unmodified,
    perturbed (one γ, two seeds) and fine-tuned (one rate, two seeds; with the ppl rows that tune it)."""
    rows = []
    for b, budget in enumerate(BUDGETS):
        ckpt = dict(checkpoint=f"tiny-{int(budget)}", model="tiny", budget=budget)
        runs = [dict(ckpt, modification="none")]
        runs += [dict(ckpt, modification="gaussian", gamma=1.0, seed=s) for s in (0, 1)]
        runs += [
            dict(ckpt, modification="sft", task="code", learning_rate=1e-2, lambda_reg=0.0, seed=s)
            for s in (0, 1)
        ]
        for run, (bench, metric) in itertools.product(runs, (("piqa", "acc"), ("arc_easy", "acc_norm"))):
            value = 0.5 + 0.05 * b - 0.01 * (run.get("seed") or 0)
            for m, v in ((metric, value), (f"{metric}_stderr", SE)):
                rows.append(
                    metric_row(**run, eval_data=f"benchmark:{bench}", split="validation", metric=m, value=v)
                )
        for run in runs[3:]:
            rows.append(metric_row(**run, eval_data="code", split="validation", metric="ppl", value=10.0 - b))
    return metrics_frame(rows)


def test_with_stderr_pairs_each_score_with_its_runs_stderr():
    m = benchmark_metrics()
    scores = m[m["metric"].isin(["acc", "acc_norm"])]
    paired = with_stderr(scores, m)
    assert len(paired) == len(scores) and (paired["se"] == SE).all()


def test_every_panel_draws_chance_and_the_unmodified_models_standard_error(draw, hlines):
    m = benchmark_metrics()
    fig = draw(plot_benchmarks, m, tuned_table(m), "benchmarks", ["png"])
    panels = {ax.get_title(): ax for ax in fig.axes if ax.get_visible()}
    assert set(panels) == {
        f"{kind} · {b}" for kind in ("Gaussian perturbation", "fine-tuned") for b in ("arc_easy", "piqa")
    }
    for title, ax in panels.items():
        chance = 0.25 if title.endswith("arc_easy") else 0.5
        assert hlines(ax) == {f"chance ({chance:g})": chance}
        bands = [c.get_paths()[0].vertices[:, 1] for c in ax.collections if isinstance(c, PolyCollection)]
        base = bands[-1]  # drawn last: the unmodified line's
        assert base.min() == pytest.approx(0.5 - SE) and base.max() == pytest.approx(0.6 + SE)
        kind = "gaussian" if title.startswith("Gaussian") else "sft"
        assert ax.get_legend().get_title().get_text() == f"{BARS[kind]}\n{SE_BAND}"
    assert len([c for c in panels["fine-tuned · piqa"].collections if isinstance(c, PolyCollection)]) == 2
