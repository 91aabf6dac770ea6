"""The judged instruction-following metric vs pre-training tokens (the Figure 2-left / Figure 11
analogue): per task, the win rate against the reference run at the tuned learning rate (solid,
± standard deviation over seeds), at every learning rate (thin), before fine-tuning (dashed), and
the reference run itself (★, 50% by definition)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import seaborn as sns

from pipeline.analysis.style import save_figure, set_style
from pipeline.analysis.sweep_figures import token_axis
from pipeline.judge.config import EVAL_DATA, EVAL_SPLIT

if TYPE_CHECKING:
    import pandas as pd


def win_rates(metrics: pd.DataFrame) -> pd.DataFrame:
    """The win-rate rows of the metrics table."""
    return metrics[
        (metrics["eval_data"] == EVAL_DATA)
        & (metrics["split"] == EVAL_SPLIT)
        & (metrics["metric"] == "win_rate")
    ]


def plot_win_rate(
    metrics: pd.DataFrame, tuned: pd.DataFrame, reference: dict, stem: str | Path, formats: Iterable[str]
) -> list[Path]:
    """metrics: the study's table; tuned: analysis.finetune_tuned (the tuned learning rate's rows);
    reference: the reference run (alpaca_eval.reference, checkpoint resolved)."""
    set_style()
    rows = win_rates(metrics)
    sft, base = rows[rows["modification"] == "sft"], rows[rows["modification"] == "none"]
    best = win_rates(tuned.rename(columns={"mean": "value"}))
    tasks = sorted(sft["task"].unique())
    fig, axes = plt.subplots(
        1, len(tasks), figsize=(6.4 * len(tasks), 4.6), squeeze=False, layout="constrained"
    )
    for ax, task in zip(axes[0], tasks):
        runs = sft[sft["task"] == task]
        lrs = sorted(runs["learning_rate"].unique())
        palette = dict(zip(lrs, sns.color_palette("viridis", len(lrs))))
        for lr, g in runs.groupby("learning_rate"):
            mean = g.groupby("budget")["value"].mean().sort_index()
            ax.plot(
                mean.index,
                mean.to_numpy(),
                lw=0.9,
                marker=".",
                alpha=0.8,
                color=palette[lr],
                label=f"lr {lr:g}",
            )
        t = best[best["task"] == task].sort_values("budget")
        ax.errorbar(
            t["budget"],
            t["value"],
            yerr=t["sd"].fillna(0),
            color="k",
            lw=2.2,
            marker="o",
            capsize=3,
            label="tuned LR (bars: ±1 sd over fine-tuning seeds)",
        )
        b = base[base["task"] == task].sort_values("budget")
        if not b.empty:
            ax.plot(b["budget"], b["value"], "k--", marker="s", ms=4, label="base (not fine-tuned)")
        ref = runs[
            (runs["checkpoint"] == reference["checkpoint"])
            & (runs["learning_rate"] == reference["learning_rate"])
            & (runs["seed"] == reference["seed"])
        ]
        if not ref.empty:
            ax.plot(ref["budget"], ref["value"], "*", ms=16, color="crimson", label="reference run")
        ax.axhline(0.5, color="0.6", lw=0.8, ls=":")
        token_axis(ax, ticks=runs["budget"].unique())
        ax.set_ylabel("win rate vs the reference")
        ax.set_title(task)
        ax.legend(fontsize=8)
    return save_figure(fig, stem, formats)
