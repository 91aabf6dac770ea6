"""The alpaca_eval section: the schema documents the keys, the dataclasses hold the defaults
(pipeline/judge/config.py, pipeline/workflow/cluster.py); the two must agree key for key."""

from dataclasses import MISSING, fields
from pathlib import Path

from pipeline.evaluate.generation_config import GenerationConfig
from pipeline.judge.config import (
    AlpacaEvalConfig,
    InstructionSet,
    JudgeConfig,
    ReferenceRun,
)
from pipeline.workflow.cluster import JUDGE_RESOURCES
from pipeline.workflow.config import load_schema

ROOT = Path(__file__).resolve().parents[2]


def schema_properties(section: str) -> dict:
    return load_schema(ROOT / "config" / "schema.yaml")["properties"][section]["properties"]


def schema_section() -> dict:
    return schema_properties("alpaca_eval")


def defaults(cls) -> dict:
    return {f.name: f.default for f in fields(cls) if f.default is not MISSING}


def test_schema_defaults_are_the_dataclasses():
    section = schema_section()
    for key, cls in (
        ("judge", JudgeConfig),
        ("reference", ReferenceRun),
        ("instructions", InstructionSet),
        ("generation", GenerationConfig),
    ):
        props = section[key]["properties"]
        assert set(props) == {f.name for f in fields(cls)}, key
        assert {k: v["default"] for k, v in props.items()} == defaults(cls), key
    assert {k: v["default"] for k, v in section["resources"]["properties"].items()} == JUDGE_RESOURCES
    assert section["base"]["default"] == defaults(AlpacaEvalConfig)["base"]


def test_the_default_judge_is_the_papers():
    cfg = AlpacaEvalConfig.from_section({})
    assert cfg.judge.model == "meta-llama/Meta-Llama-3-70B-Instruct"  # Appendix B.3
    assert (cfg.reference.learning_rate, cfg.reference.seed) == (1e-5, 0)
    evaluator = cfg.judge.evaluator
    assert (
        evaluator["fn_completion_parser"] == "ranking_parser" and Path(evaluator["prompt_template"]).is_file()
    )


def test_select_metric_enum_is_the_selection_registry():
    from pipeline.sweeps.lr_search import SELECTIONS

    ft = schema_properties("finetune")
    assert ft["select_metric"]["enum"] == list(SELECTIONS) and ft["select_metric"]["default"] == "ppl"
