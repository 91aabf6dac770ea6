"""The VLM benchmarks' registry and the toy's config: what lmms-eval uses, and light at parse time."""

from __future__ import annotations

import ast

import pytest
from workflow_utils import HEAVY, in_fresh_process

from pipeline.multimodal.benchmarks import (
    BENCHMARKS,
    LETTER_ANSWER,
    SHORT_ANSWER,
    VLM_BENCHMARKS,
    VLM_SCORE_PARTS,
    VlmBenchmarkError,
    benchmark,
    max_new_tokens,
)
from pipeline.multimodal.config import EVAL_SETS, ToyDataConfig, ToyDataError, toy_data_config


def test_the_five_benchmarks_as_lmms_eval_runs_them():
    assert VLM_BENCHMARKS == ("mme", "gqa", "ai2d", "pope", "textvqa") == EVAL_SETS
    assert set(VLM_SCORE_PARTS) == set(BENCHMARKS)
    assert {b.hub_path for b in BENCHMARKS.values()} == {
        "lmms-lab/MME",
        "lmms-lab/GQA",
        "lmms-lab/ai2d",
        "lmms-lab/POPE",
        "lmms-lab/textvqa",
    }
    assert (benchmark("gqa").hub_name, benchmark("gqa").split) == ("testdev_balanced_instructions", "testdev")
    assert benchmark("textvqa").split == "validation" and benchmark("pope").split == "test"
    assert SHORT_ANSWER == "\nAnswer the question using a single word or phrase."
    assert benchmark("ai2d").post_prompt == LETTER_ANSWER
    assert {n: b.max_new_tokens for n, b in BENCHMARKS.items()} == {
        "mme": 16,
        "gqa": 16,
        "ai2d": 16,
        "pope": 128,
        "textvqa": None,  # the YAML sets none: the model's default applies
    }
    assert max_new_tokens("textvqa", 32) == 32 and max_new_tokens("pope", 32) == 128
    assert benchmark("mme").metrics == ("mme_perception_score", "mme_cognition_score")
    with pytest.raises(VlmBenchmarkError, match="unknown VLM benchmark 'mmbench'"):
        benchmark("mmbench")


def test_registry_and_config_are_light():
    """The workflow imports both at parse time: no torch / numpy / pandas, and no PIL."""
    modules = ["pipeline.multimodal.benchmarks", "pipeline.multimodal.config"]
    loaded = ast.literal_eval(
        in_fresh_process(modules, f"[m for m in {[*HEAVY, 'PIL']} if m in sys.modules]")
    )
    assert loaded == []


def test_toy_config_defaults_and_checks():
    cfg = ToyDataConfig()
    assert (cfg.image_size, cfg.composite_tiles, cfg.items("pope"), cfg.items("mme")) == (
        32,
        (2, 4),
        100,
        240,
    )
    assert toy_data_config({"seed": 3, "composite_tiles": [2, 3], "eval_fraction": None}).composite_tiles == (
        2,
        3,
    )
    assert (
        toy_data_config({"eval_items": {"gqa": 10}}).items("ai2d") == 200
    )  # a set left out keeps its default
    with pytest.raises(ToyDataError, match="unknown keys \\['sizes'\\]"):
        toy_data_config({"sizes": 1})
    with pytest.raises(ToyDataError, match="composite_tiles"):
        ToyDataConfig(composite_tiles=(1, 5))
    with pytest.raises(ToyDataError, match="two questions per image"):
        ToyDataConfig(eval_items={"mme": 7})
    with pytest.raises(ToyDataError, match="unknown sets \\['vqav2'\\]"):
        ToyDataConfig(eval_items={"vqav2": 5})
    with pytest.raises(ToyDataError, match="image_size"):
        ToyDataConfig(image_size=31)
