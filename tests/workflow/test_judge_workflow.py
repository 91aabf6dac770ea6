"""The judged instruction-following metric end to end through the real Snakefile, offline
(config/alpaca-eval-demo.yaml, made smaller): the stand-in instruction-tuned at two learning
rates, its and its fine-tuned models' responses judged by the stand-in against the reference run.
Checks the paper's definitions (the reference scores exactly 0.5), the order randomisation in the
annotations, reproducibility of every annotation, and that a changed judge reruns judging only."""

import shutil

import pandas as pd
import pytest
from workflow_utils import ROOT, planned_jobs, snakemake, workflow_config, write_config

STUDY = "ci-alpaca-eval"
DEMO = ROOT / "config" / "alpaca-eval-demo.yaml"


def judge_config(cache: str, **judge) -> dict:
    cfg = workflow_config(DEMO)
    cfg["study"] = STUDY
    cfg["checkpoints"]["hub"]["cache_dir"] = cache
    # the linearization gap is not what these tests check: off (it took ~18 s of each 135M job)
    cfg["finetune"] |= {
        "max_steps": 2,
        "batch_size": 2,
        "seq_len": 128,
        "eval_max_tokens": 400,
        "linearization_tokens": 0,
    }
    cfg["eval"]["max_tokens"] = 600
    cfg["alpaca_eval"]["instructions"]["max_items"] = 6
    cfg["alpaca_eval"]["generation"]["max_new_tokens"] = 24
    cfg["alpaca_eval"]["judge"] |= {"cache_dir": cache, **judge}
    return cfg


@pytest.fixture(scope="module")
def judged(tmp_path_factory, standin):
    _, cache = standin
    out = ROOT / "results" / STUDY
    shutil.rmtree(out, ignore_errors=True)
    cfg = write_config(tmp_path_factory.mktemp("judge"), judge_config(str(cache)))
    res = snakemake(cfg, "--cores", "2")
    assert res.returncode == 0, res.stderr[-5000:]
    return out, cache, cfg


def annotations(out) -> pd.DataFrame:
    (path,) = (out / "alpaca_eval" / "standin").glob("*/mbpp.annotations.parquet")
    return pd.read_parquet(path)


def test_win_rates_against_the_reference(judged):
    out, _, _ = judged
    m = pd.read_parquet(out / "metrics.parquet")
    rows = m[(m["eval_data"] == "alpaca_eval") & (m["split"] == "eval")]
    label = rows["modification"] + " " + rows["learning_rate"].map("{:g}".format)
    wr = rows.assign(model=label).pivot(index="model", columns="metric", values="value")
    assert set(wr.index) == {"sft 1e-05", "sft 0.0001", "none nan"}
    ref = wr.loc["sft 1e-05"]
    assert ref["win_rate"] == 0.5 and ref["win_rate_se"] == 0 and ref["lc_win_rate"] == 0.5  # by definition
    assert (wr["n_judged"] + wr["n_unparsable"] == 6).all()
    assert wr["win_rate"].between(0, 1).all() and (wr["mean_length"] > 0).all()
    tuned = pd.read_parquet(out / "analysis" / "finetune_tuned.parquet")
    sft = rows[(rows["modification"] == "sft") & (rows["metric"] == "win_rate")]
    best = sft.sort_values(["value", "learning_rate"], ascending=[False, True])["learning_rate"].iloc[0]
    assert set(tuned["learning_rate"]) == {best}  # select_metric: win_rate chooses the higher win rate
    assert (out / "figures" / "alpaca_eval_win_rate.png").is_file()


def test_annotations_randomise_order_and_map_it_back(judged):
    out, _, _ = judged
    a = annotations(out)
    reference = a["generator_2"] == a["generator_1"]
    assert (a.loc[reference, "status"] == "identical").all() and (a.loc[reference, "preference"] == 1.5).all()
    judged_rows = a[a["status"] == "judged"]
    assert len(judged_rows) >= 3  # two steps at 1e-4 change greedy answers (here 6 of 6, and 3 of the base)
    switched = judged_rows["is_switched_outputs"].astype(bool)
    shown, pref = judged_rows["shown_preference"], judged_rows["preference"]
    assert (pref[switched] == 3 - shown[switched]).all() and (pref[~switched] == shown[~switched]).all()
    # the order depends on the instruction only: every model saw a given instruction in the same order
    assert judged_rows.groupby("instruction")["is_switched_outputs"].nunique().max() == 1


def test_rejudging_reproduces_every_annotation_and_a_new_judge_reruns_judging_only(judged, tmp_path):
    out, cache, cfg = judged
    before = annotations(out)
    shutil.rmtree(out / "alpaca_eval" / ".cache")  # no cached answers: the judge answers again
    res = snakemake(cfg, "--cores", "2", "--forcerun", "alpaca_eval_judge")
    assert res.returncode == 0, res.stderr[-5000:]
    after = annotations(out)
    cols = ["generator_2", "instruction", "preference", "shown_preference", "is_switched_outputs", "status"]
    pd.testing.assert_frame_equal(before[cols], after[cols])
    other = write_config(tmp_path, judge_config(str(cache), seed=1))
    jobs = planned_jobs(other)
    assert jobs.get("alpaca_eval_judge") == 1
    assert not {"finetune", "alpaca_eval_base", "evaluate"} & set(jobs)
