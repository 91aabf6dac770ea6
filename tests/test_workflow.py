"""The real Snakefile end to end on the smoke config, and exact reruns after config changes."""

import shutil

import pandas as pd
import pyarrow.parquet as pq
import pytest

from pipeline.tables import SCHEMA
from workflow_utils import ROOT, planned_jobs, smoke_config, snakemake, write_config

STUDY = "ci-smoke"
# aggregation downstream of any changed metrics file
AGG = {"metrics": 1, "analysis": 1, "figures": 1, "finetune_analysis": 1, "finetune_figures": 1}


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """Run the smoke study once (fresh) for every test of this module."""
    shutil.rmtree(ROOT / "results" / STUDY, ignore_errors=True)
    cfg_path = write_config(tmp_path_factory.mktemp("cfg"), smoke_config(study=STUDY))
    res = snakemake(cfg_path, "--cores", "2")
    assert res.returncode == 0, res.stderr[-5000:]
    return ROOT / "results" / STUDY, cfg_path


def test_smoke_study_outputs(smoke_run):
    out, _ = smoke_run
    metrics = pd.read_parquet(out / "metrics.parquet")
    assert pq.read_schema(out / "metrics.parquet").names == SCHEMA.names
    cfg = smoke_config()
    n_ckpt = len(cfg["pretrain"]["budgets"])
    n_cells = 1 + len(cfg["perturb"]["gammas"]) * len(cfg["perturb"]["seeds"])
    perturb = metrics[metrics["modification"].isin(["none", "gaussian"]) & (metrics["eval_data"] == "pretrain")]
    assert len(perturb) == n_ckpt * n_cells * 3  # ppl, bpb, loss
    assert metrics["config_hash"].nunique() == 1 and metrics["git_commit"].iloc[0] != ""
    ft = cfg["finetune"]
    sft = metrics[metrics["modification"] == "sft"]
    n_runs = n_ckpt * len(ft["tasks"]) * len(ft["learning_rates"]) * len(ft["lambdas"]) * len(ft["seeds"])
    assert sft.groupby(["checkpoint", "task", "learning_rate", "lambda_reg", "seed"]).ngroups == n_runs
    for task in ft["tasks"]:  # the base checkpoint's in-domain metrics are the Δ baseline
        base_id = metrics[(metrics["modification"] == "none") & (metrics["eval_data"] == task) & (metrics["metric"] == "ppl")]
        assert len(base_id) == n_ckpt * 2  # validation + test
    assert (sft[sft["metric"] == "distance_l2"]["value"] > 0).all()
    tuned = pd.read_parquet(out / "analysis" / "finetune_tuned.parquet")
    assert set(tuned["task"]) == set(ft["tasks"]) and tuned["learning_rate"].isin(ft["learning_rates"]).all()
    ppl = perturb[perturb["metric"] == "ppl"]
    assert (ppl["value"] > 1).all() and ppl["value"].notna().all()
    base = ppl[ppl["modification"] == "none"].sort_values("budget")["value"].to_numpy()
    assert base[-1] < base[0], "longer pre-training must improve the unperturbed model"
    for name in ("progressive_sensitivity.png", "inflection_point.png", "pretrain_loss.png", "finetune_fixed_lr.png", "finetune_tuned.png", "finetune_distance.png"):
        assert (out / "figures" / name).stat().st_size > 10_000
    corpus = pd.read_parquet(out / "data" / "corpus.parquet")
    assert set(corpus["split"]) == {"train", "validation", "test"}
    sens = pd.read_parquet(out / "analysis" / "sensitivity.parquet")
    assert set(sens.loc[sens["modification"] == "gaussian", "gamma"]) == set(cfg["perturb"]["gammas"])
    assert set(sens.loc[sens["modification"] == "sft", "learning_rate"]) == set(cfg["finetune"]["learning_rates"])


def test_same_config_gives_the_same_numbers(smoke_run, tmp_path):
    """Rerun the perturbation of one checkpoint from scratch (cache cleared): identical values."""
    out, cfg_path = smoke_run
    before = pd.read_parquet(out / "perturb" / "tiny-65536.parquet")
    shutil.rmtree(out / "perturb" / ".cells" / "tiny-65536")
    res = snakemake(cfg_path, "--cores", "1", "--forcerun", "perturb", "--until", "perturb")
    assert res.returncode == 0, res.stderr[-3000:]
    after = pd.read_parquet(out / "perturb" / "tiny-65536.parquet")
    pd.testing.assert_frame_equal(before, after)


@pytest.mark.parametrize(
    "change, expected",
    [
        ({}, {}),
        ({"perturb.gammas": [2, 6, 4]}, {"perturb": 3, **AGG}),
        ({"perturb.seeds": [0, 1, 2]}, {"perturb": 3, **AGG}),
        ({"pretrain.budgets": [16384, 65536, 262144, 131072]}, {"pretrain": 1, "perturb": 1, "task_base": 2, "finetune": 2, "loss_curves": 1, **AGG}),
        ({"pretrain.lr": 0.02}, {"pretrain": 3, "perturb": 3, "task_base": 6, "finetune": 6, "loss_curves": 1, **AGG}),
        ({"pretrain.log_every": 7, "pretrain.checkpoint_every": 33}, {}),  # cadence does not change numbers
        ({"analysis.bootstrap": 50}, {"analysis": 1, "figures": 1, "finetune_figures": 1}),
        ({"finetune.learning_rates": [3.0e-3, 1.0e-3]}, {"finetune": 6, **AGG}),  # the new LR on 3 checkpoints x 2 tasks
        ({"finetune.learning_rates": [1.0e-3]}, {"finetune": 6, **AGG}),  # a changed LR: its jobs only, no task_base
        ({"finetune.max_steps": 12}, {"finetune": 6, **AGG}),
        ({"finetune.tasks.mr.max_items.train": 300}, {"task_data": 1, "task_base": 3, "finetune": 3, **AGG}),
        ({"finetune.log_every": 3, "finetune.checkpoint_every": 5}, {}),
    ],
    ids=["nothing", "add-gamma", "add-seed", "add-budget", "change-lr", "logging-only", "bootstrap", "add-ft-lr", "change-ft-lr", "ft-steps", "task-data", "ft-cadence"],
)
def test_config_change_reruns_exactly_the_touched_jobs(smoke_run, tmp_path, change, expected):
    cfg = write_config(tmp_path, smoke_config(study=STUDY, **change))
    jobs = planned_jobs(cfg)
    jobs.pop("all", None), expected.pop("all", None)
    assert jobs == expected


def test_added_gamma_computes_only_new_cells(smoke_run, tmp_path):
    out, _ = smoke_run
    cfg = write_config(tmp_path, smoke_config(study=STUDY, **{"perturb.gammas": [2, 6, 4]}))
    res = snakemake(cfg, "--cores", "2")
    assert res.returncode == 0, res.stderr[-3000:]
    log = (out / "logs" / "perturb" / "tiny-16384.log").read_text()
    assert "2 cells computed, 5 from cache" in log
    metrics = pd.read_parquet(out / "metrics.parquet")
    assert set(metrics["gamma"].dropna()) == {2.0, 4.0, 6.0}


def test_lint_is_clean():
    res = snakemake(ROOT / "tests" / "smoke" / "config.yaml", "--lint")
    assert res.returncode == 0 and "Lints for" not in res.stdout + res.stderr, res.stdout[-3000:]
