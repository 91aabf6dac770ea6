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

from pipeline.analysis.seeds import curve_bands, seeds_covered
from pipeline.analysis.style import format_tokens, plain_log_ticks, save_figure, set_style
from pipeline.analysis.verdicts import P_U

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


def reference_lines(ax: plt.Axes, reference: pd.DataFrame | None) -> None:
    """A pre-training-perplexity panel's floor and ceiling of meaning (data/reference_ppl.parquet):
    the unigram model of the training targets (a model above it has lost all context) and a
    uniform guess over the vocabulary; none where the study has no such table (hub checkpoints)."""
    if reference is None or reference.empty:
        return
    r = reference[reference["eval_data"] == "pretrain"].iloc[0]
    ax.axhline(r["unigram_ppl"], color="0.45", ls="-.", lw=1, label=f"unigram model ({r['unigram_ppl']:.0f})")
    ax.axhline(r["uniform_ppl"], color="0.45", ls=":", lw=1, label=f"uniform guess ({r['uniform_ppl']:.0f})")


def mark_inflections(
    ax: plt.Axes, inflection: pd.DataFrame, curves: pd.DataFrame, hue: str, palette: dict, level: float = P_U
) -> None:
    """Each setting's Definition 4.2 inflection budget on its curve (rows of analysis.inflection_table;
    curves: rows with columns `hue`, budget, mean): a ★ where the U-shape test clears its level
    (P(U) > `level`: the claim's, Bonferroni over its settings where it has several), elsewhere an
    open circle labelled with its P(U)."""
    for _, r in inflection[np.isfinite(inflection["inflection_budget"])].iterrows():
        at_inflection = curves[(curves[hue] == r[hue]) & (curves["budget"] == r["inflection_budget"])]
        y = at_inflection["mean" if "mean" in at_inflection else "value"].mean()
        if r["p_u"] > level:
            ax.plot(r["inflection_budget"], y, marker="*", ms=16, color=palette[r[hue]], mec="k", zorder=5)
            continue
        ax.plot(r["inflection_budget"], y, marker="o", ms=10, mfc="none", mec=palette[r[hue]], zorder=5)
        p_u = "–" if not np.isfinite(r["p_u"]) else f"{r['p_u']:.2f}"
        ax.annotate(f"P(U) {p_u}", (r["inflection_budget"], y), xytext=(4, 6), textcoords="offset points",
                    fontsize=7, color=palette[r[hue]])  # fmt: skip


def band_plot(
    ax: plt.Axes, bands: pd.DataFrame, hue: str, palette: dict, legend: bool, ls: str = "-", suffix: str = ""
) -> None:
    """Each setting's run-mean curve with its 95% t-band over pre-training seeds (seeds.curve_bands)."""
    for h, b in bands.groupby(hue, sort=True):
        b = b.sort_values("budget")
        label = f"{h:g}{suffix}" if legend else None
        ax.plot(b["budget"], b["mean"], marker="o", ls=ls, color=palette[h], ms=4, label=label)
        ax.fill_between(b["budget"], b["low"], b["high"], color=palette[h], alpha=0.2, lw=0)


def band_note(bands: pd.DataFrame, inner: str) -> str:
    """What the bands cover, for a legend title (seeds.seeds_covered)."""
    return seeds_covered(int(bands["n_pretrain_seeds"].max()), int(bands["n_seeds"].max()), inner)


