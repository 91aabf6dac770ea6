"""Figures of the fine-tuning sweep: fixed learning rate (Figures 4, 5, 29), tuned learning
rate with the optimal LR vs tokens (Figures 6, 34), and weight distance vs LR (Figure 8)."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns

from pipeline.analysis.seeds import curve_bands
from pipeline.analysis.style import format_tokens, legend_below, save_figure, set_style, tuned_curve
from pipeline.analysis.sweep_figures import (
    band_note,
    band_plot,
    mark_inflections,
    reference_lines,
    token_axis,
)
from pipeline.analysis.verdicts import P_U

if TYPE_CHECKING:
    import pandas as pd

# What a band or bar covers, in the figures' legends (the captions, report/finetune_*.rst, say more).
SEED_BAND = "bars: ±1 sd over pre-training runs"
TUNED_BARS = "bars: ±1 sd over fine-tuning seeds at the tuned LR"


def _lr_palette(lrs: Iterable[float]) -> dict[float, tuple]:
    lrs = sorted(set(lrs))
    return dict(zip(lrs, sns.color_palette("viridis", len(lrs))))


def _base_line(ax: plt.Axes, base: pd.DataFrame, label: str = "base (not fine-tuned)") -> None:
    """The unmodified model's curve (the mean over pre-training seeds where a budget has several)."""
    b = base.groupby("budget")["value"].mean()
    ax.plot(b.index, b.to_numpy(), "k--", marker="s", ms=4, label=label)


def plottable_lrs(d: pd.DataFrame, max_pretrain_ppl: float | None) -> set[float]:
    """The paper's filter (Appendix C.1): LRs whose pre-training ppl stays below a bound at every budget."""
    lrs = set(d["learning_rate"])
    if max_pretrain_ppl is None:
        return lrs
    worst = d.groupby("learning_rate")["value"].max()
    return {lr for lr in lrs if worst.get(lr, np.inf) < max_pretrain_ppl}


def held_split(rows: pd.DataFrame, task: str) -> str:
    """The in-domain split the figures show: test, or validation for a task without one (LLaVA's
    held-out conversations; its test is the VLM benchmarks, pipeline/analysis/multimodal_figures.py)."""
    return "test" if ((rows["eval_data"] == task) & (rows["split"] == "test")).any() else "validation"


