"""The "Features are fate" figures of the transfer stage (pipeline/theory/transfer/figures.py lists
them all): scratch vs linear transfer over (n/d, θ), ridge transfer, fine-tuning, and the distance."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pipeline.analysis.style import save_figure
from pipeline.theory.transfer import features_are_fate as faf
from pipeline.theory.transfer import linear_teachers as lt
from pipeline.theory.transfer.plots import (
    HELPS,
    HURTS,
    METHOD_COLORS,
    angle_label,
    curve,
    errorbar,
    pivot,
    select,
    sign_cells,
    theta_axis,
)

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes


def plot_faf_linear(df: pd.DataFrame, stem: Path, formats: Iterable[str], sig_ref: float) -> list[Path]:
    """Linear transfer vs scratch: phase diagrams over (n/d, θ) and (θ, σ), slices, risks per method."""
    import matplotlib.pyplot as plt

    g = select(df, experiment="faf_grid")
    d = int(g["d"].iloc[0])
    ref = select(g, metric="transferability", method="linear_transfer")
    fig, axes = plt.subplots(2, 3, figsize=(17, 10.5))
    ns = np.sort(g["n"].unique())
    thetas = np.sort(g["theta"].unique())
    sigmas = np.sort(g["sigma"].unique())

    # (a) phase diagram over (γ, θ) at the reference noise
    ax = axes[0, 0]
    sim = pivot(select(ref, estimator="simulation", sigma=sig_ref), "theta", "n")
    sign_cells(ax, ns / d, thetas, sim.to_numpy(), 0.2, 0.2)
    gam = np.linspace(0.02, 2.0, 800)
    th_f = np.linspace(0, np.pi / 2, 400)
    G, TH = np.meshgrid(gam, th_f)
    T13 = faf.scratch_risk_asymptotic(G, sig_ref) - faf.linear_transfer_risk_asymptotic(TH)
    n_f = G * d
    with np.errstate(all="ignore"):
        Tex = faf.scratch_risk(n_f, d, sig_ref) - faf.linear_transfer_risk(n_f, TH, sig_ref)
    Tex = np.where(np.abs(n_f - d) < 1.5, np.nan, Tex)
    ax.contour(G, TH, T13, levels=[0], colors="#56b4e9", linewidths=2.2)
    ax.contour(G, TH, Tex, levels=[0], colors="k", linewidths=1.2, linestyles="--")
    ax.axvline(1.0, color="0.5", lw=0.8, ls=":")
    ax.set(xlim=(0.1, 2.05), ylim=(-0.07, np.pi / 2 + 0.07), xlabel="n / d", ylabel="θ (source-target angle)")
    theta_axis(ax)
    ax.set_title(f"(a) T_lt sign, σ = {sig_ref:g}: eq. 13 (blue) vs exact (dashed)")
    _phase_legend(ax)

    # (b), (c) phase diagrams over (θ, σ) at one γ < 1 and one γ > 1
    for ax, target in ((axes[0, 1], 0.5), (axes[0, 2], 1.6)):
        n = int(ns[np.argmin(np.abs(ns / d - target))])
        sim = pivot(select(ref, estimator="simulation", n=n), "sigma", "theta")
        sign_cells(ax, thetas, sigmas, sim.to_numpy(), 0.2, 0.2)
        th_line = np.linspace(0, np.pi / 2, 400)
        ax.plot(
            th_line,
            faf.linear_transfer_boundary_sigma(n / d, th_line),
            color="#56b4e9",
            lw=2.2,
            label="eq. 13",
        )
        ax.plot(
            th_line,
            faf.linear_transfer_boundary_sigma_exact(n, d, th_line),
            "k--",
            lw=1.2,
            label=f"exact, n = {n}",
        )
        ax.set(
            xlim=(-0.07, np.pi / 2 + 0.07),
            ylim=(-0.06, sigmas.max() + 0.06),
            xlabel="θ",
            ylabel="σ (label noise)",
        )
        theta_axis(ax, "x")
        ax.set_title(f"({'b' if target < 1 else 'c'}) T_lt sign at n/d = {n / d:g}: hurts below the line")
        ax.legend(loc="upper left", fontsize=8, framealpha=0.9)

    # (d) slices T_lt vs γ
    ax = axes[1, 0]
    colors = plt.cm.viridis(np.linspace(0.05, 0.85, 3))
    for col, th in zip(colors, (np.pi / 8, np.pi / 4, 3 * np.pi / 8)):
        th = float(thetas[np.argmin(np.abs(thetas - th))])
        part = select(ref, theta=th, sigma=sig_ref)
        for lo, hi in ((0.02, 0.95), (1.05, 2.05)):
            gl = np.linspace(lo, hi, 300)
            ax.plot(
                gl,
                faf.scratch_risk_asymptotic(gl, sig_ref) - faf.linear_transfer_risk_asymptotic(th),
                ":",
                color=col,
            )
            nl = gl * d
            ok = np.abs(nl - d) >= 2
            ax.plot(
                gl[ok],
                (faf.scratch_risk(nl, d, sig_ref) - faf.linear_transfer_risk(nl, th, sig_ref))[ok],
                "-",
                color=col,
                lw=1.2,
            )
        s = curve(part, "n", estimator="simulation")
        errorbar(ax, s, "n", scale=d, color=col, label=f"θ = {angle_label(th)}")
    ax.axhline(0, color="k", lw=0.8)
    ax.axvline(1, color="0.5", lw=0.8, ls=":")
    ax.set(ylim=(-1.0, 1.0), xlabel="n / d", ylabel="T_lt = E R_scratch − E R_lt")
    ax.set_title(f"(d) slices at σ = {sig_ref:g}")
    ax.legend(
        fontsize=8,
        title="dots: simulated ± SE\nline: exact, dotted: eq. 13",
        title_fontsize=7,
        loc="lower left",
    )

    # (e), (f) risk per method vs γ at two angles
    for ax, th, tag in ((axes[1, 1], np.pi / 8, "e"), (axes[1, 2], 3 * np.pi / 8, "f")):
        th = float(thetas[np.argmin(np.abs(thetas - th))])
        for method, label in (
            ("scratch", "scratch"),
            ("linear_transfer", "linear transfer"),
            ("finetune", "fine-tune (L = 1)"),
        ):
            part = select(g, metric="risk", method=method, theta=th, sigma=sig_ref)
            col = METHOD_COLORS[method]
            for lim, ls in (("exact", "-"), ("asymptotic", ":")):
                c = curve(part, "n", estimator="closed_form", limit=lim)
                for seg in (c[c["n"] < d], c[c["n"] > d]):
                    ax.plot(seg["n"] / d, seg["risk"], ls, color=col, lw=1.2)
            s = curve(part, "n", estimator="simulation")
            errorbar(ax, s, "n", scale=d, color=col, label=label)
        ax.axvline(1, color="0.5", lw=0.8, ls=":")
        ax.set(yscale="log", xlabel="n / d", ylabel="expected excess risk E R")
        ax.set_title(f"({tag}) risk per method, θ = {angle_label(th)}, σ = {sig_ref:g}")
        ax.legend(
            fontsize=8, title="line: exact, dotted: limit\n(n > d: fine-tune = scratch)", title_fontsize=7
        )
    fig.tight_layout()
    return save_figure(fig, stem, formats)


def _phase_legend(ax: Axes) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    ax.legend(
        handles=[
            Patch(color=HELPS, alpha=0.7, label="simulated T > 0 (transfer helps)"),
            Patch(color=HURTS, alpha=0.7, label="simulated T < 0 (hurts)"),
            Line2D([], [], color="#56b4e9", lw=2.2, label="eq. 13 boundary (n, d → ∞)"),
            Line2D([], [], color="k", ls="--", lw=1.2, label="exact boundary at this d"),
        ],
        fontsize=7,
        loc="lower right",
        framealpha=0.9,
    )


# ---------------------------------------------------------------------------------------- FaF Fig. 2


def plot_faf_ridge(df: pd.DataFrame, stem: Path, formats: Iterable[str]) -> list[Path]:
    """Ridge linear transfer vs λ: exact finite-n risk, Thm 3.8's limit, simulations; the exact minimiser."""
    import matplotlib.pyplot as plt

    r = select(df, experiment="faf_ridge")
    ns = np.sort(r["n"].unique())
    fig, axes = plt.subplots(1, len(ns), figsize=(6 * len(ns), 4.6), squeeze=False)
    for ax, n in zip(axes[0], ns):
        part = select(r, n=int(n))
        th = float(part["theta"].iloc[0])
        sigmas = np.sort(part["sigma"].unique())
        colors = plt.cm.plasma(np.linspace(0.1, 0.7, len(sigmas)))
        lam_f = np.linspace(0, part["ridge"].max(), 60)
        for col, sg in zip(colors, sigmas):
            exact = [faf.ridge_transfer_risk(int(n), th, float(sg), float(lam)) for lam in lam_f]
            ax.plot(lam_f, exact, "-", color=col, lw=1.3)
            k = int(np.argmin(exact))
            ax.plot([lam_f[k]], [exact[k]], marker="*", ms=12, color=col, mec="k", zorder=5)
            s = curve(part, "ridge", estimator="simulation", sigma=float(sg))
            errorbar(ax, s, "ridge", color=col, label=f"σ = {sg:g}")
        ax.plot(lam_f, faf.ridge_transfer_risk_asymptotic(th, lam_f), "k:", lw=1.5, label="Thm 3.8 (n → ∞)")
        ax.set(xlabel="ridge λ", ylabel="E R of ridge linear transfer")
        ax.set_title(f"n = {int(n)} (n/d = {n / part['d'].iloc[0]:g}), θ = {angle_label(th)}")
        ax.legend(
            fontsize=8, title="line: exact at this n, ★: its minimum\ndots: simulated ± SE", title_fontsize=7
        )
    fig.tight_layout()
    return save_figure(fig, stem, formats)


