"""The fine-tuning figures on a synthetic sweep: what their axes and legends say."""

from pipeline.analysis.finetune_figures import SEED_BAND, TUNED_BARS, plot_distance, plot_fixed_lr, plot_tuned
from pipeline.analysis.stats import deltas, fixed_rate_runs, inflection_table, optimal_lr_table, tuned_table


def test_tuned_y_labels_name_the_quantity_and_the_legend_the_inflection(draw, finetune_metrics):
    tuned = tuned_table(finetune_metrics)
    fig = draw(plot_tuned, tuned, optimal_lr_table(tuned), "tuned", ["png"])
    top_left, top_middle = fig.axes[:2]  # the first row: (tiny, code)
    assert top_left.get_ylabel() == "pre-training ppl at the tuned LR"
    assert top_middle.get_ylabel() == "code test ppl at the tuned LR"
    assert not [ax.get_ylabel() for ax in fig.axes if "inflection" in ax.get_ylabel()]
    legend = top_left.get_legend()
    assert "inflection (sft: 2M tokens)" in [t.get_text() for t in legend.get_texts()]
    assert legend.get_title().get_text() == TUNED_BARS == "bars: ±1 sd over fine-tuning seeds at the tuned LR"


def test_fixed_lr_and_distance_legends_say_what_the_band_covers(draw, finetune_metrics):
    d = deltas(fixed_rate_runs(finetune_metrics), "ppl")
    base = finetune_metrics[finetune_metrics["modification"] == "none"]
    inflection = inflection_table(d, n_bootstrap=10, seed=0)
    fig = draw(plot_fixed_lr, d, base, inflection, "fixed", ["png"])
    n_seeds = d["seed"].nunique()  # the synthetic sweep has one pre-training run
    covered = f"1 pre-training seed: no band ({n_seeds} fine-tuning seeds per run)"
    title = fig.axes[1].get_legend().get_title().get_text()  # wrapped to the axis's width
    assert title.split("\n")[0] == "fine-tuning LR"
    assert " ".join(title.split("\n")[1:]) == f"({covered})"
    fig = draw(plot_distance, finetune_metrics, "distance", ["png"])
    assert fig.axes[0].get_legend().get_title().get_text() == f"pre-training tokens\n({SEED_BAND})"
    assert SEED_BAND == "band: ±1 sd over fine-tuning seeds"
