"""One source of truth per hyperparameter: the run-config dataclasses, the schema's sections and
the rules' params agree, so a key cannot silently miss its job."""

from __future__ import annotations

import hashlib
import json
from dataclasses import MISSING, asdict, fields

import pytest
from workflow_utils import ROOT, owned_by_dataclass, smoke_config, workflow_config

from pipeline.curvature.config import CurvatureConfig
from pipeline.fields import tagged
from pipeline.train.config import (
    EXECUTION,
    FinetuneConfig,
    PretrainConfig,
    TrainConfig,
    changes_numbers,
    execution,
    hyperparameters,
    method_fields,
)
from pipeline.workflow.config import check_config
from pipeline.workflow.params import (
    UNNUMBERED,
    curvature_finetune_params,
    curvature_params,
    finetune_params,
    pretrain_params,
    provenance_config,
    task_base_params,
)
from pipeline.workflow.schema import ConfigError, load_schema, validate_config

SCHEMA = load_schema(ROOT / "config" / "schema.yaml")
SECTIONS = {"pretrain": PretrainConfig, "finetune": FinetuneConfig, "curvature": CurvatureConfig}
METHOD_PROPS = SCHEMA["properties"]["finetune"]["properties"]["methods"]["additionalProperties"]["properties"]


def section_props(section: str) -> dict:
    """A section's keys and their schemas; finetune: with the keys each of its methods sets."""
    props = SCHEMA["properties"][section]["properties"]
    return props | METHOD_PROPS if section == "finetune" else props


def test_a_method_sets_exactly_the_method_fields():
    """finetune.methods.<name> holds the METHOD fields, and only there (not beside them in the section)."""
    assert set(METHOD_PROPS) == set(method_fields())
    assert not set(METHOD_PROPS) & set(SCHEMA["properties"]["finetune"]["properties"])


@pytest.mark.parametrize("section", SECTIONS)
def test_every_schema_key_is_a_field_or_declared(section):
    """A key of the schema's section is a hyperparameter (a field) or one of OTHER_KEYS (grid,
    stage switches, threads); every field is a key of the section."""
    cls, props = SECTIONS[section], section_props(section)
    names = {f.name for f in fields(cls)}
    assert not names & set(cls.OTHER_KEYS)
    undeclared = set(props) - names - set(cls.OTHER_KEYS)
    assert not undeclared, (
        f"config {section}: keys {sorted(undeclared)} reach no job: add a field to {cls.__name__}"
    )
    assert names <= set(props), f"{cls.__name__} fields missing from the schema: {sorted(names - set(props))}"
    assert set(cls.OTHER_KEYS) <= set(props)


@pytest.mark.parametrize("section", SECTIONS)
def test_defaults_live_in_one_place(section):
    """The dataclass owns its fields' defaults (the schema declares none) and the schema accepts
    them (types, enums, ranges agree); a field without a default is required by the schema."""
    cls, spec = SECTIONS[section], SCHEMA["properties"][section]
    assert not owned_by_dataclass(cls, section_props(section))
    for f in fields(cls):
        if f.default is MISSING:
            assert f.name in spec["required"], f.name


def test_enums_are_the_modules():
    """The values a run config accepts are the schema's enums (the schema checks them at start-up)."""
    from pipeline.curvature.config import DTYPES
    from pipeline.train.config import PRECISIONS, SCHEDULES

    props = {s: SCHEMA["properties"][s]["properties"] for s in SECTIONS}
    assert props["finetune"]["schedule"]["enum"] == list(SCHEDULES)
    assert (
        props["finetune"]["precision"]["enum"]
        == props["pretrain"]["precision"]["enum"]
        == [*PRECISIONS, None]
    )
    assert props["curvature"]["dtype"]["enum"] == list(DTYPES)


