"""LLaVA through the real Snakefile on a small study: the toy data, the toy tower, stage 1 per
checkpoint (the task's base rows), stage 2 as fine-tuning runs selected on the VLM score, the
figure; a new stage-2 learning rate reruns stage 2 only; bad settings stop before any job."""

import shutil

import pandas as pd
import pytest
from workflow_utils import ROOT, planned_jobs, smoke_config, snakemake, write_config

STUDY = "ci-vlm"
TOY = {
    "stage1_captions": 300,
    "stage2_conversations": 300,
    "stage2_text_only": 20,
    "max_turns": 1,
    "eval_items": {"mme": 12, "gqa": 8, "ai2d": 8, "pope": 4, "textvqa": 8},
}


def vlm_config(**overrides) -> dict:
    return smoke_config(
        study=STUDY,
        **{
            "pretrain.presets": ["small"],  # LLaVA's v1 prompts do not fit tiny's 128 positions
            "pretrain.budgets": [16384, 65536],
            "perturb.gammas": [2],
            "perturb.seeds": [0],
            "finetune.tasks": ["llava"],
            "finetune.learning_rates": [1e-3],
            "finetune.select_metric": "vlm_score",
            "finetune.max_steps": 3,
            "finetune.linearization_tokens": 0,
            "curvature.enabled": False,
            "multimodal.max_length": 256,
            "multimodal.eval_max_new_tokens": 4,
            "multimodal.data.toy": TOY,
            "multimodal.tower": {
                "hidden": 16,
                "layers": 2,
                "text_layers": 1,
                "steps": 10,
                "batch_size": 32,
                "heldout": 32,
            },
            "multimodal.stage1": {"batch_size": 8, "max_steps": 3, "warmup_steps": 1},
            **overrides,
        },
    )


@pytest.fixture(scope="module")
def vlm_run(tmp_path_factory):
    out = ROOT / "results" / STUDY
    shutil.rmtree(out, ignore_errors=True)
    cfg = write_config(tmp_path_factory.mktemp("vlm"), vlm_config())
    res = snakemake(cfg, "--cores", "2")
    assert res.returncode == 0, res.stderr[-5000:]
    yield out, tmp_path_factory.mktemp("vlm-changed")
    shutil.rmtree(out, ignore_errors=True)


def test_both_stages_run_and_stage_two_is_tuned_on_the_vlm_score(vlm_run):
    out, _ = vlm_run
    metrics = pd.read_parquet(out / "metrics.parquet")
    score = metrics[(metrics["eval_data"] == "vlm") & (metrics["metric"] == "vlm_score")]
    assert set(score["modification"]) == {"none", "sft"}  # stage 1 (the base) and stage 2
    assert score.groupby("modification")["checkpoint"].nunique().tolist() == [2, 2]
    ood = metrics[(metrics["modification"] == "sft") & (metrics["eval_data"] == "pretrain")]
    assert set(ood["metric"]) >= {"ppl", "bpb"}  # the language model taken back out
    tuned = pd.read_parquet(out / "analysis" / "finetune_tuned.parquet")
    assert set(tuned["task"]) == {"llava"} and (tuned["learning_rate"] == 1e-3).all()
    assert (out / "figures" / "vlm_benchmarks.png").stat().st_size > 10_000
    assert (out / "finetune" / "small-16384-s0" / "llava" / "projector.pt").is_file()


def test_a_new_stage_two_learning_rate_reruns_stage_two_only(vlm_run):
    _, tmp = vlm_run
    changed = write_config(tmp, vlm_config(**{"finetune.learning_rates": [1e-3, 3e-3]}))
    jobs = planned_jobs(changed)
    assert jobs["vlm_finetune"] == 2  # one per checkpoint at the new rate
    assert not {"vlm_data", "vlm_tower", "vlm_projector", "pretrain", "evaluate"} & set(jobs), jobs
    stage1 = write_config(tmp, vlm_config(**{"multimodal.stage1.lr": 2e-3}), "stage1.yaml")
    jobs = planned_jobs(stage1)
    assert jobs["vlm_projector"] == 2 and jobs["vlm_finetune"] == 2  # stage 2 starts from stage 1
    assert "vlm_tower" not in jobs and "vlm_data" not in jobs


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            {"finetune.methods": {"lora": {"params": {"lora": {"rank": 4}}}}},
            "finetune.methods.lora: a LLaVA task",
        ),
        ({"finetune.tasks": ["llava", "code"]}, "finetune.select_metric: vlm_score is a LLaVA task's"),
        ({"multimodal.data.source": "local"}, "multimodal.data.local.stage1: None does not exist"),
        (
            {"multimodal.tower.source": "hub", "multimodal.tower.cache_dir": "/nonexistent"},
            "multimodal.tower.model_id: openai/clip-vit-large-patch14-336@main is not in the hub cache",
        ),
    ],
)
def test_bad_llava_settings_stop_before_any_job(tmp_path, overrides, message):
    cfg = write_config(tmp_path, vlm_config(**overrides))
    res = snakemake(cfg, "-n", "--cores", "1")
    assert res.returncode != 0 and message in res.stderr + res.stdout, (res.stderr + res.stdout)[-3000:]
