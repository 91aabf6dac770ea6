"""finetune.grid_per_job through the real Snakefile: one job runs every rate of the grid for a
(checkpoint, task, method, λ, seed), the tuned-rate seed stays one job, and the metrics equal one
job per rate bit for bit."""

import shutil

import pandas as pd
from workflow_utils import ROOT, planned_jobs, smoke_config, snakemake, write_config

STUDY = "ci-grid"


def grid_config(grid_per_job: bool) -> dict:
    return smoke_config(
        study=STUDY,
        **{
            "pretrain.budgets": [16384],
            "perturb.gammas": [2],
            "perturb.seeds": [0],
            "finetune.tasks": ["code"],
            "finetune.learning_rates": [1e-2, 1e-1],
            "finetune.seeds": [0, 1],
            "finetune.seeds_at": "tuned",
            "finetune.grid_per_job": grid_per_job,
        },
    )


def test_one_job_per_grid_equals_one_job_per_rate(tmp_path):
    out = ROOT / "results" / STUDY
    shutil.rmtree(out, ignore_errors=True)
    grid = write_config(tmp_path, grid_config(True), "grid.yaml")
    jobs = planned_jobs(grid)
    assert jobs["finetune_grid"] == 1 and "finetune" not in jobs, jobs  # the tuned seed comes after
    res = snakemake(grid, "--cores", "2")
    assert res.returncode == 0, res.stderr[-5000:]
    by_grid = pd.read_parquet(out / "metrics.parquet")
    sft = by_grid[by_grid["modification"] == "sft"]
    assert {(lr, s) for lr, s in zip(sft["learning_rate"], sft["seed"], strict=True)} == {
        (1e-2, 0),
        (1e-1, 0),
        (sft.loc[sft["seed"] == 1, "learning_rate"].iloc[0], 1),
    }
    assert not (out / "finetune/.resume").exists() or not any((out / "finetune/.resume").rglob("*.parquet"))

    per_rate = write_config(tmp_path, grid_config(False), "per_rate.yaml")
    res = snakemake(per_rate, "--cores", "2", "--forcerun", "finetune")
    assert res.returncode == 0, res.stderr[-5000:]
    pd.testing.assert_frame_equal(pd.read_parquet(out / "metrics.parquet"), by_grid)