def test_execution_fields_have_one_default():
    """log_every / checkpoint_every: the same default in every run config (they disagreed once);
    they and activation checkpointing change no number, so they are not params."""
    for name in ("log_every", "checkpoint_every", "checkpoint_seconds"):
        assert (
            len(
                {
                    next(f.default for f in fields(c) if f.name == name)
                    for c in (PretrainConfig, FinetuneConfig, TrainConfig)
                }
            )
            == 1
        )
    assert UNNUMBERED == {
        "log_every",
        "checkpoint_every",
        "checkpoint_seconds",
        "activation_checkpointing",
        "compile",
        "threads",
        "ranks",
        "collective_timeout_s",
        "grid_per_job",
    }


def test_params_are_the_fields_that_change_numbers():
    cfg = workflow_config(smoke_config())
    validate_config(cfg, SCHEMA)
    hp = finetune_params(cfg, "sft")
    assert set(hp) == {f.name for f in fields(FinetuneConfig) if f.metadata != EXECUTION}
    assert hp["max_steps"] == 16 and hp["warmup_steps"] is None  # from the config / the default
    assert set(task_base_params(cfg)) == {"seq_len", "eval_batch_size", "eval_max_tokens"}
    # every field that changes numbers; one added later (`when_set`: the schedule, muP) only once set
    assert set(pretrain_params(cfg)) == {
        f.name
        for f in fields(PretrainConfig)
        if changes_numbers(PretrainConfig, f.name) and not tagged(f, "when_set")
    }
    cfg["pretrain"]["schedule"] = "wsd"
    assert pretrain_params(cfg)["schedule"] == "wsd" and "decay_fraction" not in pretrain_params(cfg)
    cfg["pretrain"]["schedule"] = "cosine"
    # the job's config: params + EXECUTION fields from the config, the same values as the config's
    ft = FinetuneConfig(**hp, **execution(FinetuneConfig, cfg["finetune"]))
    assert (ft.batch_size, ft.seq_len, ft.log_every) == (8, 64, cfg["finetune"].get("log_every", 50))
    pt = PretrainConfig(**pretrain_params(cfg), **execution(PretrainConfig, cfg["pretrain"]))
    assert (pt.lr, pt.log_every, pt.checkpoint_every) == (3.0e-2, 50, 100)
    prov = provenance_config(cfg)
    assert (
        "analysis" not in prov
        and "gpu" not in prov
        and not UNNUMBERED & (set(prov["pretrain"]) | set(prov["finetune"]))
    )


def test_a_new_field_reaches_the_job_without_a_key_list():
    """hyperparameters() reads the dataclass: a field added there is in the params."""
    from dataclasses import dataclass, field

    @dataclass(frozen=True)
    class Extended:
        lr: float
        label_smoothing: float = 0.0
        log_every: int = field(default=50, metadata=EXECUTION)

    assert hyperparameters(Extended, {"lr": 1e-3, "log_every": 7}) == {"lr": 1e-3, "label_smoothing": 0.0}
    with pytest.raises(KeyError, match="lr"):
        hyperparameters(Extended, {})


def test_run_configs_build_the_same_loop_config():
    """The loop's config (and its resume fingerprint, which resume files store) as the runs built it."""
    pt = PretrainConfig(128, 16, 3e-2, [0.9, 0.95], 0.1, 0.1, log_every=7)
    assert pt.train_config(100) == TrainConfig(
        100, 3e-2, (0.9, 0.95), 0.1, 0.1, "cosine", 1.0, precision="fp32", checkpoint_every=200, log_every=7
    )
    assert pt.train_config(100, "cuda").precision == "bf16-mixed"  # null precision: by device
    assert (
        PretrainConfig(128, 16, 3e-2, [0.9, 0.95], 0.1, 0.1, warmup_steps=5).train_config(100).warmup_fraction
        == 0.05
    )
    ft = FinetuneConfig(warmup_steps=20, schedule="constant")
    assert ft.train_config(10, 1e-3) == TrainConfig(10, 1e-3, (0.9, 0.999), 0.0, 1.0, "constant", 1.0)
    train = TrainConfig(50, 1e-3)
    # the fingerprint resume files store: the same as before the fields added later (WSD, muP) existed
    added = ("decay_steps", "decay_shape", "mup_width_mult")
    cadence = ("checkpoint_every", "checkpoint_seconds", "log_every")
    numbers = {k: v for k, v in asdict(train).items() if k not in (*cadence, *added)}
    assert (
        train.fingerprint() == hashlib.sha256(json.dumps(numbers, sort_keys=True).encode()).hexdigest()[:16]
    )
    assert TrainConfig(50, 1e-3, decay_steps=10).fingerprint() != train.fingerprint()
    assert "micro_batch_size" not in ft.recorded() and "log_every" not in ft.recorded()
    assert "activation_checkpointing" not in ft.recorded() and ft.recorded()["precision"] is None


