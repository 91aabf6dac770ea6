"""Figures of the perturbation sweep: progressive sensitivity (Figure 3 analogue) and
the inflection point vs perturbation scale."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.ticker import FuncFormatter

from pipeline.analysis.style import format_tokens, save_figure, set_style

if TYPE_CHECKING:
    import pandas as pd

TOKEN_FMT = FuncFormatter(format_tokens)


def token_axis(
    ax: plt.Axes, label: str = "pre-training tokens", ticks: Iterable[float] | None = None, axis: str = "x"
) -> None:
    """Log-scaled token axis with readable labels (250K, 4M) at the swept budgets."""
    getattr(ax, f"set_{axis}scale")("log")
    a = getattr(ax, f"{axis}axis")
    if ticks is not None:
        a.set_ticks(sorted(set(ticks)))
    a.set_major_formatter(TOKEN_FMT)
    a.set_minor_formatter(plt.NullFormatter())
    getattr(ax, f"set_{axis}label")(label)


def mark_inflections(
    ax: plt.Axes, inflection: pd.DataFrame, curves: pd.DataFrame, hue: str, palette: dict
) -> None:
    """A ★ on each setting's curve at its inflection budget (rows of analysis.inflection_table)."""
    for _, r in inflection[np.isfinite(inflection["inflection_budget"])].iterrows():
        at_inflection = curves[(curves[hue] == r[hue]) & (curves["budget"] == r["inflection_budget"])]
        y = at_inflection["value"].mean()
        ax.plot(r["inflection_budget"], y, marker="*", ms=16, color=palette[r[hue]], mec="k", zorder=5)


def plot_progressive_sensitivity(
    d: pd.DataFrame, base: pd.DataFrame, inflection: pd.DataFrame, stem: str | Path, formats: Iterable[str]
) -> list[Path]:
    """Per model row: Δppl, Δ log-ppl and absolute perturbed ppl vs tokens, one line per γ.

    d: output of analysis.deltas for the Gaussian rows; base: the unmodified rows (metric ppl);
    inflection: analysis.inflection_table (marked as stars on the absolute panel).
    """
    set_style()
    models = sorted(d["model"].unique())
    gammas = sorted(d["gamma"].unique())
    palette = dict(zip(gammas, sns.color_palette("viridis", len(gammas))))
    fig, axes = plt.subplots(len(models), 3, figsize=(15, 4.2 * len(models)), squeeze=False)
    for row, model in zip(axes, models):
        dm = d[d["model"] == model]
        for ax, col, ylabel in (
            (row[0], "delta", "Δ perplexity (perturbed − base)"),
            (row[1], "delta_log", "Δ log-perplexity  ln(perturbed / base)"),
            (row[2], "value", "perplexity after perturbation"),
        ):
            sns.lineplot(
                dm,
                x="budget",
                y=col,
                hue="gamma",
                palette=palette,
                marker="o",
                errorbar="sd",
                ax=ax,
                legend=ax is row[2],
            )
            token_axis(ax, ticks=dm["budget"])
            ax.set_ylabel(ylabel)
        bm = base[base["model"] == model].sort_values("budget")
        row[2].plot(bm["budget"], bm["value"], "k--", marker="s", label="base (γ = 0)")
        row[2].set_yscale("log")
        mark_inflections(row[2], inflection[inflection["model"] == model], dm, "gamma", palette)
        row[0].set_title(f"{model}: progressive sensitivity")
        row[1].set_title(f"{model}: relative degradation")
        row[2].set_title(f"{model}: catastrophic overtraining (★ inflection)")
        row[2].legend(title="γ (× init std)", fontsize=9)
    return save_figure(fig, stem, formats)


def plot_inflection(inflection: pd.DataFrame, stem: str | Path, formats: Iterable[str]) -> list[Path]:
    """Inflection budget vs γ per model with bootstrap intervals; γ without inflection drawn as ▲ above
    the sweep."""
    set_style()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for model, color in zip(sorted(inflection["model"].unique()), sns.color_palette("deep")):
        m = inflection[inflection["model"] == model].sort_values("gamma")
        ok = m[np.isfinite(m["inflection_budget"])]
        yerr = np.vstack([ok["inflection_budget"] - ok["ci_low"], ok["ci_high"] - ok["inflection_budget"]])
        ax.errorbar(
            ok["gamma"],
            ok["inflection_budget"],
            yerr=np.clip(np.nan_to_num(yerr), 0, None),
            fmt="o-",
            color=color,
            capsize=4,
            label=model,
        )
        none = m[~np.isfinite(m["inflection_budget"])]
        if len(none):
            ax.plot(
                none["gamma"],
                none["max_budget"] * 1.5,
                "^",
                color=color,
                ms=9,
                label=f"{model}: none ≤ {format_tokens(none['max_budget'].iloc[0])}",
            )
    marked = np.concatenate([inflection["max_budget"], inflection["inflection_budget"].dropna()])
    budgets = np.unique(marked)
    token_axis(ax, "inflection point (pre-training tokens)", ticks=budgets, axis="y")
    ax.set_xticks(sorted(inflection["gamma"].unique()))
    ax.set_xlabel("perturbation scale γ (× init std)")
    ax.set_title("Inflection point moves earlier as γ grows")
    ax.legend(fontsize=9)
    return save_figure(fig, stem, formats)


def plot_loss_curves(curves: pd.DataFrame, stem: str | Path, formats: Iterable[str]) -> list[Path]:
    """Training loss vs tokens of every pre-training run (one line per budget)."""
    set_style()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    sns.lineplot(
        curves,
        x="tokens",
        y="loss",
        hue="budget",
        style="model",
        palette="viridis",
        ax=ax,
        lw=0.8,
        hue_norm=plt.matplotlib.colors.LogNorm(),
    )
    token_axis(ax, "tokens seen")
    ax.set_ylabel("training loss (nats/token)")
    ax.set_title("Pre-training loss curves")
    return save_figure(fig, stem, formats)
