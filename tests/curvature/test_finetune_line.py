"""The fine-tuning job's line along θ_ft − θ_pre: computed after every row (rows unchanged), from the
two models the job holds (λ = 1 is θ_ft: ‖ε‖ is the run's distance_l2)."""

from __future__ import annotations

import pandas as pd
import pytest
from train.test_finetune import run

from pipeline.curvature.config import CurvatureConfig
from pipeline.curvature.stage import FinetuneLine
from pipeline.curvature.summary import summary_table
from pipeline.tables import metrics_frame


def test_finetune_line_leaves_the_rows_and_measures_the_run(study_files, tmp_path):  # noqa: F811
    plain = metrics_frame(run(study_files, "mr", state=tmp_path / "a"))
    cfg = CurvatureConfig(max_tokens=512, batch_size=8)
    fields = dict(
        **study_files["spec"].row_fields("t"),
        modification="sft",
        task="mr",
        learning_rate=3e-3,
        lambda_reg=0.0,
        seed=0,
    )
    settings = {k: getattr(cfg, k) for k in ("finetune_lambdas_small", "finetune_lambdas_wide", "max_tokens")}
    line = FinetuneLine(settings, study_files["corpus"], {"split": "validation", "seq_len": None}, fields)
    with_line = metrics_frame(run(study_files, "mr", state=tmp_path / "b", after=line))
    pd.testing.assert_frame_equal(plain, with_line)
    lines = pd.DataFrame(line.rows)
    assert len(lines) == len(cfg.finetune_lambdas_small) + len(cfg.finetune_lambdas_wide)
    assert set(lines["direction"]) == {"finetune"} and lines["finite"].all()
    assert lines["eval_tokens"].iloc[0] <= 512
    distance = plain.loc[plain["metric"] == "distance_l2", "value"].iloc[0]
    assert lines["direction_norm"].iloc[0] == pytest.approx(distance, rel=1e-6)
    summary = summary_table(lines.assign(study="t"))
    assert summary["quadratic_rel_error"].iloc[0] <= 0.05


def test_off_writes_nothing(study_files):  # noqa: F811
    line = FinetuneLine(None, study_files["corpus"], {"split": "validation"}, {})
    line(None, None, {})
    assert line.rows == []


def test_curvature_tokens_are_the_first_windows_of_the_heldout_set(study_files, tokenizer):  # noqa: F811
    """The stage's token set: the perturbation stage's held-out windows, cut at max_tokens."""
    from pipeline.curvature.stage import curvature_eval_set
    from pipeline.data.heldout import heldout_eval_set
    from pipeline.models.loading import load_checkpoint

    model = load_checkpoint(study_files["spec"], study_files["ckpt"])[0]
    cfg = CurvatureConfig(max_tokens=300)
    ours = curvature_eval_set(model, tokenizer, study_files["corpus"], {"split": "validation"}, cfg)
    full = heldout_eval_set(study_files["corpus"], "validation", tokenizer, 64, 3000)
    k = len(ours.inputs)
    assert 0 < ours.n_tokens <= 300 and ours.n_tokens == int((ours.labels != -100).sum())
    assert (ours.inputs == full.inputs[:k]).all() and (ours.labels == full.labels[:k]).all()
