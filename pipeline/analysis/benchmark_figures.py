"""Benchmark accuracy vs pre-training tokens (the paper's Figure 2 and Figures 11-22): per lm-eval
task, the unmodified checkpoints against their Gaussian perturbations (one line per γ) and their
fine-tuned models (the tuned learning rate solid with ±1 sd over seeds, every learning rate thin)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import seaborn as sns

from pipeline.analysis.style import save_figure, set_style, tuned_curve
from pipeline.analysis.sweep_figures import token_axis

if TYPE_CHECKING:
    import pandas as pd

PREFIX = "benchmark:"


def benchmark_scores(metrics: pd.DataFrame, metric: str = "auto") -> pd.DataFrame:
    """The benchmark rows of a metrics table for one metric, with a `benchmark` column (task name).

    metric "auto": acc_norm where lm-eval defines it, else acc (unnormalized accuracy favours short
    answers, which puts small models below chance on ARC-Challenge and OpenBookQA).
    """
    b = metrics[metrics["eval_data"].fillna("").str.startswith(PREFIX)].copy()
    b["benchmark"] = b["eval_data"].str.slice(len(PREFIX))
    if metric != "auto":
        return b[b["metric"] == metric]
    has_norm = set(b.loc[b["metric"] == "acc_norm", "benchmark"])
    return b[b["metric"] == b["benchmark"].map(lambda t: "acc_norm" if t in has_norm else "acc")]


def _base(ax: plt.Axes, base: pd.DataFrame) -> None:
    b = base.groupby("budget", as_index=False)["value"].mean().sort_values("budget")
    ax.plot(b["budget"], b["value"], "k--", marker="s", ms=4, label="base (unmodified)")


def _gaussian(ax: plt.Axes, g: pd.DataFrame) -> None:
    gammas = sorted(g["gamma"].unique())
    palette = dict(zip(gammas, sns.color_palette("rocket_r", g["gamma"].nunique())))
    sns.lineplot(
        g,
        x="budget",
        y="value",
        hue="gamma",
        palette=palette,
        marker="o",
        errorbar="sd",
        err_style="bars",
        ax=ax,
    )


def _finetuned(ax: plt.Axes, sft: pd.DataFrame, tuned: pd.DataFrame | None, benchmark: str) -> None:
    lam = sft["lambda_reg"].min()
    every = (
        sft[sft["lambda_reg"] == lam]
        .groupby(["task", "learning_rate", "budget"], as_index=False)["value"]
        .mean()
    )
    colors = dict(zip(sorted(every["task"].unique()), sns.color_palette("tab10")))
    for (task, _lr), g in every.groupby(["task", "learning_rate"]):
        g = g.sort_values("budget")
        ax.plot(g["budget"], g["value"], "-", lw=0.8, alpha=0.35, color=colors[task])
    if tuned is None:
        return
    t = tuned[
        (tuned["eval_data"] == PREFIX + benchmark)
        & (tuned["metric"] == sft["metric"].iloc[0])
        & (tuned["modification"] == "sft")
        & (tuned["lambda_reg"] == lam)
    ]
    for task, g in t.groupby("task"):
        tuned_curve(ax, g, color=colors.get(task), label=f"fine-tuned on {task}, tuned LR")


def plot_benchmarks(
    metrics: pd.DataFrame,
    tuned: pd.DataFrame | None,
    stem: str | Path,
    formats: Iterable[str],
    metric: str = "auto",
    ncols: int = 5,
) -> list[Path]:
    """One panel per (modification, benchmark): accuracy vs pre-training tokens.

    metrics: the study's tidy metrics (rows with eval_data "benchmark:<task>"); tuned:
    analysis.tuned_table (None without fine-tuning: the fine-tuned panels then show every LR only).
    """
    set_style()
    scores = benchmark_scores(metrics, metric)
    if scores.empty:
        raise ValueError(
            f"no benchmark rows with metric {metric!r} in the metrics table (is eval.benchmarks.tasks empty?)"
        )
    benchmarks = sorted(scores["benchmark"].unique())
    kinds = [k for k in ("gaussian", "sft") if (scores["modification"] == k).any()] or ["none"]
    ncols = min(ncols, len(benchmarks))
    per_kind = -(-len(benchmarks) // ncols)
    fig, axes = plt.subplots(
        per_kind * len(kinds),
        ncols,
        figsize=(4 * ncols, 3.6 * per_kind * len(kinds)),
        squeeze=False,
        layout="constrained",
    )
    for k, kind in enumerate(kinds):
        for i, bench in enumerate(benchmarks):
            ax = axes[k * per_kind + i // ncols, i % ncols]
            s = scores[scores["benchmark"] == bench]
            if kind == "gaussian":
                _gaussian(ax, s[s["modification"] == "gaussian"])
            elif kind == "sft":
                _finetuned(ax, s[s["modification"] == "sft"], tuned, bench)
            _base(ax, s[s["modification"] == "none"])
            token_axis(ax, ticks=s["budget"])
            ax.set_ylabel(f"{bench} {s['metric'].iloc[0]}")
            ax.set_title(
                {"gaussian": "Gaussian perturbation", "sft": "fine-tuned", "none": "unmodified"}[kind]
                + f" · {bench}",
                fontsize=10,
            )
            ax.legend(fontsize=7, title="γ" if kind == "gaussian" else None)
        for j in range(len(benchmarks), per_kind * ncols):
            axes[k * per_kind + j // ncols, j % ncols].set_visible(False)
    return save_figure(fig, stem, formats)
