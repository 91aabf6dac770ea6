"""The real Snakefile end to end on the smoke config, and exact reruns after config changes."""

import re
import shutil
import subprocess
import sys
import tomllib

import pandas as pd
import pyarrow.parquet as pq
import pytest
from workflow_utils import (
    ROOT,
    SMOKE_STUDY,
    local_smoke_study,
    planned_jobs,
    reordered,
    smoke_config,
    snakemake,
    workflow_config,
    write_config,
)

from pipeline.tables import SCHEMA

STUDY = SMOKE_STUDY
# aggregation downstream of any changed metrics file
AGG = {
    "metrics": 1,
    "analysis": 1,
    "figures": 1,
    "finetune_analysis": 1,
    "finetune_figures": 1,
    "curvature_figures": 1,
    "linearization_figures": 1,
    "findings": 1,
}
LINES = {"curvature_lines": 1}  # the table of every line (Gaussian and fine-tuning)


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """The smoke study, run once (fresh) per session and shared with test_slurm / test_report."""
    out, cfg_path, _ = local_smoke_study(tmp_path_factory.mktemp("cfg"), STUDY)
    return out, cfg_path


def test_smoke_study_outputs(smoke_run):
    out, _ = smoke_run
    metrics = pd.read_parquet(out / "metrics.parquet")
    assert pq.read_schema(out / "metrics.parquet").names == SCHEMA.names
    cfg = smoke_config()
    n_ckpt = len(cfg["pretrain"]["budgets"])
    n_cells = 1 + len(cfg["perturb"]["gammas"]) * len(cfg["perturb"]["seeds"])
    perturb = metrics[
        metrics["modification"].isin(["none", "gaussian"])
        & (metrics["eval_data"] == "pretrain")
        & metrics["metric"].isin(["ppl", "bpb", "loss"])  # not the checkpoints' sharpness rows
    ]
    assert len(perturb) == n_ckpt * n_cells * 3  # ppl, bpb, loss
    assert metrics["config_hash"].nunique() == 1 and metrics["git_commit"].iloc[0] != ""
    ft = cfg["finetune"]
    sft = metrics[metrics["modification"] == "sft"]
    n_runs = n_ckpt * len(ft["tasks"]) * len(ft["learning_rates"]) * len(ft["lambdas"]) * len(ft["seeds"])
    assert sft.groupby(["checkpoint", "task", "learning_rate", "lambda_reg", "seed"]).ngroups == n_runs
    for task in ft["tasks"]:  # the base checkpoint's in-domain metrics are the Δ baseline
        base_id = metrics[
            (metrics["modification"] == "none")
            & (metrics["eval_data"] == task)
            & (metrics["metric"] == "ppl")
        ]
        assert len(base_id) == n_ckpt * 2  # validation + test
    assert (sft[sft["metric"] == "distance_l2"]["value"] > 0).all()
    tuned = pd.read_parquet(out / "analysis" / "finetune_tuned.parquet")
    assert set(tuned["task"]) == set(ft["tasks"]) and tuned["learning_rate"].isin(ft["learning_rates"]).all()
    ppl = perturb[perturb["metric"] == "ppl"]
    assert (ppl["value"] > 1).all() and ppl["value"].notna().all()
    base = ppl[ppl["modification"] == "none"].sort_values("budget")["value"].to_numpy()
    assert base[-1] < base[0], "longer pre-training must improve the unperturbed model"
    for name in (
        "progressive_sensitivity.png",
        "inflection_point.png",
        "pretrain_loss.png",
        "finetune_fixed_lr.png",
        "finetune_tuned.png",
        "finetune_distance.png",
    ):
        assert (out / "figures" / name).stat().st_size > 10_000
    corpus = pd.read_parquet(out / "data" / "corpus.parquet")
    assert set(corpus["split"]) == {"train", "validation", "test"}
    sens = pd.read_parquet(out / "analysis" / "sensitivity.parquet")
    assert set(sens.loc[sens["modification"] == "gaussian", "gamma"]) == set(cfg["perturb"]["gammas"])
    assert set(sens.loc[sens["modification"] == "sft", "learning_rate"]) == set(
        cfg["finetune"]["learning_rates"]
    )
    # Appendix D: every line (Gaussian: each checkpoint x seed; fine-tuning: each run), the sharpness rows
    curv = workflow_config(cfg)["curvature"]
    lines = pd.read_parquet(out / "curvature" / "lines.parquet")
    per_gauss = len(curv["lambdas_small"]) + len(curv["lambdas_wide"])
    per_ft = len(curv["finetune_lambdas_small"]) + len(curv["finetune_lambdas_wide"])
    assert len(lines) == n_ckpt * len(cfg["perturb"]["seeds"]) * per_gauss + n_runs * per_ft
    assert lines["finite"].all() and (lines["eval_tokens"] <= cfg["curvature"]["max_tokens"]).all()
    summary = pd.read_parquet(out / "analysis" / "curvature_summary.parquet")
    assert (summary["quadratic_rel_error"] <= 0.05).all()
    sharp = metrics[metrics["metric"].str.startswith("hessian_")]
    assert len(sharp) == n_ckpt * 5 and (sharp.loc[sharp["metric"] == "hessian_trace", "value"] > 0).all()
    for name in ("curvature_gaussian.png", "curvature_finetune.png", "sharpness.png"):
        assert (out / "figures" / name).stat().st_size > 10_000