def test_curvature_params_split_between_its_jobs():
    """Rule curvature gets the Gaussian and sharpness settings (seeds null: perturb.seeds, the same ε),
    a fine-tuning job only what its line along θ_ft − θ_pre reads; off: None."""
    cfg = workflow_config(smoke_config())
    validate_config(cfg, SCHEMA)
    gauss, ft = curvature_params(cfg), curvature_finetune_params(cfg)
    assert gauss["seeds"] == cfg["perturb"]["seeds"] and gauss["max_tokens"] == 1024
    assert not {"finetune_lambdas_small", "finetune_lambdas_wide"} & set(gauss)
    assert set(ft) == {"finetune_lambdas_small", "finetune_lambdas_wide", "max_tokens", "batch_size", "dtype"}
    CurvatureConfig(**gauss), CurvatureConfig(**ft)
    cfg["curvature"]["enabled"] = False
    assert curvature_finetune_params(cfg) is None


@pytest.mark.parametrize(
    "key", ["lambdas_small", "lambdas_wide", "finetune_lambdas_small", "finetune_lambdas_wide"]
)
def test_a_lambda_grid_without_zero_fails_at_start_up(key):
    cfg = workflow_config(smoke_config(**{f"curvature.{key}": [0.5, 1.0]}))
    validate_config(cfg, SCHEMA)
    with pytest.raises(ConfigError, match=rf"curvature\.{key}: a λ grid must contain 0"):
        check_config(cfg, check_benchmark_tasks=False)


def test_each_method_reruns_only_its_jobs():
    """A method's settings reach only its own jobs' params; a bad one fails at start-up naming it."""
    lora = {"params": {"lora": {"rank": 4, "target_modules": ["q_proj"]}}}
    cfg = workflow_config(smoke_config(**{"finetune.methods": {"sft": {}, "lora": lora}}))
    validate_config(cfg, SCHEMA)
    check_config(cfg, check_benchmark_tasks=False)
    sft, low = finetune_params(cfg, "sft"), finetune_params(cfg, "lora")
    assert sft["params"] == "all" and low["params"] == lora["params"]
    assert {k for k in sft if sft[k] != low[k]} == {"params"}
    bad = workflow_config(
        smoke_config(**{"finetune.methods": {"d": {"proximal": "decoupled"}}, "finetune.lambdas": [0.0, 1e4]})
    )
    validate_config(bad, SCHEMA)  # as the Snakefile does before check_config
    with pytest.raises(ConfigError, match=r"finetune.methods.d.proximal: the decoupled step .* λη > 1"):
        check_config(bad, check_benchmark_tasks=False)
    lora_sharded = {"finetune.methods": {"lora": lora}, "finetune.wise_ft_alphas": [0, 1]}
    sharded = workflow_config(
        smoke_config(**lora_sharded, **{"finetune.ranks": 2, "curvature.enabled": False})
    )
    validate_config(sharded, SCHEMA)
    check_config(sharded, check_benchmark_tasks=False)  # LoRA, WiSE-FT and the gap run sharded
    tangent = {"finetune.methods": {"sft": {}, "tangent": {"linearized": True}}}
    sharded = workflow_config(smoke_config(**tangent, **{"finetune.ranks": 2, "curvature.enabled": False}))
    validate_config(sharded, SCHEMA)
    with pytest.raises(
        ConfigError, match=r"finetune.methods.tangent.linearized: linearized fine-tuning runs in one"
    ):
        check_config(sharded, check_benchmark_tasks=False)
