"""The transfer stage's eight figures, drawn from its table (pipeline/theory/transfer_table.py).

Conventions: closed forms are lines (solid: exact at this n, d; dotted or dashed: an n, d → ∞ limit),
simulations are markers with ±1 standard-error bars; transfer helps (T > 0) in blue, hurts in red.
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.analysis.figure_registry import figure_names
from pipeline.analysis.style import save_figure, set_style
from pipeline.theory import features_are_fate as faf
from pipeline.theory import linear_teachers as lt

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes

FIGURE_STEMS = figure_names("theory_transfer")  # the registry declares them, in this order
METHOD_COLORS = {
    "scratch": "#444444",
    "linear_transfer": "#1f77b4",
    "ridge_transfer": "#1f77b4",
    "finetune": "#d62728",
    "finetune_frozen_first": "#9467bd",
}
HELPS, HURTS = "#2166ac", "#b2182b"


def angle_label(theta: float) -> str:
    """θ as a fraction of π when it is a multiple of π/24 (the grids' angles), else in radians."""
    k = round(theta / (np.pi / 24))
    if abs(theta - k * np.pi / 24) > 1e-4:
        return f"{theta:.2f}"
    if k == 0:
        return "0"
    f = Fraction(k, 24)
    num = "π" if f.numerator == 1 else f"{f.numerator}π"
    return num if f.denominator == 1 else f"{num}/{f.denominator}"


def select(df: pd.DataFrame, **eq: Any) -> pd.DataFrame:
    """Rows whose columns equal the given values (None: the column is null; floats compared to 1e-9)."""
    mask = np.ones(len(df), dtype=bool)
    for col, val in eq.items():
        if val is None:
            mask &= df[col].isna().to_numpy()
        elif isinstance(val, float):
            mask &= np.isclose(df[col].astype(float).to_numpy(), val, rtol=0, atol=1e-9)
        else:
            mask &= (df[col] == val).fillna(False).to_numpy(dtype=bool)
    return df[mask]


def _curve(df: pd.DataFrame, x: str, **eq: Any) -> pd.DataFrame:
    """The rows of one curve, sorted by x."""
    return select(df, **eq).sort_values(x)


def _errorbar(ax: Axes, rows: pd.DataFrame, x: str, scale: float = 1.0, **kw: Any) -> None:
    """Simulated risks ± SE against column `x` / `scale` (dots unless `fmt` says otherwise)."""
    if len(rows):
        style = {"fmt": "o", "ms": 4, "capsize": 2} | kw
        ax.errorbar(rows[x] / scale, rows["risk"], yerr=rows["risk_se"], **style)


def _edges(values: np.ndarray, cap: float) -> tuple[np.ndarray, np.ndarray]:
    """Cell edges around grid points: halfway to each neighbour, at most cap/2 away (a gap stays a gap)."""
    v = np.asarray(values, dtype=float)
    gaps = np.diff(v) if len(v) > 1 else np.array([cap])
    left = np.minimum(np.r_[gaps[0], gaps], cap) / 2
    right = np.minimum(np.r_[gaps, gaps[-1]], cap) / 2
    return v - left, v + right


def _sign_cells(ax: Axes, xs: np.ndarray, ys: np.ndarray, T: np.ndarray, xcap: float, ycap: float) -> None:
    """Grid cells coloured by the simulated transferability (blue helps, red hurts, shade ∝ |T| up to 0.5)."""
    from matplotlib.patches import Rectangle

    (x0, x1), (y0, y1) = _edges(xs, xcap), _edges(ys, ycap)
    for i in range(len(ys)):
        for j in range(len(xs)):
            v = T[i, j]
            if not np.isfinite(v):
                continue
            color = (HELPS if v > 0 else HURTS) if v != 0 else "#d9d9d9"
            alpha = 0.15 + 0.75 * min(abs(v), 0.5) / 0.5 if v != 0 else 1.0
            ax.add_patch(
                Rectangle((x0[j], y0[i]), x1[j] - x0[j], y1[i] - y0[i], facecolor=color, alpha=alpha, lw=0)
            )


def _pivot(df: pd.DataFrame, index: str, columns: str) -> pd.DataFrame:
    return df.pivot_table(index=index, columns=columns, values="risk")


def _theta_axis(ax: Axes, which: str = "y") -> None:
    ticks = np.arange(0, 5) * np.pi / 8
    labels = [angle_label(t) for t in ticks]
    (ax.set_yticks if which == "y" else ax.set_xticks)(ticks, labels)


# ---------------------------------------------------------------------------------------- FaF Fig. 1


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
    sim = _pivot(select(ref, estimator="simulation", sigma=sig_ref), "theta", "n")
    _sign_cells(ax, ns / d, thetas, sim.to_numpy(), 0.2, 0.2)
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
    _theta_axis(ax)
    ax.set_title(f"(a) T_lt sign, σ = {sig_ref:g}: eq. 13 (blue) vs exact (dashed)")
    _phase_legend(ax)

    # (b), (c) phase diagrams over (θ, σ) at one γ < 1 and one γ > 1
    for ax, target in ((axes[0, 1], 0.5), (axes[0, 2], 1.6)):
        n = int(ns[np.argmin(np.abs(ns / d - target))])
        sim = _pivot(select(ref, estimator="simulation", n=n), "sigma", "theta")
        _sign_cells(ax, thetas, sigmas, sim.to_numpy(), 0.2, 0.2)
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
        _theta_axis(ax, "x")
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
        s = _curve(part, "n", estimator="simulation")
        _errorbar(ax, s, "n", scale=d, color=col, label=f"θ = {angle_label(th)}")
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
                c = _curve(part, "n", estimator="closed_form", limit=lim)
                for seg in (c[c["n"] < d], c[c["n"] > d]):
                    ax.plot(seg["n"] / d, seg["risk"], ls, color=col, lw=1.2)
            s = _curve(part, "n", estimator="simulation")
            _errorbar(ax, s, "n", scale=d, color=col, label=label)
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
            s = _curve(part, "ridge", estimator="simulation", sigma=float(sg))
            _errorbar(ax, s, "ridge", color=col, label=f"σ = {sg:g}")
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
    sim = _pivot(select(g, estimator="simulation", sigma=sig_ref), "theta", "n")
    _sign_cells(ax, ns / d, thetas, sim.to_numpy(), 0.2, 0.2)
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
    _theta_axis(ax)
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
        s = _curve(g, "n", estimator="simulation", theta=th, sigma=sig_ref)
        _errorbar(ax, s, "n", scale=d, color=col, label=f"θ = {angle_label(th)}")
        dg = _curve(deep, "n", solver="gradient_descent", theta=th, sigma=sig_ref)
        _errorbar(ax, dg, "n", scale=d, fmt="s", mfc="none", ms=7, color=col)
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
        s = _curve(deep, "theta", solver="gradient_descent", n=n, sigma=sig_hi)
        _errorbar(ax, s, "theta", fmt="s", mfc="none", ms=7, color=col, label=f"n/d = {n / d:g}")
        s = _curve(deep, "theta", solver="limit_point", n=n, sigma=sig_hi)
        ax.plot(s["theta"], s["risk"], "x", color=col, ms=7)
    ax.axhline(0, color="k", lw=0.8)
    ax.axvline(np.pi / 3, color="#56b4e9", lw=1.5)
    ax.set(xlabel="θ", ylabel="T_ft")
    _theta_axis(ax, "x")
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
        c = _curve(part, "n", estimator="closed_form")
        ax.plot(c["n"], c["risk"], "-" if v == "isotropic" else "--", color=col, lw=1.3)
        _errorbar(ax, _curve(part, "n", estimator="simulation"), "n", color=col, label=label)
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
        c = _curve(part, "target_norm", estimator="closed_form")
        ax.plot(c["target_norm"], c["risk"], "-" if L == 1 else "--", color=col, lw=1.2)
        _errorbar(
            ax,
            _curve(part, "target_norm", solver="limit_point"),
            "target_norm",
            color=col,
            label=label,
            fmt="x",
        )
        _errorbar(
            ax,
            _curve(part, "target_norm", solver="gradient_descent"),
            "target_norm",
            fmt="s",
            mfc="none",
            ms=7,
            color=col,
        )
        _errorbar(ax, _curve(part, "target_norm", solver="linear_algebra"), "target_norm", color=col)
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
        c = _curve(gap, "lr", depth=L)
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
        c = _curve(part, "n", estimator="closed_form")
        ax.plot(c["n"], c["risk"], "-" if (c["limit"] == "exact").all() else "--", color=col, lw=1.2)
        solver = "gradient_descent" if depth > 1 else "linear_algebra"
        rows = _curve(part, "n", solver=solver)
        if depth == 1:
            _errorbar(ax, rows, "n", color=col, label=label, fmt="o")
        else:
            _errorbar(ax, rows, "n", fmt="s", mfc="none", ms=8, color=col, label=label)
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
            pre = _curve(o, "pretrain_time", variant="before_finetuning", seed=sd)
            ax.plot(
                pre["pretrain_time"],
                pre["risk"],
                color=ref,
                lw=1,
                label="L_pre before fine-tuning" if lab else None,
            )
            c1 = _curve(
                o, "pretrain_time", variant=variant, depth=1, estimator="closed_form", features=None, seed=sd
            )
            ax.plot(
                c1["pretrain_time"], c1["risk"], color=one, lw=1.4, label="one layer: exact" if lab else None
            )
            at_n = _curve(o, "pretrain_time", variant=variant, depth=2, estimator="closed_form", seed=sd)
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
                s = _curve(
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


PLOTS = (
    plot_faf_linear,
    plot_faf_ridge,
    plot_faf_finetune,
    plot_faf_distance,
    plot_lt_alignment,
    plot_lt_depth,
    plot_lt_frozen,
    plot_overtraining,
)


def plot_transfer(
    df: pd.DataFrame, figures_dir: str | Path, reference_sigma: float, formats: Iterable[str] = ("png", "pdf")
) -> list[Path]:
    """The eight registered transfer figures (FIGURE_STEMS, in registry order) from the stage's table;
    reference_sigma (theory.transfer.features_are_fate.reference_sigma) is the noise of the (n/d, θ) maps."""
    set_style()
    figures_dir = Path(figures_dir)
    paths: list[Path] = []
    for stem, plot in zip(FIGURE_STEMS, PLOTS, strict=True):
        extra = {"sig_ref": reference_sigma} if plot in (plot_faf_linear, plot_faf_finetune) else {}
        paths += plot(df, figures_dir / stem, formats, **extra)
    return paths
