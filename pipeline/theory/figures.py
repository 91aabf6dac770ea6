"""The theory stage's four figures, drawn from its metric rows."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.analysis.figure_registry import figure_names
from pipeline.analysis.style import save_figure, set_style

if TYPE_CHECKING:
    import pandas as pd

    from pipeline.theory.spectra import Array

FIGURE_STEMS = figure_names("theory")  # the registry (pipeline/analysis/figure_registry.py) declares them


def unpack_extra(df: pd.DataFrame) -> pd.DataFrame:
    """Unpack the JSON `extra` keys used for selection (estimator, init) into columns."""
    ex = df["extra"].map(lambda s: json.loads(s) if isinstance(s, str) else {})
    return df.assign(
        estimator=ex.map(lambda e: e.get("estimator", "")), init=ex.map(lambda e: e.get("init", ""))
    )


def _sel(df: pd.DataFrame, **eq: Any) -> pd.DataFrame:
    """Rows whose columns equal the given values."""
    mask = np.ones(len(df), dtype=bool)
    for col, val in eq.items():
        mask &= (df[col] == val).to_numpy()
    return df[mask]


def _spread(df: pd.DataFrame, by: str) -> pd.DataFrame:
    """mean, and distances to min / max (for error bars) of `value` per `by`."""
    a = df.groupby(by)["value"].agg(["mean", "min", "max"])
    return a.assign(lo=a["mean"] - a["min"], hi=a["max"] - a["mean"])


def plot_theory(
    df: pd.DataFrame, figures_dir: str | Path, formats: Iterable[str] = ("png", "pdf")
) -> list[Path]:
    """The four theory figures from the stage's rows (means over seeds; bars = min..max over seeds)."""
    import matplotlib.pyplot as plt

    set_style()
    figures_dir = Path(figures_dir)
    df = unpack_extra(df[df["source"] == "theory"])
    paths: list[Path] = []
    star = dict(marker="*", ms=13, mec="k", zorder=5)

    # 1. perturbed loss vs n per γ, predicted inflection marked
    g = df[df["modification"] == "gaussian"]
    ckpts = sorted(g["checkpoint"].unique())
    fig, axes = plt.subplots(1, len(ckpts), figsize=(5.2 * len(ckpts), 4.2), squeeze=False)
    for ax, ck in zip(axes[0], ckpts):
        gc = g[g["checkpoint"] == ck]
        gammas = sorted(gc["gamma"].unique())
        for col, gam in zip(plt.cm.viridis(np.linspace(0, 0.9, len(gammas))), gammas):
            cf = (
                _sel(gc, metric="loss", gamma=gam, estimator="closed_form", init="real")
                .groupby("budget")["value"]
                .mean()
            )
            mc = _spread(_sel(gc, metric="loss", gamma=gam, estimator="monte_carlo"), "budget")
            ax.plot(cf.index, cf.values, color=col, label=f"γ={gam:g}")
            ax.errorbar(mc.index, mc["mean"], yerr=[mc["lo"], mc["hi"]], fmt="o", ms=3, color=col, alpha=0.7)
            r = _sel(gc, metric="predicted_inflection_n", gamma=gam)["value"]
            if len(r) and r.iloc[0] in cf.index:
                ax.plot([r.iloc[0]], [cf.loc[r.iloc[0]]], color=col, **star)
        ax.set(
            yscale="log",
            xlabel="learned features n (pre-training time t_n)",
            ylabel="E L_pre after Gaussian perturbation",
            title=ck,
        )
    axes[0][-1].legend(
        fontsize=7,
        ncol=2,
        title="line: closed form, dots: MC (bars: min–max over seeds)\n★: predicted inflection",
        title_fontsize=7,
    )
    paths += save_figure(fig, figures_dir / FIGURE_STEMS[0], formats)

    f = df[df["modification"] == "sft"]
    tasks = sorted(f["task"].dropna().unique())
    nt = max(len(tasks), 1)

    def lam_colors(lams: list[float]) -> Array:
        return plt.cm.plasma(np.linspace(0, 0.85, len(lams)))

    # 2. Δ_pre vs n per λ
    fig, axes = plt.subplots(1, nt, figsize=(5.4 * nt, 4.2), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        ft = _sel(f, task=task, metric="delta_pre")
        lams = sorted(ft["lambda_reg"].dropna().unique())
        for col, lam in zip(lam_colors(lams), lams):
            sim = _spread(_sel(ft, lambda_reg=lam, estimator="simulation"), "budget")
            cf = _sel(ft, lambda_reg=lam, estimator="closed_form").groupby("budget")["value"].mean()
            ax.plot(cf.index, cf.values, color=col, ls="--", lw=1)
            ax.errorbar(
                sim.index,
                sim["mean"],
                yerr=[sim["lo"], sim["hi"]],
                fmt="o-",
                ms=3,
                color=col,
                label=f"λ={lam:g}",
            )
        ax.set(
            yscale="log",
            xlabel="learned features n",
            ylabel="Δ_pre = L_pre(θ(t_n; K)) − L_pre(θ(t_n))",
            title=f"{task}: progressive sensitivity",
        )
        title = "solid: GD (bars: min–max over seeds)\ndashed: Lemma A.7"
        ax.legend(fontsize=7, title=title, title_fontsize=7)
    paths += save_figure(fig, figures_dir / FIGURE_STEMS[1], formats)

    # 3. pre-training loss after fine-tuning vs n per λ, simulated inflection r(λ) marked
    fig, axes = plt.subplots(1, nt, figsize=(5.4 * nt, 4.2), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        ft = _sel(f, task=task, metric="loss", eval_data="theory_pre")
        before = (
            _sel(df, modification="none", checkpoint=ft["checkpoint"].iloc[0], metric="loss", init="real")
            .groupby("budget")["value"]
            .mean()
        )
        ax.plot(before.index, before.values, color="k", lw=1.5, label="before fine-tuning")
        lams = sorted(ft["lambda_reg"].dropna().unique())
        for col, lam in zip(lam_colors(lams), lams):
            sim = _sel(ft, lambda_reg=lam, estimator="simulation").groupby("budget")["value"].mean()
            cf = _sel(ft, lambda_reg=lam, estimator="closed_form").groupby("budget")["value"].mean()
            ax.plot(sim.index, sim.values, "o-", ms=3, color=col, label=f"λ={lam:g}")
            ax.plot(cf.index, cf.values, ls="--", lw=1, color=col)
            r = _sel(f, task=task, metric="inflection_n", lambda_reg=lam)["value"].median()
            if np.isfinite(r) and r in sim.index:
                ax.plot([r], [sim.loc[r]], color=col, **star)
        ax.set(
            yscale="log",
            xlabel="learned features n",
            ylabel="L_pre after fine-tuning",
            title=f"{task}: catastrophic overtraining",
        )
        ax.set_ylim(bottom=ft["value"].min() / 5)  # the un-fine-tuned loss at n = d is ~0
        ax.legend(fontsize=7, title="★: inflection r(λ)", title_fontsize=7)
    paths += save_figure(fig, figures_dir / FIGURE_STEMS[2], formats)

    # 4. r(λ) and the unregularised fine-tuning loss vs λ
    fig, axes = plt.subplots(nt, 2, figsize=(10.5, 4.2 * nt), squeeze=False)
    for (ax_r, ax_l), task in zip(axes, tasks):
        ft = f[f["task"] == task]
        lams = sorted(ft["lambda_reg"].dropna().unique())
        infl = _sel(ft, metric="inflection_n")
        seeds = sorted(infl["seed"].dropna().unique())
        for k, sd in enumerate(seeds):  # small horizontal offsets keep coinciding seeds visible
            s_ = infl[infl["seed"] == sd].sort_values("lambda_reg")
            jitter = 0.04 * (k - (len(seeds) - 1) / 2)
            ax_r.plot(
                s_["lambda_reg"],
                s_["value"] + jitter,
                "o",
                ms=5,
                alpha=0.7,
                label="GD (per seed)" if k == 0 else None,
            )
        for est, ls, label in (("closed_form", "-", "Lemma A.7 (K steps)"), ("fixed_point", ":", "K → ∞")):
            p_ = _sel(ft, metric="predicted_inflection_n", estimator=est).sort_values("lambda_reg")
            ax_r.plot(p_["lambda_reg"], p_["value"], ls, color="k", label=label)
        ax_r.set(ylabel="inflection point r(λ)", title=f"{task}: regularisation delays the inflection")
        ax_r.legend(fontsize=7)
        lf = _sel(ft, metric="loss", eval_data="theory_ft")
        ns = sorted(lf["budget"].unique())
        for col, n in zip(plt.cm.viridis(np.linspace(0, 0.9, len(ns))), ns):
            sim = _sel(lf, budget=n, estimator="simulation").groupby("lambda_reg")["value"].mean()
            cf = _sel(lf, budget=n, estimator="closed_form").groupby("lambda_reg")["value"].mean()
            ax_l.plot(sim.index, sim.values, "o-", ms=3, color=col, label=f"n={n:g}")
            ax_l.plot(cf.index, cf.values, "--", lw=1, color=col)
        ax_l.set(ylabel="‖θ(t_n; K) − A_ft‖²", title="…at the cost of the fine-tuning loss")
        ax_l.legend(fontsize=7, ncol=2)
        for ax in (ax_r, ax_l):
            ax.set_xscale("symlog", linthresh=1.0)
            ax.set_xticks(lams, [f"{x:g}" for x in lams])
            ax.xaxis.set_minor_locator(plt.NullLocator())
            ax.set_xlabel("λ")
    paths += save_figure(fig, figures_dir / FIGURE_STEMS[3], formats)
    return paths
