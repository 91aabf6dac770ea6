"""finetune.grid_per_job through the real Snakefile: one job runs every rate of the grid for a
(checkpoint, task, method, λ, seed), the tuned-rate seed stays one job, and the runs' metrics and
curvature lines equal one job per rate bit for bit."""

import shutil

import pandas as pd
import pytest
from workflow_utils import ROOT, planned_jobs, smoke_config, snakemake, write_config

STUDY = "ci-grid"
SETTING = f"results/{STUDY}/finetune/tiny-16384-s0/code/sft/lr_search/lam0"  # the runs of one setting


def grid_config(grid_per_job: bool | str, study: str = STUDY, **overrides) -> dict:
    return smoke_config(
        study=study,
        **{
            "pretrain.budgets": [16384],
            "finetune.tasks": ["code"],
            "finetune.learning_rates": [1e-2, 1e-1],
            "finetune.seeds": [0, 1],
            "finetune.seeds_at": "tuned",
            "finetune.grid_per_job": grid_per_job,
            **overrides,
        },
    )


def test_one_job_per_grid_equals_one_job_per_rate(tmp_path):
    shutil.rmtree(ROOT / "results" / STUDY, ignore_errors=True)
    targets = [f"{SETTING}.parquet", f"{SETTING}.line.parquet"]
    grid = write_config(tmp_path, grid_config(True), "grid.yaml")
    jobs = planned_jobs(grid)
    assert jobs["finetune_grid"] == 1 and "finetune" not in jobs, jobs  # the tuned seed comes after
    res = snakemake(grid, "--cores", "2", *targets)
    assert res.returncode == 0, res.stderr[-5000:]
    by_grid = [pd.read_parquet(ROOT / t) for t in targets]
    runs = by_grid[0].drop_duplicates(["learning_rate", "seed"])
    tuned = runs.loc[runs["seed"] == 1, "learning_rate"].item()
    assert sorted(zip(runs["learning_rate"], runs["seed"], strict=True)) == sorted(
        [(0.01, 0), (0.1, 0), (tuned, 1)]
    )
    assert not any((ROOT / "results" / STUDY / "finetune" / ".resume").rglob("*.parquet"))

    per_rate = write_config(tmp_path, grid_config(False), "per_rate.yaml")
    res = snakemake(per_rate, "--cores", "2", "--forcerun", "finetune", *targets)
    assert res.returncode == 0, res.stderr[-5000:]
    assert "rule finetune_grid" not in res.stdout + res.stderr
    for table, before in zip(targets, by_grid, strict=True):
        pd.testing.assert_frame_equal(pd.read_parquet(ROOT / table), before)


@pytest.mark.parametrize(
    "overrides, grid_jobs",
    [
        ({}, True),  # a grid of 2 rates: one job for both
        ({"finetune.learning_rates": [1e-2]}, False),  # one rate: nothing to save
        ({"finetune.learning_rates": {"search": {"bracket": [1e-3, 1e-1], "resolution": 0.5}}}, False),
        ({"device": "cuda"}, False),  # GPU jobs are sized per run
    ],
    ids=["grid", "one-rate", "search", "cuda"],
)
def test_auto_runs_grid_jobs_where_they_are_allowed_and_save_a_start_up(tmp_path, overrides, grid_jobs):
    """`grid_per_job: auto` (the default study's): grid jobs for a grid of several rates on a CPU; one
    job per run for one rate, a search (where `true` is an error) or `device: cuda`, with no error."""
    jobs = planned_jobs(write_config(tmp_path, grid_config("auto", "ci-grid-auto", **overrides)))
    assert ("finetune_grid" in jobs) == grid_jobs and ("finetune" in jobs) != grid_jobs, jobs
