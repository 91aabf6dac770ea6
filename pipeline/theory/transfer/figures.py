"""The transfer stage's eight figures, drawn from its table (pipeline/theory/transfer/table.py), in the
figure registry's order: the "Features are fate" ones (faf_figures.py), the linear teachers' and the
bridge (lt_figures.py); their shared conventions are in plots.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.analysis.figure_registry import figure_names
from pipeline.analysis.style import set_style
from pipeline.theory.transfer.faf_figures import (
    plot_faf_distance,
    plot_faf_finetune,
    plot_faf_linear,
    plot_faf_ridge,
)
from pipeline.theory.transfer.lt_figures import (
    plot_lt_alignment,
    plot_lt_depth,
    plot_lt_frozen,
    plot_overtraining,
)

if TYPE_CHECKING:
    import pandas as pd

FIGURE_STEMS = figure_names("theory_transfer")  # the registry declares them, in this order


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
