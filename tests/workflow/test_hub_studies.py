"""Hub studies in Snakemake: the lock at start-up (onstart) stops a study whose budgets serve
identical weights before any job runs, naming both revisions and the hash; a family study's dry
run plans every seed at every selected revision."""

from __future__ import annotations

import shutil

from pipeline.models.hub import file_sha256, snapshot_into_cache
from tests.models.test_integrity import MODEL, tiny_model
from tests.workflow_utils import ROOT, planned_jobs, smoke_config, snakemake, write_config


def test_duplicate_weights_stop_the_study_before_any_job(tmp_path):
    cache = tmp_path / "hf-cache"
    for rev, seed in {"step1000-tokens4M": 0, "step2000-tokens8M": 1, "step3000-tokens12M": 0}.items():
        snapshot_into_cache(tiny_model(tmp_path / rev, seed, rev), MODEL, rev, cache)
    study = "hub-lock-duplicates"
    hub = {"model_id": MODEL, "revisions": ["step1000-tokens4M", "step2000-tokens8M", "step3000-tokens12M"]}
    cfg = smoke_config(
        study=study,
        **{
            "checkpoints.source": "hub",
            "checkpoints.hub": hub | {"cache_dir": str(cache), "offline": True},
            "finetune.enabled": False,
            "curvature.enabled": False,
            "theory.enabled": False,
        },
    )
    shutil.rmtree(ROOT / "results" / study, ignore_errors=True)
    try:
        res = snakemake(write_config(tmp_path, cfg), "--cores", "1", "all")
        text = res.stdout + res.stderr
        assert res.returncode != 0, text[-3000:]
        digest = file_sha256(tmp_path / "step1000-tokens4M" / "model.safetensors")
        assert f"{MODEL}@step1000-tokens4M" in text and f"{MODEL}@step3000-tokens12M" in text, text[-3000:]
        assert digest in text and "identical weights" in text
        assert "Finished job" not in text and "rule evaluate:" not in text  # no job started
        written = [p for p in (ROOT / "results" / study).rglob("*") if p.is_file()]
        assert written == [], written
    finally:
        shutil.rmtree(ROOT / "results" / study, ignore_errors=True)


def test_polypythia_study_plans_every_seed_at_every_selected_revision():
    """config/polypythia.yaml: 9 seeds x 11 revisions (12 log-spaced targets over 1B-300B, one
    duplicate dropped) = 99 checkpoints; per checkpoint 1 evaluation job (perturbation, the
    in-domain base of code and gsm8k: one model load) and 2 tasks x 5 learning rates of fine-tuning
    (one fine-tuning seed)."""
    jobs = planned_jobs(ROOT / "config" / "polypythia.yaml")
    assert (jobs["evaluate"], jobs["finetune"]) == (99, 990), jobs
    assert "perturb" not in jobs and "task_base" not in jobs
