"""The linearization figures on a synthetic sweep: the gap's reference line, and the NTK figure's
per-task series."""

import json

import numpy as np
import pandas as pd
from matplotlib.collections import PathCollection

from pipeline.analysis.linearization_figures import plot_gap_tokens, plot_ntk
from pipeline.analysis.stats import tuned_table
from pipeline.tables import metric_row, metrics_frame

SCALES = (1e-4, 1e-2, 1.0)


def test_gap_figure_marks_gap_one(draw, hlines, finetune_metrics):
    fig = draw(plot_gap_tokens, finetune_metrics, "gap", ["png"])
    assert len(fig.axes) == 2  # (code, sft), (gsm8k, sft)
    for ax in fig.axes:
        assert hlines(ax) == {"gap = 1: no better than predicting no change": 1.0}
        assert "gap = 1: no better than predicting no change" in [
            t.get_text() for t in ax.get_legend().get_texts()
        ]


def ntk_rows(metrics: pd.DataFrame) -> pd.DataFrame:
    """The NTK rows of every (checkpoint, task): κ at each σ scale and λ_max, task-specific trends."""
    rows = []
    ckpts = metrics.drop_duplicates("checkpoint")[["checkpoint", "model", "budget"]]
    for ckpt, model, budget in ckpts.itertuples(index=False):
        common = dict(checkpoint=ckpt, model=model, budget=budget, modification="none")
        for t, task in enumerate(("code", "gsm8k")):
            growth = np.log2(budget / 1e6) * (1 + t)
            rows.append(metric_row(**common, eval_data=task, metric="ntk_lambda_max", value=10.0 * 2**growth))
            rows += [
                metric_row(
                    **common,
                    eval_data=task,
                    metric="ntk_kappa",
                    value=1e3 / scale * 2**growth,
                    extra=json.dumps({"sigma_scale": scale}),
                )
                for scale in SCALES
            ]
    return metrics_frame(rows)


def test_ntk_figure_draws_one_series_per_task(draw, finetune_metrics):
    metrics = pd.concat([finetune_metrics, ntk_rows(finetune_metrics)], ignore_index=True)
    fig = draw(plot_ntk, metrics, tuned_table(metrics), "ntk", ["png"])
    kappa_tokens, _, kappa, top = fig.axes
    assert len(kappa_tokens.get_lines()) == 2 * len(SCALES)  # a line per (task, σ)
    assert {line.get_linestyle() for line in kappa_tokens.get_lines()} == {"-", "--", ":"}
    assert "σ" in kappa.get_xlabel() and "0.01·trK/n" in kappa.get_title()  # the middle σ, named
    for ax in (kappa, top):
        series = [c for c in ax.collections if isinstance(c, PathCollection)]
        assert len(series) == 2  # one per task: never pooled
        assert [len(c.get_offsets()) for c in series] == [4, 4]  # one point per checkpoint
        assert not np.allclose(series[0].get_facecolor(), series[1].get_facecolor())
        # κ and λ_max grow with tokens, and so does the forgetting here: ρ = +1 per task
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert [label.split(" [")[0] for label in labels] == ["code: ρ = +1.00", "gsm8k: ρ = +1.00"]
        assert ax.get_legend().get_title().get_text() == "Spearman ρ over checkpoints [95% Fisher-z]"