def plot_fixed_lr(
    d: pd.DataFrame,
    base: pd.DataFrame,
    inflection: pd.DataFrame,
    stem: str | Path,
    formats: Iterable[str],
    max_pretrain_ppl: float | None = None,
    reference: pd.DataFrame | None = None,
) -> list[Path]:
    """Per (model, task) row, vs tokens, one line per LR: Δ log pre-training ppl (progressive
    sensitivity: the base perplexity falls steeply over the smallest budgets, so the absolute Δ
    would fall with it), pre-training ppl (★ inflection), ID test ppl, and the absolute Δ ppl.

    d: analysis.deltas rows of the fine-tuned models (pre-training validation ppl and ID ppl);
    base: unmodified rows (pre-training and ID); inflection: analysis.inflection_table (★). Each line
    is the mean over pre-training seeds of each run's mean over fine-tuning seeds, with its 95% t-band
    over the pre-training seeds (analysis/seeds.py).
    """
    set_style()
    note = ""
    sft = d[d["modification"] == "sft"]
    pre = sft[sft["eval_data"] == "pretrain"]
    keys = sorted(pre.groupby(["model", "task"]).groups)
    fig, axes = plt.subplots(len(keys), 4, figsize=(21, 5.8 * len(keys)), squeeze=False, layout="constrained")
    for row, (model, task) in zip(axes, keys):
        p = pre[(pre["model"] == model) & (pre["task"] == task)]
        keep = plottable_lrs(p, max_pretrain_ppl)
        p = p[p["learning_rate"].isin(keep)]
        held = held_split(sft, task)
        idt = sft[
            (sft["model"] == model)
            & (sft["task"] == task)
            & (sft["eval_data"] == task)
            & (sft["split"] == held)
            & sft["learning_rate"].isin(keep)
        ]
        palette = _lr_palette(p["learning_rate"])
        lambdas = sorted(p["lambda_reg"].unique())
        styles = dict(zip(lambdas, ["-", "--", ":", "-."] * len(lambdas)))
        panels = (
            (row[0], p, "delta_log", "Δ log pre-training ppl  ln(fine-tuned / base)"),
            (row[1], p, "value", "pre-training ppl after fine-tuning"),
            (row[2], idt, "value", f"{task} {held} ppl after fine-tuning"),
            (row[3], p, "delta", "Δ pre-training ppl (fine-tuned − base)"),
        )
        for ax, data, col, ylabel in panels:
            if data.empty:
                continue
            for lam, at in data.groupby("lambda_reg", sort=True):
                bands = curve_bands(at, ["learning_rate"], col)
                suffix = f", λ = {lam:g}" if len(lambdas) > 1 else ""
                band_plot(ax, bands, "learning_rate", palette, ax is row[1], styles[lam], suffix)
                note = band_note(bands, "fine-tuning")
            token_axis(ax, ticks=data["budget"])
            ax.set_ylabel(ylabel)
        bm = base[(base["model"] == model) & (base["modification"] == "none")]
        _base_line(row[1], bm[(bm["eval_data"] == "pretrain") & (bm["split"] == p["split"].iloc[0])])
        reference_lines(row[1], reference)
        _base_line(
            row[2], bm[(bm["eval_data"] == task) & (bm["split"] == held)]
        )  # means over pre-training seeds
        for ax in row[1:3]:
            ax.set_yscale("log")
        im = inflection[
            (inflection["model"] == model)
            & (inflection["task"] == task)
            & (inflection["eval_data"] == "pretrain")
            & inflection["learning_rate"].isin(keep)
        ]
        settings = sft[sft["eval_data"] == "pretrain"].groupby(["task", "learning_rate"]).ngroups
        mark_inflections(row[1], im, p, "learning_rate", palette, 1 - (1 - P_U) / max(settings, 1))
        row[0].set_title(f"{model} · {task}: progressive sensitivity")
        row[1].set_title(f"{model} · {task}: pre-training ppl (★ inflection)")
        row[2].set_title(f"{model} · {task}: in-domain ppl")
        row[3].set_title(f"{model} · {task}: absolute Δ pre-training ppl")
        legend_below(row[1], f"fine-tuning LR\n({note})")
    return save_figure(fig, stem, formats)


def plot_tuned(
    tuned: pd.DataFrame,
    optimal: pd.DataFrame,
    stem: str | Path,
    formats: Iterable[str],
    reference: pd.DataFrame | None = None,
    scenarios: dict[str, str] | None = None,
) -> list[Path]:
    """Per (model, task): pre-training and ID test ppl at the tuned LR vs tokens (± sd over seeds), and
    the optimal LR, titled with the task's Figure 7 scenario as the registered claims decide it
    (`scenarios`: task -> stats.figure7_scenario; none given, none drawn)."""
    set_style()
    keys = sorted(tuned.groupby(["model", "task"]).groups)
    fig, axes = plt.subplots(len(keys), 3, figsize=(16, 6.2 * len(keys)), squeeze=False, layout="constrained")
    for row, (model, task) in zip(axes, keys):
        t = tuned[(tuned["model"] == model) & (tuned["task"] == task)]
        o = optimal[(optimal["model"] == model) & (optimal["task"] == task)]
        held = held_split(t, task)
        for ax, (eval_data, split, quantity) in zip(
            row[:2], (("pretrain", None, "pre-training ppl"), (task, held, f"{task} {held} ppl"))
        ):
            c = t[
                (t["eval_data"] == eval_data)
                & (t["metric"] == "ppl")
                & ((t["split"] == split) if split else True)
            ]
            bars = TUNED_BARS
            for (method, lam), g in c.groupby(["modification", "lambda_reg"]):
                bars = tuned_curve(ax, g, label=f"tuned LR ({method}, λ = {lam:g})")
            base = (
                c.drop_duplicates(["checkpoint"]).groupby("budget")["base"].mean()
            )  # over pre-training seeds
            ax.plot(base.index, base.to_numpy(), "k--", marker="s", ms=4, label="base (not fine-tuned)")
            if eval_data == "pretrain":
                reference_lines(ax, reference)
            column = "pretrain_inflection" if eval_data == "pretrain" else "id_inflection"
            for method, g in o.dropna(subset=[column]).groupby("modification"):  # one per pre-training seed
                at = ", ".join(format_tokens(x) for x in g[column])
                of = f"{method}: {at} tokens" if len(g) == 1 else f"{method}; per pre-training seed: {at}"
                for i, x in enumerate(g[column]):
                    label = f"inflection ({of})" if i == 0 else None
                    ax.axvline(x, color="0.4", ls=":", lw=1.2, label=label)
            token_axis(ax, ticks=c["budget"])
            ax.set_yscale("log")  # the base model's ID ppl can be orders of magnitude above the tuned
            ax.set_ylabel(f"{quantity} at the tuned LR")
            legend_below(ax, bars)
        for _, r in o.iterrows():
            seed = r.get("pretrain_seed")
            of_seed = "" if seed is None or seed != seed else f", pre-training seed {int(seed)}"
            (line,) = row[2].plot(
                r["budgets"],
                r["optimal_lrs"],
                "o-",
                label=f"{r['modification']}, λ = {r['lambda_reg']:g}{of_seed} (slope {r['lr_slope']:.2f})",
            )
            edge = np.asarray(r["lr_at_edge"], bool)
            if edge.any():  # the optimum may lie outside what was run there
                labelled = "at the grid's edge" in row[2].get_legend_handles_labels()[1]
                row[2].plot(
                    np.asarray(r["budgets"])[edge],
                    np.asarray(r["optimal_lrs"])[edge],
                    "x",
                    ms=11,
                    color=line.get_color(),
                    label=None if labelled else "at the grid's edge",
                )
        row[2].set_yscale("log")
        token_axis(row[2], ticks=t["budget"])
        row[2].set_ylabel("optimal learning rate (best ID validation ppl)")
        legend_below(row[2])
        row[0].set_title(f"{model} · {task}: pre-training ppl, tuned LR")
        row[1].set_title(f"{model} · {task}: in-domain ppl, tuned LR")
        scenario = (scenarios or {}).get(task)
        wrapped = f"\n{textwrap.fill(scenario, 70)}" if scenario else ""
        row[2].set_title(f"{model} · {task}: optimal LR vs tokens{wrapped}", fontsize=9)
    return save_figure(fig, stem, formats)