def plot_progressive_sensitivity(
    d: pd.DataFrame,
    base: pd.DataFrame,
    inflection: pd.DataFrame,
    stem: str | Path,
    formats: Iterable[str],
    reference: pd.DataFrame | None = None,
) -> list[Path]:
    """Per model row: Δppl, Δ log-ppl and absolute perturbed ppl vs tokens, one line per γ, each the
    mean over pre-training seeds of each run's mean over perturbation seeds with a 95% t-band over the
    pre-training seeds (analysis/seeds.py).

    d: output of analysis.deltas for the Gaussian rows; base: the unmodified rows (metric ppl);
    inflection: analysis.inflection_table (its Definition 4.2 point marked as stars on the absolute
    panel).
    """
    set_style()
    models = sorted(d["model"].unique())
    gammas = sorted(d["gamma"].unique())
    palette = dict(zip(gammas, sns.color_palette("viridis", len(gammas))))
    fig, axes = plt.subplots(
        len(models), 3, figsize=(15, 4.2 * len(models)), squeeze=False, layout="constrained"
    )
    for row, model in zip(axes, models):
        dm = d[d["model"] == model]
        for ax, col, ylabel in (
            (row[0], "delta", "Δ perplexity (perturbed − base)"),
            (row[1], "delta_log", "Δ log-perplexity  ln(perturbed / base)"),
            (row[2], "value", "perplexity after perturbation"),
        ):
            bands = curve_bands(dm, ["gamma"], col)
            band_plot(ax, bands, "gamma", palette, legend=ax is row[2])
            token_axis(ax, ticks=dm["budget"])
            ax.set_ylabel(ylabel)
        bm = curve_bands(base[base["model"] == model].assign(seed=None), ["model"], "value")
        row[2].plot(bm["budget"], bm["mean"], "k--", marker="s", label="base (γ = 0)")
        row[2].fill_between(bm["budget"], bm["low"], bm["high"], color="k", alpha=0.1, lw=0)
        reference_lines(row[2], reference)
        row[2].set_yscale("log")
        plain_log_ticks(row[2].yaxis)
        mark_inflections(row[2], inflection[inflection["model"] == model], bands, "gamma", palette)
        row[0].set_title(f"{model}: progressive sensitivity")
        row[1].set_title(f"{model}: relative degradation")
        row[2].set_title(f"{model}: catastrophic overtraining (★ Definition 4.2)")
        row[2].legend(
            title=f"γ (× init std)\n{band_note(bands, 'perturbation')}",
            fontsize=8,
            title_fontsize=8,
            loc="upper left",
            bbox_to_anchor=(1.02, 1.0),
        )
    return save_figure(fig, stem, formats)


def plot_inflection(
    inflection: pd.DataFrame, stem: str | Path, formats: Iterable[str], level: float = P_U
) -> list[Path]:
    """Per model and γ: the U-shape detector's minimum of the perturbed perplexity, with its 95%
    interval (an open end drawn to the sweep's edge with an arrow) where P(U) clears `level`, else an
    open marker with its P(U) and no interval (figure_registry.MINIMUM); and Definition 4.2's
    inflection budget (○, a grid point); γ without a Definition 4.2 inflection drawn as ▲."""
    set_style()
    fig, ax = plt.subplots(figsize=(7, 6), layout="constrained")
    for model, color in zip(sorted(inflection["model"].unique()), sns.color_palette("deep")):
        m = inflection[inflection["model"] == model].sort_values("gamma")
        lo_edge, hi_edge = float(m["min_budget"].min()), float(m["max_budget"].max())
        fitted = m[np.isfinite(m["u_min_tokens"])]
        established = fitted[fitted["p_u"] > level]
        for _, r in established.iterrows():
            lo = r["u_min_low"] if r["u_min_low"] > 0 else lo_edge
            hi = r["u_min_high"] if np.isfinite(r["u_min_high"]) else hi_edge
            ax.plot([r["gamma"], r["gamma"]], [lo, hi], color=color, lw=2, alpha=0.6)
            for end, open_ in ((lo, r["u_min_low"] <= 0), (hi, not np.isfinite(r["u_min_high"]))):
                ax.plot(r["gamma"], end, marker="^" if end == hi else "v", color=color, ms=6 if open_ else 0)
        if len(established):
            ax.plot(established["gamma"], established["u_min_tokens"], "D", color=color,
                    label=f"{model}: U fit's minimum, 95% interval (P(U) > {level})")  # fmt: skip
        not_established = fitted[~(fitted["p_u"] > level)]
        if len(not_established):
            ax.plot(not_established["gamma"], not_established["u_min_tokens"], "D", mfc="none", color=color,
                    label=f"{model}: P(U) ≤ {level}: no minimum established")  # fmt: skip
        for _, r in not_established.iterrows():
            p_u = "–" if not np.isfinite(r["p_u"]) else f"{r['p_u']:.2f}"
            ax.annotate(f"P(U) {p_u}", (r["gamma"], r["u_min_tokens"]), textcoords="offset points",
                        xytext=(4, 4), fontsize=7, color=color)  # fmt: skip
        ok = m[np.isfinite(m["inflection_budget"])]
        ax.plot(
            ok["gamma"],
            ok["inflection_budget"],
            "o",
            mfc="none",
            color=color,
            ms=9,
            label=f"{model}: Definition 4.2",
        )
        none = m[~np.isfinite(m["inflection_budget"])]
        if len(none):
            edge = format_tokens(none["max_budget"].iloc[0])
            label = f"{model}: no Definition 4.2 inflection ≤ {edge}"
            ax.plot(none["gamma"], none["max_budget"] * 1.3, "^", color=color, ms=9, label=label)
    marked = np.concatenate(
        [inflection["max_budget"], inflection["min_budget"], inflection["inflection_budget"].dropna()]
    )
    token_axis(ax, "minimum / inflection (pre-training tokens)", ticks=np.unique(marked), axis="y")
    ax.set_xticks(sorted(inflection["gamma"].unique()))
    ax.set_xlabel("perturbation scale γ (× init std)")
    ax.set_title("Where the perturbed perplexity turns up")
    runs = f"{int(inflection['n_pretrain_seeds'].max())} pre-training seeds" if len(inflection) else ""
    ax.legend(fontsize=8, title=f"minima over the runs of {runs} (a run: its perturbation seeds averaged)",
              title_fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)  # fmt: skip
    return save_figure(fig, stem, formats)


