"""The adaptive learning-rate search through the real Snakefile: checkpoint rounds on a small study,
its path equal to the same search replayed over the runs' scores, the other seed at the choice
only, its cost tabulated, and reruns that touch only what a change or a kill touched."""

import json
import re

import pandas as pd
import pytest
from workflow_utils import ROOT, planned_jobs, smoke_config, snakemake, write_config

from pipeline.layout import format_hparam
from pipeline.sweeps import lr_search
from pipeline.sweeps.selection import selection_scores

STUDY = "ci-search"
SEARCH = {"bracket": [3e-3, 3e-1], "points": 3, "resolution": 0.5, "max_widenings": 1}


def search_config(**search) -> dict:
    return smoke_config(
        study=STUDY,
        **{
            "pretrain.budgets": [16384, 262144],
            "perturb.gammas": [2],
            "perturb.seeds": [0],
            "finetune.tasks": ["code"],
            "finetune.learning_rates": {"search": SEARCH | search},
            "finetune.seeds": [0, 1],
            "curvature.enabled": False,
        },
    )


@pytest.fixture(scope="module")
def search_run(tmp_path_factory):
    out = ROOT / "results" / STUDY
    import shutil

    shutil.rmtree(out, ignore_errors=True)
    cfg = write_config(tmp_path_factory.mktemp("search"), search_config())
    dry = snakemake(cfg, "-n", "--cores", "2")
    assert dry.returncode == 0, dry.stderr[-3000:]
    res = snakemake(cfg, "--cores", "2")
    assert res.returncode == 0, res.stderr[-5000:]
    return out, cfg, dry.stdout + dry.stderr


def test_search_path_is_the_replayed_search_and_seeds_fan_out_at_its_choice(search_run):
    out, _, _ = search_run
    search = lr_search.from_config(SEARCH)
    metrics = pd.read_parquet(out / "metrics.parquet")
    sft = metrics[metrics["modification"] == "sft"]
    scores = selection_scores(sft[sft["seed"] == 0])
    path = pd.read_parquet(out / "analysis" / "lr_search.parquet")
    tuned = pd.read_parquet(out / "analysis" / "finetune_tuned.parquet")
    assert path["checkpoint"].nunique() == 2
    for checkpoint, steps in path.groupby("checkpoint"):
        run_scores = scores[scores["checkpoint"] == checkpoint].set_index("learning_rate")["score"]
        replayed = lr_search.replay(search, lambda lr: run_scores[lr])  # KeyError: a rate it never ran
        assert sorted(steps["learning_rate"]) == sorted(search.lattice[i] for i in replayed.scores)
        assert steps["round"].max() == replayed.round
        chosen = steps.loc[steps["chosen"], "learning_rate"].item()
        assert chosen == search.lattice[replayed.best]
        # the other seed ran at the chosen rate only; the tuned view selects the same rate
        seed1 = sft[(sft["checkpoint"] == checkpoint) & (sft["seed"] == 1)]
        assert set(seed1["learning_rate"]) == {chosen}
        assert set(tuned.loc[tuned["checkpoint"] == checkpoint, "learning_rate"]) == {chosen}
        assert (tuned.loc[tuned["checkpoint"] == checkpoint, "n_seeds"] == 2).all()
    cost = pd.read_parquet(out / "analysis" / "lr_search_cost.parquet")
    assert (cost["runs"] == path.groupby("checkpoint").size().to_numpy() + 1).all()
    assert (cost["grid_runs"] == search.grid_size * 2).all() and (cost["added_latency_s"] >= 0).all()


def test_dry_run_states_the_upper_bound_and_the_run_stays_within_it(search_run):
    out, _, dry = search_run
    search = lr_search.from_config(SEARCH)
    bound = search.runs_bound + 1
    assert f"at most {bound} fine-tuning runs in {search.rounds_bound + 1} rounds" in dry
    assert re.search(rf"at most {2 * bound} runs in all vs {2 * search.grid_size * 2} for the full grid", dry)
    runs = [p for p in (out / "finetune").glob("*/code/sft/lr*_seed*.parquet") if ".line" not in p.name]
    assert 2 * (len(search.start) + 1) <= len(runs) <= 2 * bound


def test_reruns_touch_only_the_rounds(search_run, tmp_path):
    out, cfg, _ = search_run
    assert planned_jobs(cfg) == {}
    # killed in its last round: one run and the round's record missing, nothing after them written;
    # the rerun runs just that run and that round, and the search ends where it did
    search_dir = out / "finetune/tiny-16384-s0/code/sft/lr_search"
    final = json.loads((search_dir / "lam0.json").read_text())
    last = [row for row in final["evaluated"] if row["round"] == final["round"]][0]
    lr = format_hparam(last["learning_rate"])
    (out / f"finetune/tiny-16384-s0/code/sft/lr{lr}_lam0_seed0.parquet").unlink()
    (search_dir / f"lam0_round{final['round']}.json").unlink()
    for name in ("lam0.json", "lam0.parquet", "lam0.line.parquet"):
        (search_dir / name).unlink()
    (
        out / "metrics.parquet"
    ).unlink()  # (Snakemake leaves intermediate files missing under a finished output)
    jobs = planned_jobs(cfg)
    assert jobs.get("finetune") == 1 and jobs.get("lr_search_round") == 1, jobs
    res = snakemake(cfg, "--cores", "2")
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads((search_dir / "lam0.json").read_text()) == final
    # a changed search setting reruns the rounds (from round 0), never a run it already has
    jobs = planned_jobs(write_config(tmp_path, search_config(max_widenings=0)))
    assert jobs.get("lr_search_round") == 2 and "finetune" not in jobs
