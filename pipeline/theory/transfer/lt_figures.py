"""The linear-teachers figures of the transfer stage (alignment, depth, frozen first layer) and the
one-layer vs two-layer bridge (pipeline/theory/transfer/figures.py lists them all)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pipeline.analysis.style import save_figure
from pipeline.theory.transfer.plots import METHOD_COLORS, angle_label, curve, errorbar, select

if TYPE_CHECKING:
    import pandas as pd


def plot_lt_alignment(df: pd.DataFrame, stem: Path, formats: Iterable[str]) -> list[Path]:
    """Depth-1 fine-tuning risk vs n, θ_T − θ_S in the covariance's bottom or top eigenspace (Fig. 1)."""
    import matplotlib.pyplot as plt

    a = select(df, experiment="lt_alignment")
    fig, ax = plt.subplots(figsize=(7, 4.8))
    styles = {
        "top_eigen_align": ("#1b9e77", "Top Eigen Align (Δ in the bottom span)"),
        "bottom_eigen_align": ("#d95f02", "Bottom Eigen Align (Δ in the top span)"),
        "isotropic": ("#7570b3", "isotropic Σ = I"),
    }
    for v, (col, label) in styles.items():
        part = select(a, variant=v)
        c = curve(part, "n", estimator="closed_form")
        ax.plot(c["n"], c["risk"], "-" if v == "isotropic" else "--", color=col, lw=1.3)
        errorbar(ax, curve(part, "n", estimator="simulation"), "n", color=col, label=label)
    d = int(a["d"].iloc[0])
    ax.set(yscale="log", xlabel=f"target samples n (d = {d})", ylabel="E R of depth-1 fine-tuning")
    ax.set_title("Covariance alignment decides the sample complexity", fontsize=11)
    ax.legend(
        fontsize=8,
        title="dots: simulated ± SE; solid: exact,\ndashed: deterministic equivalent (n, d → ∞)",
        title_fontsize=7,
    )
    fig.tight_layout()
    return save_figure(fig, stem, formats)


def plot_lt_depth(df: pd.DataFrame, stem: Path, formats: Iterable[str]) -> list[Path]:
    """Risk vs ‖θ_T‖ per depth (their Fig. 2a) and gradient descent's O(η) gap to Thm 5.2."""
    import matplotlib.pyplot as plt

    g = select(df, experiment="lt_depth")
    risk = select(g, metric="risk")
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    depths = sorted(int(x) for x in risk["depth"].dropna().unique())
    colors = dict(zip([*depths, None], plt.cm.viridis(np.linspace(0.0, 0.85, len(depths) + 1))))
    for L in [*depths, None]:
        col = colors[L]
        part = select(risk, depth=L) if L is not None else select(risk, variant="depth_infinity")
        label = f"L = {L}" if L is not None else "L → ∞ (eq. 6)"
        c = curve(part, "target_norm", estimator="closed_form")
        ax.plot(c["target_norm"], c["risk"], "-" if L == 1 else "--", color=col, lw=1.2)
        errorbar(
            ax,
            curve(part, "target_norm", solver="limit_point"),
            "target_norm",
            color=col,
            label=label,
            fmt="x",
        )
        errorbar(
            ax,
            curve(part, "target_norm", solver="gradient_descent"),
            "target_norm",
            fmt="s",
            mfc="none",
            ms=7,
            color=col,
        )
        errorbar(ax, curve(part, "target_norm", solver="linear_algebra"), "target_norm", color=col)
    n, d, th = int(g["n"].iloc[0]), int(g["d"].iloc[0]), float(g["theta"].iloc[0])
    ax.set(xscale="log", yscale="log", xlabel="target norm ‖θ_T‖ (‖θ_S‖ = 1)", ylabel="E R after fine-tuning")
    ax.set_title(f"(a) depth helps when the tasks are aligned: n = {n}, d = {d}, θ = {th:g}")
    ax.legend(
        fontsize=8,
        title="×: Thm 5.2 per draw, □: GD, ●: depth-1 algebra\nsolid: exact (L = 1), dashed: n, d → ∞",
        title_fontsize=7,
    )

    rho = np.sort(risk["target_norm"].dropna().unique())
    ax.set_xticks(rho, [f"{r:g}" for r in rho])
    ax.xaxis.set_minor_locator(plt.NullLocator())

    gap = select(g, metric="theorem_gap")
    for L in sorted(int(x) for x in gap["depth"].unique()):
        c = curve(gap, "lr", depth=L)
        ratios = c["risk"].to_numpy()[1:] / c["risk"].to_numpy()[:-1]  # gap(2η)/gap(η), ≈ 2 for O(η)
        label = f"L = {L}: gap(2η)/gap(η) = " + ", ".join(f"{r:.2f}" for r in ratios)
        ax2.errorbar(
            c["lr"], c["risk"], yerr=c["risk_se"], fmt="o-", ms=5, capsize=2, color=colors.get(L), label=label
        )
    if len(gap):
        x = np.array([gap["lr"].min(), gap["lr"].max()])
        y0 = float(gap["risk"].min())
        ax2.plot(x, y0 * x / x[0], "k:", lw=1, label="slope 1 (O(η))")
    ax2.set(xscale="log", yscale="log", xlabel="step size η", ylabel="mean ‖β_GD − β∞(Thm 5.2)‖")
    etas = np.sort(gap["lr"].unique())
    ax2.set_xticks(etas, [f"{e:.2g}" for e in etas])
    ax2.xaxis.set_minor_locator(plt.NullLocator())
    ax2.set_title("(b) gradient descent vs the gradient-flow theorem")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, stem, formats)


