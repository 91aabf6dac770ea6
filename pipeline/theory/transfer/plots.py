"""What the transfer stage's figures share: the methods' colours, θ labels, selecting a closed form
or a simulation's rows, drawing a curve with its standard errors, and the transfer-helps / hurts maps.

Conventions: closed forms are lines (solid: exact at this n, d; dotted or dashed: an n, d → ∞ limit),
simulations are markers with ±1 standard-error bars; transfer helps (T > 0) in blue, hurts in red.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes

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


def curve(df: pd.DataFrame, x: str, **eq: Any) -> pd.DataFrame:
    """The rows of one curve, sorted by x."""
    return select(df, **eq).sort_values(x)


def errorbar(ax: Axes, rows: pd.DataFrame, x: str, scale: float = 1.0, **kw: Any) -> None:
    """Simulated risks ± SE against column `x` / `scale` (dots unless `fmt` says otherwise)."""
    if len(rows):
        style = {"fmt": "o", "ms": 4, "capsize": 2} | kw
        ax.errorbar(rows[x] / scale, rows["risk"], yerr=rows["risk_se"], **style)


def edges(values: np.ndarray, cap: float) -> tuple[np.ndarray, np.ndarray]:
    """Cell edges around grid points: halfway to each neighbour, at most cap/2 away (a gap stays a gap)."""
    v = np.asarray(values, dtype=float)
    gaps = np.diff(v) if len(v) > 1 else np.array([cap])
    left = np.minimum(np.r_[gaps[0], gaps], cap) / 2
    right = np.minimum(np.r_[gaps, gaps[-1]], cap) / 2
    return v - left, v + right


def sign_cells(ax: Axes, xs: np.ndarray, ys: np.ndarray, T: np.ndarray, xcap: float, ycap: float) -> None:
    """Grid cells coloured by the simulated transferability (blue helps, red hurts, shade ∝ |T| up to 0.5)."""
    from matplotlib.patches import Rectangle

    (x0, x1), (y0, y1) = edges(xs, xcap), edges(ys, ycap)
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


def pivot(df: pd.DataFrame, index: str, columns: str) -> pd.DataFrame:
    return df.pivot_table(index=index, columns=columns, values="risk")


def theta_axis(ax: Axes, which: str = "y") -> None:
    ticks = np.arange(0, 5) * np.pi / 8
    labels = [angle_label(t) for t in ticks]
    (ax.set_yticks if which == "y" else ax.set_xticks)(ticks, labels)


# ---------------------------------------------------------------------------------------- FaF Fig. 1
