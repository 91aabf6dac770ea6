"""The LLaVA figure on a synthetic sweep: its reference lines (chance, uniform guess) and what its
bars and bands cover."""

import itertools
import math

import pytest
from matplotlib.collections import PolyCollection
from matplotlib.container import ErrorbarContainer

from pipeline.analysis.benchmark_figures import SE_BAND
from pipeline.analysis.multimodal_figures import SEED_BARS, plot_vlm
from pipeline.analysis.stats import tuned_table
from pipeline.sweeps.lr_search import SELECTIONS
from pipeline.tables import metric_row, metrics_frame

BUDGETS = (1e6, 2e6, 4e6)
PIQA, PIQA_SE = (0.60, 0.62, 0.64), 0.011


def vlm_metrics():
    """LLaVA stage 2 at two rates and two seeds on three checkpoints (VLM score, held-out loss, PIQA
    with its stderr, pre-training ppl), the unmodified checkpoints and the stage-1 models."""
    rows = []
    for b, budget in enumerate(BUDGETS):
        ckpt = dict(checkpoint=f"tiny-{int(budget)}", model="tiny", budget=budget)
        none = dict(ckpt, modification="none")
        rows += [
            metric_row(**none, eval_data="benchmark:piqa", split="validation", metric="acc", value=PIQA[b]),
            metric_row(
                **none, eval_data="benchmark:piqa", split="validation", metric="acc_stderr", value=PIQA_SE
            ),
            metric_row(**none, eval_data="pretrain", split="validation", metric="ppl", value=40.0 - b),
            metric_row(**none, task="llava", eval_data="vlm", split="eval", metric="vlm_score", value=20.0),
        ]
        for lr, seed in itertools.product((1e-3, 1e-2), (0, 1)):
            run = dict(ckpt, modification="sft", task="llava", learning_rate=lr, lambda_reg=0.0, seed=seed)
            values = {
                ("vlm", "eval", "vlm_score"): 30.0 + b + 100 * lr + seed,  # the higher rate is tuned
                ("llava", "validation", "loss"): 2.0 - 0.1 * b,
                ("llava", "validation", "loss_other_image"): 2.5 - 0.1 * b,
                ("benchmark:piqa", "validation", "acc"): PIQA[b] - 0.05 - 0.01 * seed,
                ("benchmark:piqa", "validation", "acc_stderr"): PIQA_SE,
                ("pretrain", "validation", "ppl"): 45.0 + b + seed,
            }
            rows += [
                metric_row(**run, eval_data=data, split=split, metric=metric, value=value)
                for (data, split, metric), value in values.items()
            ]
    return metrics_frame(rows)


@pytest.fixture
def vlm_figure(draw):
    metrics = vlm_metrics()
    tuned = tuned_table(metrics, SELECTIONS["vlm_score"])
    return lambda **kw: draw(plot_vlm, metrics, tuned, "vlm", ["png"], **kw)


def test_loss_and_perplexity_panels_draw_the_uniform_guess(vlm_figure, hlines, titled):
    fig = vlm_figure(vocab_size=2048)
    ppl = hlines(titled(fig, "pre-training perplexity"))
    assert ppl == {"uniform guess (ppl = V = 2048)": 2048.0}
    loss = hlines(titled(fig, "llava: held-out conversation loss"))
    assert loss == {"uniform guess (ln V = 7.62 nats, V = 2048)": pytest.approx(math.log(2048))}
    assert hlines(titled(fig, "llava: the same, each shown another's image")) == loss
    # an unknown vocabulary draws none
    assert hlines(titled(vlm_figure(), "pre-training perplexity")) == {}


def test_benchmark_panels_draw_chance_and_standard_errors(vlm_figure, hlines, titled):
    ax = titled(vlm_figure(), "piqa (acc, out of domain)")
    assert hlines(ax) == {"chance (0.5)": 0.5}
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 2  # around the base and the tuned line
    base_band = bands[1].get_paths()[0].vertices[:, 1]
    assert base_band.min() == pytest.approx(PIQA[0] - PIQA_SE) and base_band.max() == pytest.approx(
        PIQA[-1] + PIQA_SE
    )
    (bars,) = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]  # the tuned line's ±1 sd
    assert bars.get_label() == "stage 2, tuned LR"
    assert ax.get_legend().get_title().get_text() == f"{SEED_BARS}\n{SE_BAND}"
    assert SEED_BARS == "bars: ±1 sd over stage-2 seeds at the tuned LR"
    assert SE_BAND == "band: ±1 SE over items (lm-eval)"