# ---------------------------------------------------------------------------------------- FaF Fig. 3


def plot_faf_finetune(df: pd.DataFrame, stem: Path, formats: Iterable[str], sig_ref: float) -> list[Path]:
    """Fine-tuning vs scratch: the (n/d, θ) sign map (depth 1), slices with depth-2 GD, and σ = 1 vs θ."""
    import matplotlib.pyplot as plt

    g = select(df, experiment="faf_grid", metric="transferability", method="finetune")
    deep = select(df, experiment="faf_deep", metric="transferability")
    d = int(g["d"].iloc[0])
    ns, thetas = np.sort(g["n"].unique()), np.sort(g["theta"].unique())
    L = int(deep["depth"].max()) if len(deep) else 2
    fig, axes = plt.subplots(1, 3, figsize=(18, 5.2))

    ax = axes[0]
    sim = pivot(select(g, estimator="simulation", sigma=sig_ref), "theta", "n")
    sign_cells(ax, ns / d, thetas, sim.to_numpy(), 0.2, 0.2)
    ax.plot([0.1, 1.0], [np.pi / 3, np.pi / 3], color="#56b4e9", lw=2.2, label="eq. 17: θ = π/3 (depth 1)")
    ax.axvline(1.0, color="#56b4e9", lw=2.2)
    gam = np.linspace(0.1, 0.97, 200)
    ax.plot(
        gam,
        lt.deep_finetune_boundary(gam * d, d, sig_ref, L),
        "k--",
        lw=1.3,
        label=f"depth {L}, Thm 5.2 (n, d → ∞)",
    )
    ax.set(xlim=(0.1, 2.05), ylim=(-0.07, np.pi / 2 + 0.07), xlabel="n / d", ylabel="θ")
    theta_axis(ax)
    ax.set_title(f"(a) T_ft sign (depth 1 simulated), σ = {sig_ref:g}")
    from matplotlib.patches import Patch

    handles, _ = ax.get_legend_handles_labels()
    handles += [
        Patch(color=HELPS, alpha=0.7, label="T > 0 (helps)"),
        Patch(color=HURTS, alpha=0.7, label="T < 0 (hurts)"),
        Patch(color="#d9d9d9", label="T = 0 exactly (n > d)"),
    ]
    ax.legend(handles=handles, fontsize=7, loc="lower right", framealpha=0.9)

    ax = axes[1]
    colors = plt.cm.viridis(np.linspace(0.05, 0.85, 3))
    for col, th in zip(colors, (np.pi / 8, np.pi / 4, 3 * np.pi / 8)):
        th = float(thetas[np.argmin(np.abs(thetas - th))])
        gl = np.linspace(0.02, 0.98, 200)
        ax.plot(gl, (1 - gl) * (2 * np.cos(th) - 1), "-", color=col, lw=1.2)
        ax.plot([1.02, 2.05], [0, 0], "-", color=col, lw=1.2)
        s = curve(g, "n", estimator="simulation", theta=th, sigma=sig_ref)
        errorbar(ax, s, "n", scale=d, color=col, label=f"θ = {angle_label(th)}")
        dg = curve(deep, "n", solver="gradient_descent", theta=th, sigma=sig_ref)
        errorbar(ax, dg, "n", scale=d, fmt="s", mfc="none", ms=7, color=col)
    ax.axhline(0, color="k", lw=0.8)
    ax.set(xlabel="n / d", ylabel="T_ft = E R_scratch − E R_ft")
    ax.set_title(f"(b) slices at σ = {sig_ref:g}")
    ax.legend(
        fontsize=8,
        title=f"dots: depth 1 simulated, line: exact (eq. 17)\nsquares: depth {L}, gradient descent",
        title_fontsize=7,
    )

    ax = axes[2]
    sig_hi = float(deep["sigma"].max()) if len(deep) else 1.0
    th_f = np.linspace(0, np.pi / 2, 200)
    dns = np.sort(deep["n"].unique())
    colors = plt.cm.cividis(np.linspace(0.1, 0.8, len(dns)))
    for col, n in zip(colors, dns):
        n = int(n)
        ax.plot(th_f, (1 - n / d) * (2 * np.cos(th_f) - 1), "-", color=col, lw=1.0)
        cf = faf.scratch_risk(n, d, sig_hi) - lt.deep_finetune_risk_asymptotic(n, d, th_f, sig_hi, L)
        ax.plot(th_f, cf, "--", color=col, lw=1.0)
        s = curve(deep, "theta", solver="gradient_descent", n=n, sigma=sig_hi)
        errorbar(ax, s, "theta", fmt="s", mfc="none", ms=7, color=col, label=f"n/d = {n / d:g}")
        s = curve(deep, "theta", solver="limit_point", n=n, sigma=sig_hi)
        ax.plot(s["theta"], s["risk"], "x", color=col, ms=7)
    ax.axhline(0, color="k", lw=0.8)
    ax.axvline(np.pi / 3, color="#56b4e9", lw=1.5)
    ax.set(xlabel="θ", ylabel="T_ft")
    theta_axis(ax, "x")
    ax.set_title(f"(c) σ = {sig_hi:g}: depth {L} moves the boundary below π/3")
    ax.legend(
        fontsize=8,
        title=f"line: depth 1 (eq. 17), dashed: depth {L} (Thm 5.2)\n□: GD, ×: Thm 5.2 on the same draws",
        title_fontsize=7,
    )
    fig.tight_layout()
    return save_figure(fig, stem, formats)


