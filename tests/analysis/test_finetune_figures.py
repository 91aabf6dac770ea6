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
    inflection = inflection_table(d)
    fig = draw(plot_fixed_lr, d, base, inflection, "fixed", ["png"])
    n_seeds = d["seed"].nunique()  # the synthetic sweep has one pre-training run
    covered = f"1 pre-training seed: no band ({n_seeds} fine-tuning seeds per run)"
    title = fig.axes[1].get_legend().get_title().get_text()  # wrapped to the axis's width
    assert title.split("\n")[0] == "fine-tuning LR"
    assert " ".join(title.split("\n")[1:]) == f"({covered})"
    fig = draw(plot_distance, finetune_metrics, "distance", ["png"])
    assert fig.axes[0].get_legend().get_title().get_text() == f"pre-training tokens\n({SEED_BAND})"
    assert SEED_BAND == "bars: ±1 sd over pre-training runs"
    budgets = sorted(finetune_metrics["budget"].unique())
    texts = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert len([t for t in texts if t != "∝ learning rate"]) == len(budgets)  # every budget listed


def test_pretraining_perplexity_panels_draw_the_unigram_and_uniform_lines(draw, finetune_metrics):
    """The study's reference perplexities (rule reference_ppl) on every pre-training-perplexity panel
    of the fixed-rate and tuned figures, and nowhere else."""
    import pandas as pd

    ref = pd.DataFrame(
        [{"eval_data": "pretrain", "split": "validation", "unigram_ppl": 697.0, "uniform_ppl": 2048.0}]
    )
    d = deltas(fixed_rate_runs(finetune_metrics), "ppl")
    base = finetune_metrics[finetune_metrics["modification"] == "none"]
    fixed = draw(plot_fixed_lr, d, base, inflection_table(d), "f", ["png"], reference=ref)
    tuned = tuned_table(finetune_metrics)
    tuned_fig = draw(plot_tuned, tuned, optimal_lr_table(tuned), "t", ["png"], reference=ref)

    def flat_lines(ax) -> set[float]:
        return {line.get_ydata()[0] for line in ax.get_lines() if len(set(line.get_ydata())) == 1}

    for ax in (fixed.axes[1], tuned_fig.axes[0]):  # the pre-training perplexity panels of row 1
        assert {697.0, 2048.0} <= flat_lines(ax)
    assert not {697.0, 2048.0} & flat_lines(fixed.axes[2])  # the in-domain panel


def test_the_optimal_lr_panel_is_titled_by_the_registered_claims(draw, finetune_metrics, tmp_path):
    """Figure 7's scenario comes from the claims' verdicts, never stronger: one pre-training seed
    cannot test the pre-training upturn, so the scenario is not established and says why."""
    from pipeline import layout
    from pipeline.analysis.findings import figure7_scenarios
    from pipeline.analysis.study_tables import StudyTables

    tuned = tuned_table(finetune_metrics)
    (tmp_path / "analysis").mkdir()
    finetune_metrics.to_parquet(tmp_path / layout.METRICS)
    tuned.to_parquet(tmp_path / layout.FINETUNE_TUNED)
    scenarios = figure7_scenarios(StudyTables(tmp_path, "t"))
    assert set(scenarios) == set(tuned["task"])
    assert all(
        "not established" in s and "pre-training upturn: not computed" in s for s in scenarios.values()
    )
    fig = draw(plot_tuned, tuned, optimal_lr_table(tuned), "t", ["png"], scenarios=scenarios)
    assert " ".join(fig.axes[2].get_title().split()).endswith(scenarios["code"])  # wrapped to the panel
