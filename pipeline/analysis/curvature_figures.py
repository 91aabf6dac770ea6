"""Figures of the curvature stage (Appendix D): the loss along a Gaussian direction (Figure 9) and
along the fine-tuning direction (Figure 10) against the quadratic prediction, small-λ and wide-λ
panels per checkpoint; and the sharpness per checkpoint beside the Gaussian sensitivity."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.lines import Line2D

from pipeline.analysis.style import format_tokens, save_figure, set_style
from pipeline.analysis.sweep_figures import token_axis
from pipeline.curvature.summary import summary_table

GRIDS = ("small", "wide")


def _checkpoints(lines: pd.DataFrame) -> list[tuple[str, float]]:
    """One (checkpoint, budget) per budget, the first by name (a sweep's first pre-training seed): a
    column each, so a sweep of several pre-training seeds stays page-wide (the lines of the other
    seeds' checkpoints are in the table, analysis/curvature_lines.parquet)."""
    first = lines.sort_values(["budget", "checkpoint"]).drop_duplicates("budget")
    return list(zip(first["checkpoint"], first["budget"]))


def _line_panel(ax: plt.Axes, g: pd.DataFrame, color, label: str | None) -> None:
    """One line: ΔL = L(θ + λε) − L(θ) (solid, markers; non-finite points left out) and the
    quadratic's Δ (dashed)."""
    g = g.sort_values("lambda")
    ok = g[g["finite"]]
    ax.plot(ok["lambda"], ok["loss"] - ok["loss0"], "-o", color=color, ms=3, lw=1.4, label=label)
    ax.plot(g["lambda"], g["quadratic"] - g["loss0"], "--", color=color, lw=1.2)
    bad = g[~g["finite"]]
    if len(bad):
        ax.plot(bad["lambda"], np.zeros(len(bad)), "x", color="red", ms=6)


def _annotation(sub: pd.DataFrame, grid: str) -> str:
    """Small grid: the quadratic's worst relative error at the smallest λ over a panel's lines;
    wide grid: the range over its lines of the true / predicted rise at the widest λ."""
    if sub.empty:
        return ""
    per_line = summary_table(sub)
    if grid == "small":
        worst = per_line["quadratic_rel_error"].max()
        return f"rel. err. at |λ|={per_line['smallest_lambda'].min():g}: ≤ {worst:.1e}"
    ratio = per_line["excess_ratio"]
    return f"true/quadratic at λ={per_line['widest_lambda'].max():g}: {ratio.min():.2f}–{ratio.max():.2f}"


def _no_data(stem: str | Path, formats: Iterable[str], text: str) -> list[Path]:
    fig, ax = plt.subplots(figsize=(6, 2))
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center")
    return save_figure(fig, stem, formats)


def _line_figure(
    lines: pd.DataFrame,
    rows: Sequence[tuple[str, pd.DataFrame]],
    hue: str,
    hue_label,
    stem: str | Path,
    formats: Iterable[str],
    title: str,
) -> list[Path]:
    """Rows of (label, that row set's lines) × small / wide grid; one column per checkpoint."""
    ckpts = _checkpoints(lines)
    values = sorted(lines[hue].dropna().unique())
    palette = dict(zip(values, sns.color_palette("viridis" if hue != "seed" else "deep", len(values))))
    fig, axes = plt.subplots(
        2 * len(rows), len(ckpts), figsize=(2.9 * len(ckpts), 2.5 * 2 * len(rows)), squeeze=False
    )
    for r, (row_label, data) in enumerate(rows):
        for grid_i, grid in enumerate(GRIDS):
            row = axes[2 * r + grid_i]
            for ax, (ckpt, tokens) in zip(row, ckpts):
                sub = data[(data["checkpoint"] == ckpt) & (data["grid"] == grid)]
                for value, g in sub.groupby(hue):
                    _line_panel(ax, g, palette[value], hue_label(value))
                ax.axhline(0, color="0.6", lw=0.6)
                ax.set_title(
                    f"{format_tokens(tokens)} tokens · {grid} λ\n{_annotation(sub, grid)}", fontsize=8
                )
                if ax is row[0]:
                    ax.set_ylabel(f"{row_label}\nΔ loss (nats)" if row_label else "Δ loss (nats)")
                ax.set_xlabel("λ")
    handles = [Line2D([], [], color=palette[v], marker="o", ms=3, label=hue_label(v)) for v in values] + [
        Line2D([], [], color="k", label="true loss L(θ+λε) − L(θ)"),
        Line2D([], [], color="k", ls="--", label="quadratic λgᵀε + ½λ²εᵀHε"),
    ]
    fig.legend(handles=handles, loc="upper center", ncol=min(len(handles), 6), bbox_to_anchor=(0.5, 1.0))
    fig.suptitle(title, y=1.04, fontweight="bold")
    fig.tight_layout()
    return save_figure(fig, stem, formats)


def plot_gaussian_lines(lines: pd.DataFrame, stem: str | Path, formats: Iterable[str]) -> list[Path]:
    """Figure 9 analogue: per checkpoint, ΔL along Gaussian ε (λ = γ) vs the quadratic; a colour per seed."""
    set_style()
    g = lines[lines["direction"] == "gaussian"]
    if g.empty:
        return _no_data(stem, formats, "no Gaussian lines (curvature stage off)")
    return _line_figure(
        g,
        [("", g)],
        "seed",
        lambda s: f"seed {int(s)}",
        stem,
        formats,
        "Loss along a Gaussian direction ε (per-tensor init std; λ = γ) vs its quadratic prediction",
    )


def plot_finetune_lines(lines: pd.DataFrame, stem: str | Path, formats: Iterable[str]) -> list[Path]:
    """Figure 10 analogue: ΔL along θ_ft − θ_pre (λ = 1: the fine-tuned model), a row pair per task,
    one colour per learning rate (first seed and proximal λ)."""
    set_style()
    f = lines[lines["direction"] == "finetune"]
    if f.empty:
        return _no_data(stem, formats, "no fine-tuning lines (fine-tuning or curvature stage off)")
    f = f[(f["seed"] == f["seed"].min()) & (f["lambda_reg"] == f["lambda_reg"].min())]
    rows = [(task, f[f["task"] == task]) for task in sorted(f["task"].unique())]
    return _line_figure(
        f,
        rows,
        "learning_rate",
        lambda lr: f"lr {lr:g}",
        stem,
        formats,
        "Loss along the fine-tuning direction θ_ft − θ_pre (λ = 1: fine-tuned) vs its quadratic prediction",
    )


def sensitivity_vs_prediction(
    metrics: pd.DataFrame, sharp: pd.DataFrame, gamma: float
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(measured, predicted) Δ loss at γ per checkpoint: the perturbation stage's mean over seeds of
    L(θ + γε) − L(θ) (= Δ log-ppl), and the quadratic's expectation ½ γ² tr(D H D) ± ½ γ² SE."""
    pre = metrics[(metrics["eval_data"] == "pretrain") & (metrics["metric"] == "loss")]
    base = pre[pre["modification"] == "none"].drop_duplicates("checkpoint").set_index("checkpoint")["value"]
    pert = pre[(pre["modification"] == "gaussian") & np.isclose(pre["gamma"], gamma)]
    measured = (
        pert.assign(delta=pert["value"] - pert["checkpoint"].map(base))
        .groupby(["checkpoint", "budget"])["delta"]
        .agg(["mean", "std", "count"])
        .reset_index()
    )
    s = sharp.set_index(["checkpoint", "budget"])
    predicted = pd.DataFrame(
        {
            "mean": 0.5 * gamma**2 * s["hessian_trace_init_scaled"],
            "se": 0.5 * gamma**2 * s["hessian_trace_init_scaled_se"],
        }
    ).reset_index()
    return measured.sort_values("budget"), predicted.sort_values("budget")


def sharpness_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per checkpoint with the sharpness metrics as columns."""
    m = metrics[metrics["metric"].str.startswith("hessian_")]
    return m.pivot_table(index=["checkpoint", "budget"], columns="metric", values="value").reset_index()


def plot_sharpness(
    metrics: pd.DataFrame, gammas: Sequence[float], stem: str | Path, formats: Iterable[str]
) -> list[Path]:
    """Sharpness vs tokens (tr H ± SE, top eigenvalue, tr(DHD) ± SE) beside the Gaussian sensitivity
    Δ loss at the smallest and the largest γ, measured and as the quadratic predicts it."""
    set_style()
    sharp = sharpness_table(metrics).sort_values("budget")
    if sharp.empty:
        return _no_data(stem, formats, "no sharpness rows (curvature stage off)")
    small, large = min(gammas), max(gammas)
    fig, axes = plt.subplots(1, 5, figsize=(23, 4.2))
    x = sharp["budget"]
    axes[0].errorbar(x, sharp["hessian_trace"], yerr=sharp["hessian_trace_se"], marker="o", capsize=3)
    axes[0].set(title="tr(H) (Hutchinson ± SE over its probes)", ylabel="value")
    axes[1].plot(x, sharp["hessian_top_eig"], "s-", color="C1")
    axes[1].axhline(0, color="0.6", lw=0.6)
    axes[1].set(title="largest-|λ| eigenvalue of H (power iteration)", ylabel="value")
    ax = axes[2]
    ax.errorbar(
        x,
        sharp["hessian_trace_init_scaled"],
        yerr=sharp["hessian_trace_init_scaled_se"],
        marker="o",
        capsize=3,
        color="C2",
    )
    ax.set(title="tr(D H D) = E[εᵀHε], D = init std (± SE over probes)", ylabel="value")
    for ax, gamma in zip(axes[3:], (small, large)):
        measured, predicted = sensitivity_vs_prediction(metrics, sharp, gamma)
        ax.errorbar(
            measured["budget"],
            measured["mean"],
            yerr=measured["std"],
            marker="o",
            capsize=3,
            label="measured (perturbation stage, mean ± sd over perturbation seeds)",
        )
        ax.errorbar(
            predicted["budget"],
            predicted["mean"],
            yerr=predicted["se"],
            marker="s",
            ls="--",
            capsize=3,
            label="quadratic: ½γ² tr(DHD) ± SE over probes",
        )
        ax.set(title=f"Δ log-ppl at γ = {gamma:g}", ylabel="Δ loss (nats)")
        ax.legend(fontsize=8)
    for ax in axes:
        token_axis(ax, ticks=x)
    fig.tight_layout()
    return save_figure(fig, stem, formats)
