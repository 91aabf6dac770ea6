"""The alpaca_eval section: the schema has the keys' types, enums and ranges, the dataclasses
(pipeline/judge/config.py, pipeline/evaluate/generation_config.py) the defaults; the two must agree
key for key."""

from dataclasses import fields
from pathlib import Path

from workflow_utils import owned_by_dataclass

from pipeline.evaluate.generation_config import GenerationConfig
from pipeline.judge.config import (
    BACKENDS,
    AlpacaEvalConfig,
    InstructionSet,
    JudgeConfig,
    JudgeResources,
    ReferenceRun,
)
from pipeline.workflow.schema import load_schema

ROOT = Path(__file__).resolve().parents[2]


def schema_properties(section: str) -> dict:
    return load_schema(ROOT / "config" / "schema.yaml")["properties"][section]["properties"]


def schema_section() -> dict:
    return schema_properties("alpaca_eval")


def test_the_dataclasses_own_the_defaults():
    """Every key of the section is a field (and the other way round), the schema declares no
    default, and it accepts every dataclass default (types, enums, ranges agree)."""
    section = schema_section()
    parts = {"judge": JudgeConfig, "reference": ReferenceRun, "instructions": InstructionSet}
    parts |= {"generation": GenerationConfig, "resources": JudgeResources}
    assert parts == AlpacaEvalConfig.PARTS
    assert set(section) == {f.name for f in fields(AlpacaEvalConfig)}
    assert not owned_by_dataclass(AlpacaEvalConfig, section)
    for key, cls in parts.items():
        props = section[key]["properties"]
        assert set(props) == {f.name for f in fields(cls)}, key
        assert not owned_by_dataclass(cls, props), key
    assert sorted(section["judge"]["properties"]["backend"]["enum"]) == sorted(BACKENDS)


def test_an_absent_section_is_the_defaults():
    assert AlpacaEvalConfig.from_section(None) == AlpacaEvalConfig() and not AlpacaEvalConfig().enabled


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