def test_same_config_gives_the_same_numbers(smoke_run, tmp_path):
    """Rerun the perturbation of one checkpoint from scratch (cache cleared), each job in its own
    process this time (the smoke study's ran in forks of the warm-start server): identical values."""
    out, cfg_path = smoke_run
    before = pd.read_parquet(out / "perturb" / "tiny-65536-s0.parquet")
    shutil.rmtree(out / "perturb" / ".cells" / "tiny-65536-s0")
    cold = ("--config", "warm_start=False")
    res = snakemake(cfg_path, "--cores", "1", "--forcerun", "evaluate", "--until", "evaluate", *cold)
    assert res.returncode == 0, res.stderr[-3000:]
    after = pd.read_parquet(out / "perturb" / "tiny-65536-s0.parquet")
    pd.testing.assert_frame_equal(before, after)


@pytest.mark.parametrize(
    "change, expected",
    [
        ({}, {}),
        ({"perturb.gammas": [2, 6, 4]}, {"evaluate": 3, **AGG}),
        # curvature.seeds null: the Gaussian lines follow perturb.seeds
        ({"perturb.seeds": [0, 1, 2]}, {"evaluate": 3, "curvature": 3, **LINES, **AGG}),
        (
            {"pretrain.budgets": [16384, 65536, 262144, 131072]},
            {
                "sweep_plan": 1,  # the new budget in the study's plan
                "pretrain": 1,
                "evaluate": 1,
                "curvature": 1,
                "ntk": 1,
                "finetune": 2,
                "loss_curves": 1,
                **LINES,
                **AGG,
            },
        ),
        (
            {"pretrain.lr": 0.02},
            {
                "pretrain": 3,
                "evaluate": 3,
                "curvature": 3,
                "ntk": 3,
                "finetune": 6,
                "loss_curves": 1,
                **LINES,
                **AGG,
            },
        ),
        ({"pretrain.log_every": 7, "pretrain.checkpoint_every": 33}, {}),  # cadence does not change numbers
        (
            {"pretrain.threads": 2, "perturb.threads": 2, "finetune.threads": 2, "curvature.threads": 2},
            {},
        ),  # neither do threads
        (
            {"analysis.ci": 0.9},
            {"analysis": 1, "figures": 1, "finetune_figures": 1},  # the minima's intervals
        ),
        (
            {"finetune.learning_rates": [3.0e-3, 1.0e-3]},
            {"finetune": 6, **LINES, **AGG},
        ),  # the new LR on 3 checkpoints x 2 tasks
        (
            {"finetune.learning_rates": [1.0e-3]},
            {"finetune": 6, **LINES, **AGG},
        ),  # a changed LR: its jobs only, no evaluate
        ({"finetune.max_steps": 12}, {"finetune": 6, **LINES, **AGG}),
        (
            {"finetune.task_data.mr.max_items.train": 300},
            {"task_data": 1, "token_coverage": 1, "evaluate": 3, "finetune": 3, "ntk": 3, **LINES, **AGG},
        ),
        ({"finetune.log_every": 3, "finetune.checkpoint_every": 5}, {}),
        ({"eval.benchmarks.num_fewshot": 3}, {}),  # benchmark settings without benchmark tasks
        # benchmarks on: each checkpoint's evaluate job reruns (its perplexity cells from their cache);
        # fine-tuned models are scored in their (rerun) jobs
        (
            {"eval.benchmarks.tasks": ["copa"], "eval.benchmarks.limit": 4},
            {"evaluate": 3, "finetune": 6, "benchmark_figures": 1, **LINES, **AGG},
        ),
        # the sharpness and Gaussian lines: the curvature jobs; the eval settings they do not read: none
        ({"curvature.probes": 6}, {"curvature": 3, **LINES, **AGG}),
        ({"eval.batch_size": 32}, {"evaluate": 3, "finetune": 6, **LINES, **AGG}),
        # the fine-tuning direction's grid: its line lives in the fine-tuning job (no second load)
        ({"curvature.finetune_lambdas_wide": [-1, 0, 1]}, {"finetune": 6, **LINES, **AGG}),
        # off: no curvature jobs; fine-tuning jobs rerun once (their line tables become empty)
        (
            {"curvature.enabled": False},
            {"finetune": 6, **{k: v for k, v in AGG.items() if k != "curvature_figures"}},
        ),
    ],
    ids=[
        "nothing",
        "add-gamma",
        "add-seed",
        "add-budget",
        "change-lr",
        "logging-only",
        "threads-only",
        "interval-level",
        "add-ft-lr",
        "change-ft-lr",
        "ft-steps",
        "task-data",
        "ft-cadence",
        "bench-off",
        "bench-on",
        "curvature-probes",
        "eval-batch",
        "curvature-ft-grid",
        "curvature-off",
    ],
)
def test_config_change_reruns_exactly_the_touched_jobs(smoke_run, tmp_path, change, expected):
    cfg = write_config(tmp_path, smoke_config(study=STUDY, **change))
    jobs = planned_jobs(cfg)
    jobs.pop("all", None), expected.pop("all", None)
    assert jobs == expected


