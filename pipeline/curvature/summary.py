"""One row per line (Appendix D): how well the quadratic fits near λ = 0 and how far the true loss
departs from it at the widest λ. Torch-free; pandas imported by the table alone (a fine-tuning job
imports `smallest_lambda_error` at start-up)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

LINE_KEYS = [
    "study",
    "checkpoint",
    "model",
    "budget",
    "direction",
    "seed",
    "task",
    "modification",
    "learning_rate",
    "lambda_reg",
]


def smallest_lambda_error(rows: Sequence[Mapping]) -> float:
    """|ΔL − Δq| / |ΔL| at the smallest nonzero |λ| of a line's finite rows (Δ: change from λ = 0)."""
    pts = [r for r in rows if r["lambda"] != 0 and r["finite"]]
    if not pts:
        return float("nan")
    r = min(pts, key=lambda r: abs(r["lambda"]))
    dl, dq = r["loss"] - r["loss0"], r["quadratic"] - r["loss0"]
    return abs(dl - dq) / abs(dl) if dl != 0 else float("nan")


def summary_table(lines: pd.DataFrame) -> pd.DataFrame:
    """Per line: L(0), gᵀε, εᵀHε and its fit from the small grid, the quadratic's relative error at
    the smallest λ, and at the widest λ the true and predicted rise and their ratio (excess)."""
    import pandas as pd

    out = []
    for key, g in lines.groupby(LINE_KEYS, dropna=False, sort=True):
        first = g.iloc[0]
        small, wide = g[g["grid"] == "small"], g[(g["grid"] == "wide") & g["finite"]]
        top = wide.loc[wide["lambda"].idxmax()] if len(wide) else None
        rise = top["loss"] - top["loss0"] if top is not None else math.nan
        pred = top["quadratic"] - top["loss0"] if top is not None else math.nan
        nonzero = small[small["lambda"] != 0]
        out.append(
            dict(
                zip(LINE_KEYS, key),
                loss0=first["loss0"],
                grad_dot=first["grad_dot"],
                curvature=first["curvature"],
                curvature_fd=first["curvature_fd"],
                curvature_fd_rel_error=abs(first["curvature_fd"] - first["curvature"])
                / abs(first["curvature"]),
                smallest_lambda=nonzero["lambda"].abs().min() if len(nonzero) else math.nan,
                quadratic_rel_error=smallest_lambda_error(small.to_dict("records")),
                widest_lambda=top["lambda"] if top is not None else math.nan,
                rise_widest=rise,
                quadratic_rise_widest=pred,
                excess_ratio=rise / pred if pred else math.nan,
                nonfinite=int((~g["finite"]).sum()),
                direction_norm=first["direction_norm"],
            )
        )
    df = pd.DataFrame(out)
    return df.replace({np.inf: np.nan}) if len(df) else df