# ---------------------------------------------------------------------------------------- FaF Fig. 5


def plot_faf_distance(df: pd.DataFrame, stem: Path, formats: Iterable[str]) -> list[Path]:
    """Transferability vs the KL divergence between source and target distributions (their Fig. 5a)."""
    import matplotlib.pyplot as plt
    from scipy.stats import spearmanr

    g = select(df, experiment="faf_grid", metric="transferability", estimator="simulation")
    g = g[g["sigma"] > 0]
    d = int(g["d"].iloc[0])
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    for ax, method, title in (
        (axes[0], "linear_transfer", "linear transfer"),
        (axes[1], "finetune", "fine-tuning (depth 1)"),
    ):
        part = select(g, method=method)
        kl = faf.kl_divergence(part["theta"].to_numpy(), part["sigma"].to_numpy())
        ok = kl > 0
        sc = ax.scatter(
            kl[ok],
            part["risk"].to_numpy()[ok],
            c=part["n"].to_numpy()[ok] / d,
            cmap="viridis",
            s=10,
            alpha=0.7,
        )
        rho = spearmanr(kl[ok], part["risk"].to_numpy()[ok]).statistic
        ax.axhline(0, color="k", lw=0.8)
        ax.set(xscale="log", xlabel="D_KL(p_s ‖ p_t) = (1 − cos θ)/σ²", ylabel=f"simulated T ({title})")
        ax.set_ylim(-1.2, 1.5)
        ax.set_title(f"{title}: Spearman ρ(T, D_KL) = {rho:.2f}")
        fig.colorbar(sc, ax=ax, label="n / d")
    fig.tight_layout()
    return save_figure(fig, stem, formats)


# ---------------------------------------------------------------------------------------- LT figures
