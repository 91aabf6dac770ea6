"""Benchmark accuracy vs pre-training tokens (the paper's Figure 2 and Figures 11-22): per lm-eval
task, the unmodified checkpoints against their Gaussian perturbations (one line per γ, bars ±1 sd over
perturbation seeds) and their fine-tuned models (the tuned learning rate solid with bars ±1 sd over
fine-tuning seeds, every learning rate thin). A shaded band is ±1 lm-eval standard error over the
benchmark's items; a grey dotted line is the task's chance accuracy."""

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
STDERR = "_stderr"  # lm-eval's standard error of metric m is the row `m_stderr` of the same run
SE_BAND = "band: ±1 SE over items (lm-eval)"
# Chance accuracy of each task of the suite (pipeline/evaluate/benchmark_registry.py): a uniform guess
# among a question's answer choices, for acc and acc_norm alike (ARC: its usual 4 choices).
CHANCE = {
    "arc_easy": 0.25,
    "arc_challenge": 0.25,
    "boolq": 0.5,
    "copa": 0.5,
    "hellaswag": 0.25,
    "openbookqa": 0.25,
    "piqa": 0.5,
    "sciq": 0.25,
    "winogrande": 0.5,
    "mmlu": 0.25,
}
BARS = {  # what the bars of each kind of panel cover
    "gaussian": "γ (bars: ±1 sd over perturbation seeds)",
    "sft": "bars: ±1 sd over fine-tuning seeds at the tuned LR",
}
# the columns of one evaluated model and its evaluation data: a score and its stderr row share them
_RUN = ["checkpoint", "modification", "gamma", "task", "learning_rate", "lambda_reg", "seed"]
_RUN += ["eval_data", "split"]


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


def with_stderr(scores: pd.DataFrame, metrics: pd.DataFrame) -> pd.DataFrame:
    """`scores` with a column `se`: each row's lm-eval standard error (the `<metric>_stderr` row of the
    same run; NaN where lm-eval gives none)."""
    se = metrics[metrics["metric"].str.endswith(STDERR)]
    se = se.assign(metric=se["metric"].str.removesuffix(STDERR), se=se["value"])
    se = se.drop_duplicates([*_RUN, "metric"])[[*_RUN, "metric", "se"]]
    return scores.merge(se, on=[*_RUN, "metric"], how="left", validate="many_to_one")


def chance_line(ax: plt.Axes, benchmark: str) -> None:
    """The task's chance accuracy (CHANCE) as a grey dotted line; none for a task outside the suite."""
    if benchmark in CHANCE:
        ax.axhline(CHANCE[benchmark], color="0.5", ls=":", lw=1, label=f"chance ({CHANCE[benchmark]:g})")


def se_band(ax: plt.Axes, rows: pd.DataFrame, y: str, se: str, **kw) -> None:
    """A ±1 standard error band (column `se`) around column `y` against the budget; none where NaN."""
    rows = rows.sort_values("budget")
    ax.fill_between(rows["budget"], rows[y] - rows[se], rows[y] + rows[se], alpha=0.15, lw=0, **kw)


def tuned_se_band(ax: plt.Axes, score: pd.DataFrame, se: pd.DataFrame, **kw) -> None:
    """The band of a tuned-LR curve (analysis.tuned_table rows `score`): ± the seed mean of its runs'
    lm-eval standard errors (the tuned_table rows `se` of `<metric>_stderr`)."""
    se = se[["budget", "mean"]].rename(columns={"mean": "se"})
    se_band(ax, score.merge(se, on="budget"), "mean", "se", **kw)


def _base(ax: plt.Axes, base: pd.DataFrame) -> None:
    b = base.groupby("budget", as_index=False)[["value", "se"]].mean().sort_values("budget")
    ax.plot(b["budget"], b["value"], "k--", marker="s", ms=4, label="base (unmodified)")
    se_band(ax, b, "value", "se", color="k")


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
    metric = sft["metric"].iloc[0]
    t = tuned[
        (tuned["eval_data"] == PREFIX + benchmark)
        & tuned["metric"].isin([metric, metric + STDERR])
        & (tuned["modification"] == "sft")
        & (tuned["lambda_reg"] == lam)
    ]
    for task, g in t.groupby("task"):
        score = g[g["metric"] == metric]
        tuned_curve(ax, score, color=colors.get(task), label=f"fine-tuned on {task}, tuned LR")
        tuned_se_band(ax, score, g[g["metric"] == metric + STDERR], color=colors.get(task))


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
    scores = with_stderr(benchmark_scores(metrics, metric), metrics)
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
            chance_line(ax, bench)
            token_axis(ax, ticks=s["budget"])
            ax.set_ylabel(f"{bench} {s['metric'].iloc[0]}")
            ax.set_title(
                {"gaussian": "Gaussian perturbation", "sft": "fine-tuned", "none": "unmodified"}[kind]
                + f" · {bench}",
                fontsize=10,
            )
            title = f"{BARS[kind]}\n{SE_BAND}" if kind in BARS else SE_BAND
            ax.legend(fontsize=7, title=title, title_fontsize=7)
        for j in range(len(benchmarks), per_kind * ncols):
            axes[k * per_kind + j // ncols, j % ncols].set_visible(False)
    return save_figure(fig, stem, formats)
