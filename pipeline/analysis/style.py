"""Shared figure style and atomic figure saving (seaborn / matplotlib, headless)."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402

from pipeline.io import atomic_path  # noqa: E402


def set_style() -> None:
    """One look for every figure of a study."""
    sns.set_theme(context="paper", style="whitegrid", font_scale=1.15)
    plt.rcParams.update(
        {"figure.dpi": 120, "savefig.dpi": 150, "savefig.bbox": "tight", "axes.titleweight": "bold"}
    )


def legend_below(ax: plt.Axes, title: str | None = None) -> None:
    """The axis's legend under it, its title wrapped to the axis's width: a figure's layout
    (constrained) keeps it clear of the curves, however long the labels."""
    wrapped = (
        "\n".join(line for part in title.split("\n") for line in textwrap.wrap(part, 64)) if title else None
    )
    ax.legend(fontsize=8, title=wrapped, title_fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.17))


def save_figure(fig: plt.Figure, stem: str | Path, formats: Iterable[str] = ("png", "pdf")) -> list[Path]:
    """Save `fig` as `stem.<fmt>` for each format, atomically, and close it."""
    paths = []
    for fmt in formats:
        path = Path(f"{stem}.{fmt}")
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=fmt)
        paths.append(path)
    plt.close(fig)
    return paths


def tuned_curve(ax: plt.Axes, rows, **kw) -> str:
    """A tuned-learning-rate table's curve against pre-training tokens, as every fine-tuning figure
    draws it, and what its bars are. One checkpoint per budget: its mean over the fine-tuning seeds at
    the tuned rate ± their sd (no bar where one seed gives no sd). Several (pre-training seeds, each
    with its own tuned rate): the mean over them of each one's seed mean ± the sd over them."""
    per_budget = rows.groupby("budget")["mean"]
    if per_budget.size().max() > 1:
        curve = per_budget.agg(["mean", "std"]).reset_index()
        yerr = np.nan_to_num(curve["std"].to_numpy(dtype=float))
        ax.errorbar(curve["budget"], curve["mean"], yerr=yerr, fmt="o-", capsize=3, **kw)
        return "bars: ±1 sd over pre-training seeds (each one's mean over fine-tuning seeds at its tuned LR)"
    rows = rows.sort_values("budget")
    yerr = np.nan_to_num(rows["sd"].to_numpy(dtype=float))  # NaN sd (one seed): no bar
    ax.errorbar(rows["budget"], rows["mean"], yerr=yerr, fmt="o-", capsize=3, **kw)
    return "bars: ±1 sd over fine-tuning seeds at the tuned LR"


def plain_log_ticks(axis) -> None:
    """A log axis labelled 100, 200, 300 (the 2, 3 and 5 of each decade), not 10^2, 2 × 10^2: narrow
    labels that do not run into the next panel."""
    axis.set_major_formatter(plt.FuncFormatter(lambda y, _pos: f"{y:g}"))
    axis.set_minor_formatter(
        plt.FuncFormatter(lambda y, _pos: f"{y:g}" if y > 0 and f"{y:e}"[0] in "235" else "")
    )


def format_tokens(x: float, _pos: int | None = None) -> str:
    """Tick label for a token count to 2-3 significant digits: 250K, 707K, 1.4M, 4M, 3.1T (budgets
    √2 apart must not print as 1.41421M)."""
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(x) >= scale:
            v = x / scale
            return f"{v:.3g}{unit}" if abs(v) >= 100 else f"{v:.2g}{unit}"
    return f"{x:g}"