def test_a_reordered_config_reruns_nothing(smoke_run, tmp_path):
    """Params by meaning: the finished study's whole config (config.yaml under the smoke config), every
    mapping's keys in reverse order and integer settings written as whole floats, plans no job."""
    cfg = reordered(workflow_config(smoke_config(study=STUDY)))
    cfg["pretrain"]["batch_size"] = float(cfg["pretrain"]["batch_size"])  # 8.0
    cfg["eval"]["max_tokens"] = float(cfg["eval"]["max_tokens"])
    res = snakemake(write_config(tmp_path, cfg), "-n", "--replace-workflow-config", "--cores", "1")
    text = res.stdout + res.stderr
    assert res.returncode == 0 and "Nothing to be done" in text, text[-3000:]


def test_added_gamma_computes_only_new_cells(smoke_run, tmp_path):
    out, _ = smoke_run
    cfg = write_config(tmp_path, smoke_config(study=STUDY, **{"perturb.gammas": [2, 6, 4]}))
    res = snakemake(cfg, "--cores", "2")
    assert res.returncode == 0, res.stderr[-3000:]
    log = (out / "logs" / "evaluate" / "tiny-16384-s0.log").read_text()
    assert "2 cells computed, 5 from cache" in log
    metrics = pd.read_parquet(out / "metrics.parquet")
    assert set(metrics["gamma"].dropna()) == {2.0, 4.0, 6.0}


