"""What the figure tests share: drawing a figure without saving it, its horizontal reference lines,
and a small synthetic fine-tuning sweep (metrics rows as the pipeline writes them)."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import pytest

from pipeline.tables import metric_row, metrics_frame

if TYPE_CHECKING:
    import pandas as pd

BUDGETS = (1e6, 2e6, 4e6, 8e6)
TASKS = ("code", "gsm8k")
RATES = (1e-2, 1e-1)
SEEDS = (0, 1)
BASE_PRE = (40.0, 30.0, 25.0, 22.0)  # the unmodified checkpoints' pre-training ppl
TUNED_PRE = (45.0, 40.0, 42.0, 50.0)  # after fine-tuning at the best rate: turns up after 2M tokens


@pytest.fixture
def draw(monkeypatch) -> Iterator[Callable[..., plt.Figure]]:
    """draw(plot_function, *args): the one Figure the function would save (nothing is written)."""
    figures: list[plt.Figure] = []

    def run(plot: Callable, *args, **kwargs) -> plt.Figure:
        drawn: list[plt.Figure] = []

        def save(fig: plt.Figure, *_args, **_kwargs) -> list:
            drawn.append(fig)
            return []

        monkeypatch.setattr(sys.modules[plot.__module__], "save_figure", save)
        plot(*args, **kwargs)
        assert len(drawn) == 1
        figures.extend(drawn)
        return drawn[0]

    yield run
    for fig in figures:
        plt.close(fig)


def horizontal_lines(ax: plt.Axes) -> dict[str, float]:
    """Label -> y of the axes' horizontal lines (axhline)."""
    out = {}
    for line in ax.get_lines():
        y = list(line.get_ydata())
        if len(y) == 2 and y[0] == y[1] and list(line.get_xdata()) == [0, 1]:
            out[line.get_label()] = float(y[0])
    return out


@pytest.fixture
def hlines() -> Callable[[plt.Axes], dict[str, float]]:
    return horizontal_lines


def axes_titled(fig: plt.Figure, title: str) -> plt.Axes:
    """The one visible axes of `fig` with this title."""
    (ax,) = [ax for ax in fig.axes if ax.get_visible() and ax.get_title() == title]
    return ax


@pytest.fixture
def titled() -> Callable[[plt.Figure, str], plt.Axes]:
    return axes_titled


@pytest.fixture
def finetune_metrics() -> pd.DataFrame:
    """Model `tiny` at four budgets, fine-tuned (sft, λ 0) on two tasks at two rates with two seeds:
    pre-training and in-domain ppl, the distance moved and the linearization gap, plus the
    unmodified checkpoints. The lower rate is best on in-domain validation ppl everywhere, and its
    pre-training ppl turns up after 2M tokens (an inflection at 2M)."""
    rows = []
    for b, budget in enumerate(BUDGETS):
        ckpt = dict(checkpoint=f"tiny-{int(budget)}", model="tiny", budget=budget)
        base = {("pretrain", "validation"): BASE_PRE[b]}
        base |= {(task, split): 100.0 for task in TASKS for split in ("validation", "test")}
        rows += [
            metric_row(**ckpt, modification="none", eval_data=data, split=split, metric="ppl", value=value)
            for (data, split), value in base.items()
        ]
        for task, lr, seed in itertools.product(TASKS, RATES, SEEDS):
            run = dict(ckpt, modification="sft", task=task, learning_rate=lr, lambda_reg=0.0, seed=seed)
            worse, noise = 1.0 + 10 * lr, 0.5 * seed  # the higher rate is worse on every metric
            values = {
                ("pretrain", "validation", "ppl"): TUNED_PRE[b] * worse + noise,
                ("pretrain", "validation", "lin_gap"): (0.5 + 0.3 * b) * worse,
                (task, "validation", "ppl"): (10.0 - b) * worse + noise,
                (task, "test", "ppl"): (10.5 - b) * worse + noise,
                ("weights", None, "distance_l2"): 100 * lr * (1 + 0.1 * seed),
            }
            rows += [
                metric_row(**run, eval_data=data, split=split, metric=metric, value=value)
                for (data, split, metric), value in values.items()
            ]
    return metrics_frame(rows)
