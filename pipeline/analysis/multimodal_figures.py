"""LLaVA across the pre-training sweep (the paper's Figure 2, right, and Figures 23-28): the VLM score
and its five parts (in-domain), each out-of-domain benchmark of the language model after stage 2
and its pre-training perplexity, against pre-training tokens. Per panel: the tuned learning rate
(on `finetune.select_metric`, the VLM score in the paper) solid with bars ±1 sd over stage-2 seeds,
every learning rate thin, the base model dashed (the VLM panels: the stage-1 model, the checkpoint
with a trained projector; the others: the unmodified checkpoint). The held-out conversations' loss
beside the same loss with each conversation shown another's image says how much stage 2 reads the
image. Grey reference lines: where the data knows its chance levels (the toy), the VLM panels'
uniform guessing and best constant answer per question type; each benchmark's chance accuracy; and,
given the vocabulary size V, a uniform guess over it on the loss (ln V nats) and perplexity (V)
panels. The benchmark panels shade ±1 lm-eval standard error over the benchmark's items."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt

from pipeline.analysis.benchmark_figures import (
    PREFIX,
    SE_BAND,
    STDERR,
    benchmark_scores,
    chance_line,
    se_band,
    tuned_se_band,
    with_stderr,
)
from pipeline.analysis.stats import finetuned
from pipeline.analysis.style import save_figure, set_style, tuned_curve
from pipeline.analysis.sweep_figures import token_axis
from pipeline.multimodal.config import VLM_TASKS
from pipeline.multimodal.vlm_eval import SCORE, SPLIT, VLM

if TYPE_CHECKING:
    import pandas as pd

VLM_PARTS = ("mme", "gqa", "ai2d", "pope", "textvqa")
CHANCE_LINES = {"uniform": ("uniform guess", ":"), "best": ("best constant answer", "-.")}
SEED_BARS = "bars: ±1 sd over stage-2 seeds at the tuned LR"


def panels(metrics: pd.DataFrame) -> list[tuple[str, str, str | None, str]]:
    """(title, eval_data, split, metric) of each panel the study has rows for, in order."""
    out = [("VLM score", VLM, SPLIT, SCORE.metric)]
    out += [(f"{p.upper()} (VLM part)", VLM, SPLIT, f"vlm_{p}") for p in VLM_PARTS]
    for task in sorted(set(metrics["eval_data"].dropna()) & set(VLM_TASKS)):  # held-out conversations
        out.append((f"{task}: held-out conversation loss", task, "validation", "loss"))
        out.append((f"{task}: the same, each shown another's image", task, "validation", "loss_other_image"))
    scores = benchmark_scores(metrics)
    for bench in sorted(scores["benchmark"].unique()):
        first = scores[scores["benchmark"] == bench].iloc[0]
        out.append(
            (f"{bench} ({first['metric']}, out of domain)", PREFIX + bench, first["split"], first["metric"])
        )
    split = metrics.loc[metrics["eval_data"] == "pretrain", "split"].dropna()
    if len(split):
        out.append(("pre-training perplexity", "pretrain", split.iloc[0], "ppl"))
    return out


def _rows(df: pd.DataFrame, eval_data: str, split: str | None, metric: str) -> pd.DataFrame:
    m = (df["eval_data"] == eval_data) & (df["metric"] == metric)
    return df[m & (df["split"].isna() if split is None else df["split"] == split)]


def chance_value(chance: Mapping | None, level: str, metric: str) -> float | None:
    """The VLM score's or one part's (`vlm_<part>`) value at a chance level of the data, if known."""
    if not chance or level not in chance:
        return None
    if metric == SCORE.metric:
        return chance[level].get(SCORE.metric)
    return chance[level].get("vlm_parts", {}).get(metric.removeprefix("vlm_"))


def uniform_guess(metric: str, vocab_size: int | None) -> tuple[float, str] | None:
    """(value, label) of a uniform guess over the vocabulary on a perplexity (V) or loss (ln V nats)
    panel; None for another metric or an unknown vocabulary."""
    if vocab_size is None:
        return None
    if metric == "ppl":
        return float(vocab_size), f"uniform guess (ppl = V = {vocab_size})"
    if metric in ("loss", "loss_other_image"):
        ln_v = math.log(vocab_size)
        return ln_v, f"uniform guess (ln V = {ln_v:.2f} nats, V = {vocab_size})"
    return None


def plot_vlm(
    metrics: pd.DataFrame,
    tuned: pd.DataFrame,
    stem: str | Path,
    formats: Iterable[str],
    chance: Mapping | None = None,
    vocab_size: int | None = None,
) -> list[Path]:
    """The figure (module docstring) of every LLaVA task's runs at the smallest λ; `chance`: the
    data's chance levels (data.json's `chance`), None where unknown; `vocab_size`: the language
    model's vocabulary size V (the uniform-guess line on the loss and perplexity panels), None
    where unknown."""
    set_style()
    sft = finetuned(metrics)
    sft = sft[sft["task"].isin(VLM_TASKS)]
    if sft.empty:
        raise ValueError(f"no fine-tuning rows of a LLaVA task ({VLM_TASKS}) in the metrics table")
    lam = sft["lambda_reg"].min()
    sft = sft[sft["lambda_reg"] == lam]
    chosen = tuned[tuned["task"].isin(VLM_TASKS) & (tuned["lambda_reg"] == lam)]
    base = with_stderr(metrics[metrics["modification"] == "none"], metrics)  # `se`: a benchmark's stderr
    wanted = panels(metrics)
    ncols = 4
    nrows = -(-len(wanted) // ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(4.2 * ncols, 3.5 * nrows), squeeze=False, layout="constrained"
    )
    for ax, (title, eval_data, split, metric) in zip(axes.flat, wanted):
        runs = _rows(sft, eval_data, split, metric)
        for _, g in runs.groupby("learning_rate"):
            g = g.groupby("budget", as_index=False)["value"].mean().sort_values("budget")
            ax.plot(g["budget"], g["value"], "-", lw=0.8, alpha=0.4, color="tab:blue", label=None)
        benchmark = eval_data.removeprefix(PREFIX) if eval_data.startswith(PREFIX) else None
        best = _rows(chosen, eval_data, split, metric)
        if len(best):
            tuned_curve(ax, best, color="tab:blue", label="stage 2, tuned LR")
        b = _rows(base, eval_data, split, metric)
        if eval_data != VLM:  # the task's own base rows are the stage-1 model's: VLM panels only
            b = b[b["task"].isna()]
        b = b.groupby("budget", as_index=False)[["value", "se"]].mean().sort_values("budget")
        if len(b):
            label = "stage 1 (projector only)" if eval_data == VLM else "base (unmodified)"
            ax.plot(b["budget"], b["value"], "k--", marker="s", ms=4, label=label)
        if benchmark is not None:  # lm-eval's standard errors over the items, and chance accuracy
            tuned_se_band(ax, best, _rows(chosen, eval_data, split, metric + STDERR), color="tab:blue")
            se_band(ax, b, "value", "se", color="k")
            chance_line(ax, benchmark)
        for level, (label, style) in CHANCE_LINES.items():
            value = chance_value(chance, level, metric) if eval_data == VLM else None
            if value is not None:
                ax.axhline(value, color="0.5", ls=style, lw=1, label=label)
        uniform = uniform_guess(metric, vocab_size)
        if uniform is not None:
            ax.axhline(uniform[0], color="0.5", ls=":", lw=1, label=uniform[1])
        ticks = list(runs["budget"]) + list(b["budget"])
        if ticks:
            token_axis(ax, ticks=ticks)
        if metric == "ppl":
            ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(metric)
        ax.plot([], [], "-", lw=0.8, alpha=0.4, color="tab:blue", label="stage 2, every LR")
        ax.legend(fontsize=7, title=SEED_BARS + (f"\n{SE_BAND}" if benchmark else ""), title_fontsize=7)
    for ax in axes.flat[len(wanted) :]:
        ax.set_visible(False)
    fig.suptitle("LLaVA on every checkpoint: in-domain VLM score vs out-of-domain benchmarks")
    return save_figure(fig, stem, formats)