def test_lint_is_clean():
    res = snakemake(ROOT / "tests" / "smoke" / "config.yaml", "--lint")
    assert res.returncode == 0 and "Lints for" not in res.stdout + res.stderr, res.stdout[-3000:]


def test_unknown_executor_is_an_error(tmp_path):
    cfg = write_config(tmp_path, smoke_config(study="ci-executor"))
    res = snakemake(cfg, "--executor", "slurmm", "--jobs", "1")
    assert res.returncode != 0 and "invalid choice: 'slurmm'" in res.stderr
    profile = tmp_path / "profile"
    profile.mkdir()
    (profile / "config.yaml").write_text("executor: slurmm\n")
    res = snakemake(cfg, "--profile", str(profile))
    assert res.returncode != 0 and "invalid choice: 'slurmm'" in res.stderr


def test_snakefiles_are_snakefmt_formatted():
    """`snakefmt --check` on the Snakefile and rules/ (line length: the project's, from pyproject.toml)."""
    line_length = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["line-length"]
    cmd = [
        sys.executable,
        "-m",
        "snakefmt",
        "--check",
        "--line-length",
        str(line_length),
        "Snakefile",
        "rules",
    ]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, (
        f"run: snakefmt --line-length {line_length} Snakefile rules\n{res.stdout[-2000:]}{res.stderr[-3000:]}"
    )


def job_resources_in_dry_run(configfile, *args):
    """rule -> resources line of the first job of that rule in a dry run."""
    res = snakemake(configfile, "-n", "--forceall", *args)
    assert res.returncode == 0, res.stderr[-3000:]
    out, rule = {}, None
    for line in (res.stdout + res.stderr).splitlines():
        m = re.match(r"\s*(?:localrule|rule) (\w+):", line)
        rule = m.group(1) if m else rule
        m = re.match(r"\s*resources: (.*)", line)
        if m and rule and rule not in out:
            out[rule] = dict(kv.split("=", 1) for kv in m.group(1).split(", "))
    return out


def test_retries_ask_for_more_memory_and_time(tmp_path):
    """Resources are functions of the attempt: attempt n asks for n x mem_mb and runtime (profiles/slurm
    retries)."""
    cfg = write_config(tmp_path, smoke_config(study="ci-attempt"))
    first, third = job_resources_in_dry_run(cfg), job_resources_in_dry_run(cfg, "--attempt", "3")
    for rule in ("corpus", "pretrain", "evaluate", "metrics", "figures"):
        assert int(third[rule]["mem_mb"]) == 3 * int(first[rule]["mem_mb"]) > 0, rule
        assert int(third[rule]["runtime"]) == 3 * int(first[rule]["runtime"]) > 0, rule
    assert first["pretrain"]["gpu"] == third["pretrain"]["gpu"] == "0"  # device: cpu


def test_paper_scale_dry_run_and_its_time():
    """bench/bench_dryrun.py: the paper-scale DAG (plain, through profiles/slurm with device cuda, and
    with the adaptive learning-rate search instead of the grid)."""
    # one fine-tuning task keeps CI short: 3 sizes x 6 budgets x 27 LRs x 3 seeds = 1,458 jobs
    res = subprocess.run(
        [sys.executable, "bench/bench_dryrun.py", "--tasks", "code", "--search"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    assert re.search(r"pretrain\s+18\n", res.stdout) and re.search(r"evaluate\s+18\n", res.stdout)
    assert re.search(r"finetune\s+1458\n", res.stdout)
    assert re.search(r"dry run of the paper-scale grid: [\d.]+ s", res.stdout)
    assert re.search(r"through profiles/slurm \(device cuda\): [\d.]+ s", res.stdout)
    # the search instead of the grid: its bound, before anything runs, within 40% of the grid's jobs
    bound = re.search(r"at most (\d+) runs in all vs (\d+) for the full grid", res.stdout)
    assert bound and int(bound.group(1)) <= 0.4 * int(bound.group(2)), res.stdout[-3000:]