def plot_lt_frozen(df: pd.DataFrame, stem: Path, formats: Iterable[str]) -> list[Path]:
    """Scratch vs fine-tuning vs fine-tuning with the first layer frozen, risk vs n (their Fig. 3)."""
    import matplotlib.pyplot as plt

    f = select(df, experiment="lt_frozen")
    L = int(f["depth"].max())
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    series = (
        ("scratch", L, "vanilla (scratch, small init)"),
        ("finetune", L, f"fine-tune, depth {L}"),
        ("finetune_frozen_first", L, "fine-tune, first layer frozen"),
        ("finetune", 1, "fine-tune, depth 1"),
    )
    for method, depth, label in series:
        part = select(f, method=method, depth=depth)
        col = METHOD_COLORS[method] if depth > 1 else "#ff7f0e"
        c = curve(part, "n", estimator="closed_form")
        ax.plot(c["n"], c["risk"], "-" if (c["limit"] == "exact").all() else "--", color=col, lw=1.2)
        solver = "gradient_descent" if depth > 1 else "linear_algebra"
        rows = curve(part, "n", solver=solver)
        if depth == 1:
            errorbar(ax, rows, "n", color=col, label=label, fmt="o")
        else:
            errorbar(ax, rows, "n", fmt="s", mfc="none", ms=8, color=col, label=label)
    d, th = int(f["d"].iloc[0]), float(f["theta"].iloc[0])
    ax.set(xlabel=f"target samples n (d = {d})", ylabel="E R", ylim=(0, None))
    ax.set_title(f"A frozen first layer cannot learn the target (θ = {angle_label(th)})")
    ax.legend(
        fontsize=8,
        title="□: GD ± SE, ●: depth-1 algebra; solid: exact, dashed: n, d → ∞\n"
        "(unit teachers: depth 2 ≈ depth 1)",
        title_fontsize=7,
    )
    fig.tight_layout()
    return save_figure(fig, stem, formats)


# ---------------------------------------------------------------------------------------- the bridge


def plot_overtraining(df: pd.DataFrame, stem: Path, formats: Iterable[str]) -> list[Path]:
    """Pre-training loss after fine-tuning vs pre-training time: one layer vs the Section 4 network."""
    import matplotlib.pyplot as plt

    o = select(df, experiment="overtraining")
    fig, axes = plt.subplots(1, 2, figsize=(14, 5))
    seeds = sorted(int(s) for s in o["seed"].dropna().unique())
    one, two, ref = "#1f77b4", "#d62728", "0.55"
    for ax, variant in zip(axes, ("converged", "population_steps")):
        for k, sd in enumerate(seeds):
            lab = k == 0
            pre = curve(o, "pretrain_time", variant="before_finetuning", seed=sd)
            ax.plot(
                pre["pretrain_time"],
                pre["risk"],
                color=ref,
                lw=1,
                label="L_pre before fine-tuning" if lab else None,
            )
            c1 = curve(
                o, "pretrain_time", variant=variant, depth=1, estimator="closed_form", features=None, seed=sd
            )
            ax.plot(
                c1["pretrain_time"], c1["risk"], color=one, lw=1.4, label="one layer: exact" if lab else None
            )
            at_n = curve(o, "pretrain_time", variant=variant, depth=2, estimator="closed_form", seed=sd)
            if len(at_n):
                ax.plot(
                    at_n["pretrain_time"],
                    at_n["risk"],
                    "--",
                    color=two,
                    lw=1.2,
                    label="two layers: Lemma A.7" if lab else None,
                )
            for depth, col, solver, mk in (
                (1, one, "linear_algebra", "o"),
                (2, two, "gradient_descent", "s"),
            ):
                s = curve(
                    o,
                    "pretrain_time",
                    variant=variant,
                    depth=depth,
                    estimator="simulation",
                    solver=solver,
                    seed=sd,
                )
                if len(s):
                    yerr = s["risk_se"] if s["risk_se"].notna().any() else None
                    ax.errorbar(
                        s["pretrain_time"],
                        s["risk"],
                        yerr=yerr,
                        fmt=mk,
                        ms=5,
                        mfc="none" if depth == 2 else col,
                        capsize=2,
                        color=col,
                        label=(f"{'one layer' if depth == 1 else 'two layers'}: simulated" if lab else None),
                    )
        ax.set(
            xscale="log",
            xlabel="pre-training time t (markers: t_n, n features learned)",
            ylabel="L_pre after fine-tuning",
        )
        t_first = float(select(o, variant=variant)["pretrain_time"].dropna().loc[lambda t: t > 0].min())
        ax.set_xlim(max(t_first, 3.0), None)
        m = o["n"].dropna()
        if variant == "converged":
            ax.set_title(f"(a) fine-tuned to convergence on m = {int(m.iloc[0])} < d samples")
        else:
            first = select(o, variant=variant)
            eta, K = float(first["lr"].dropna().iloc[0]), int(first["steps"].dropna().iloc[0])
            ax.set_title(f"(b) K = {K} population-gradient steps, η = {eta:g} (Section 4)")
        ax.legend(fontsize=8, loc="best")
        ax.set_ylim(bottom=0)
    fig.tight_layout()
    return save_figure(fig, stem, formats)