def plot_loss_curves(
    curves: pd.DataFrame, runs: pd.DataFrame, stem: str | Path, formats: Iterable[str]
) -> list[Path]:
    """Left: the training loss of every pre-training run against tokens seen (a colour per budget, a
    line style per pre-training seed). Right: each run's epochs over the training split against its
    budget, the one-epoch line dashed; a run past it repeats data (pretrain.allow_repeat) and is
    marked ✕ in red, its loss curve dotted."""
    set_style()
    fig, (ax, ax_ep) = plt.subplots(1, 2, figsize=(13, 4.5), gridspec_kw={"width_ratios": [1.6, 1]})
    budgets = sorted(runs["budget"].unique())
    palette = dict(zip(budgets, sns.color_palette("viridis", len(budgets))))
    seeds = sorted(runs["pretrain_seed"].unique())
    styles = dict(zip(seeds, ["-", "--", "-.", (0, (5, 1, 1, 1)), (0, (3, 1))] * len(seeds)))
    repeated = set(runs.loc[runs["epochs"] > 1, ["model", "pretrain_seed", "budget"]].itertuples(index=False))
    for (model, seed, budget), c in curves.groupby(["model", "pretrain_seed", "budget"], sort=True):
        ls = ":" if (model, seed, budget) in repeated else styles[seed]
        ax.plot(c["tokens"], c["loss"], color=palette[budget], ls=ls, lw=0.8)
    for b in budgets:
        ax.plot([], [], color=palette[b], label=format_tokens(b))
    ax.legend(title="budget (line style: pre-training seed)", fontsize=8, ncol=2)
    token_axis(ax, "tokens seen")
    ax.set_ylabel("training loss (nats/token)")
    ax.set_title("Pre-training loss curves")
    fresh = runs[runs["epochs"] <= 1]
    ax_ep.plot(fresh["budget"], fresh["epochs"], "o", color="C0", label="≤ 1 epoch (no token seen twice)")
    again = runs[runs["epochs"] > 1]
    if len(again):
        ax_ep.plot(again["budget"], again["epochs"], "x", color="red", ms=9, mew=2, label="repeated data")
    ax_ep.axhline(1.0, color="k", ls="--", lw=1, label="one epoch")
    token_axis(ax_ep, ticks=budgets)
    ax_ep.set_ylabel("epochs over the training split")
    ax_ep.set_ylim(0, max(1.1, float(runs["epochs"].max()) * 1.1))
    ax_ep.set_title("Data per run")
    ax_ep.legend(fontsize=8)
    return save_figure(fig, stem, formats)
