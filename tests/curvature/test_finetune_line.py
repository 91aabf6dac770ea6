"""The fine-tuning job's line along θ_ft − θ_pre: computed after every row (rows unchanged), from the
two models the job holds (λ = 1 is θ_ft: ‖ε‖ is the run's distance_l2)."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
from train.test_finetune import finetune_job

from pipeline.curvature.config import CurvatureConfig
from pipeline.curvature.summary import summary_table
from pipeline.train.finetune_job import run_in_process


def test_finetune_line_leaves_the_rows_and_measures_the_run(study_files, tmp_path):  # noqa: F811
    cfg = CurvatureConfig(max_tokens=512, batch_size=8)
    plain = finetune_job(study_files, "mr", state=tmp_path / "a", line_path=str(tmp_path / "a-line.parquet"))
    run_in_process(plain)
    assert pd.read_parquet(plain.line_path).empty  # the stage off: the rule's output, empty
    curved = dataclasses.replace(
        plain, state_dir=str(tmp_path / "b"), metrics_path=str(tmp_path / "b.parquet"),
        line_path=str(tmp_path / "b-line.parquet"), curvature=cfg,
    )  # fmt: skip
    run_in_process(curved)
    rows, with_line = pd.read_parquet(plain.metrics_path), pd.read_parquet(curved.metrics_path)
    pd.testing.assert_frame_equal(rows, with_line)
    lines = pd.read_parquet(curved.line_path)
    assert len(lines) == len(cfg.finetune_lambdas_small) + len(cfg.finetune_lambdas_wide)
    assert set(lines["direction"]) == {"finetune"} and lines["finite"].all()
    assert lines["eval_tokens"].iloc[0] <= 512
    distance = rows.loc[rows["metric"] == "distance_l2", "value"].iloc[0]
    assert lines["direction_norm"].iloc[0] == pytest.approx(distance, rel=1e-6)
    summary = summary_table(lines.assign(study="t"))
    assert summary["quadratic_rel_error"].iloc[0] <= 0.05


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