def plot_distance(metrics: pd.DataFrame, stem: str | Path, formats: Iterable[str]) -> list[Path]:
    """‖θ_ft − θ_pre‖₂ vs learning rate, one line per pre-training budget (every budget in the legend),
    per (model, task) (log-log): the mean over the pre-training runs of each run's mean over its
    fine-tuning seeds, bars ±1 sd over the runs."""
    set_style()
    dist = metrics[(metrics["modification"] == "sft") & (metrics["metric"] == "distance_l2")]
    keys = sorted(dist.groupby(["model", "task"]).groups)
    fig, axes = plt.subplots(
        1, len(keys), figsize=(5.5 * len(keys), 4.3), squeeze=False, layout="constrained"
    )
    for ax, (model, task) in zip(axes[0], keys):
        d = dist[
            (dist["model"] == model)
            & (dist["task"] == task)
            & (dist["lambda_reg"] == dist["lambda_reg"].min())
        ]
        runs = (
            d.groupby(["budget", "learning_rate", "pretrain_seed"], dropna=False)["value"]
            .mean()
            .reset_index()
        )
        budgets = sorted(runs["budget"].unique())
        colors = sns.color_palette("viridis", len(budgets))
        for color, b in zip(colors, budgets):
            at = runs[runs["budget"] == b].groupby("learning_rate")["value"].agg(["mean", "std"])
            ax.errorbar(at.index, at["mean"], yerr=at["std"].fillna(0.0), color=color, marker="o", ms=4,
                        capsize=2, label=format_tokens(float(b)))  # fmt: skip
        ax.set_xscale("log")
        ax.set_yscale("log")
        lrs = np.array(sorted(d["learning_rate"].unique()))
        ref = d[d["learning_rate"] == lrs[0]]["value"].mean()
        ax.plot(lrs, ref * lrs / lrs[0], "k:", label="∝ learning rate")
        ax.xaxis.set_major_locator(plt.FixedLocator(lrs))  # the rates run, no overlapping decade ticks
        ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.legend(title=f"pre-training tokens\n({SEED_BAND})", fontsize=8, title_fontsize=8, ncols=2)
        ax.set_xlabel("fine-tuning learning rate")
        ax.set_ylabel("‖θ_ft − θ_pre‖₂")
        ax.set_title(f"{model} · {task}: distance vs LR")
    return save_figure(fig, stem, formats)
