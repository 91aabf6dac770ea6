"""The pre-training sweep under WSD as DAG edges (pipeline/workflow/pretrain_sweep.py): the stable run
cut at the budgets' branch steps, each budget's decay from there, what the sweep costs, and the
settings that stop at start-up (muP's included)."""

import math
import re
from types import SimpleNamespace

import pytest
from workflow_utils import ROOT, smoke_config, snakemake, workflow_config

from pipeline import layout
from pipeline.train.memory import GpuSettings
from pipeline.workflow.cluster import pretrain_resources
from pipeline.workflow.config import check_config
from pipeline.workflow.pretrain_sweep import (
    branch_steps,
    decay_inputs,
    gpu_hours,
    pretrain_ranks,
    runtime_minutes,
    stable_inputs,
    sweep_cost,
    sweep_steps,
    twin_inputs,
)
from pipeline.workflow.schema import ConfigError, load_schema, validate_config

WSD = {"pretrain.schedule": "wsd", "pretrain.warmup_steps": 2}


def config(**overrides) -> dict:
    cfg = workflow_config(smoke_config(study="wsd-test", **overrides))
    validate_config(cfg, load_schema(ROOT / "config" / "schema.yaml"))
    return cfg


def test_the_stable_run_is_a_chain_of_segments_and_each_budget_decays_from_its_branch_step():
    cfg = config(**WSD)  # budgets 16,384 / 65,536 / 262,144 tokens = 32 / 128 / 512 steps of 8 x 64
    assert branch_steps(cfg) == [26, 102, 410]  # 20% of each budget's steps decay

    def stable(step):
        return layout.study_path("wsd-test", layout.PRETRAIN_STABLE, model="tiny", pretrain_seed=0, step=step)

    assert stable_inputs(cfg, "tiny", "0", 26) == {}  # from initialisation
    assert stable_inputs(cfg, "tiny", "0", 102) == {"branch": stable(26)}
    assert stable_inputs(cfg, "tiny", "0", 410) == {"branch": stable(102)}
    assert decay_inputs(cfg, "tiny", "0", 65536) == {"branch": stable(102)}
    assert decay_inputs(config(), "tiny", "0", 65536) == {}  # cosine: every budget from scratch


def test_stable_twins_cut_the_stable_run_at_each_budgets_last_step_too():
    """pretrain.stable_twins: the stable run is also cut where each budget's tokens end (its twin), the
    decays still branch at their branch steps, and each twin is a checkpoint of its own beside the
    budget's (rows' schedule_phase), left out of the metrics table's checkpoints."""
    from pipeline.workflow.params import checkpoint_params
    from pipeline.workflow.targets import main_checkpoints, pretrain_dirs, stable_twins

    cfg = config(**WSD, **{"pretrain.stable_twins": True})
    assert branch_steps(cfg) == [26, 32, 102, 128, 410, 512]  # branch steps + the budgets' 32 / 128 / 512

    def stable(step):
        return layout.study_path("wsd-test", layout.PRETRAIN_STABLE, model="tiny", pretrain_seed=0, step=step)

    assert twin_inputs(cfg, "tiny", "0", 65536) == {"branch": stable(128)}
    assert stable_inputs(cfg, "tiny", "0", 102) == {"branch": stable(32)}  # the chain runs through the twins
    assert decay_inputs(cfg, "tiny", "0", 65536) == {"branch": stable(102)}
    assert sweep_steps(cfg)["wsd"] == 512 + 6 + 26 + 102
    specs = check_config(cfg, check_benchmark_tasks=False)
    twins = stable_twins(specs)
    assert sorted(twins) == ["tiny-16384-s0-stable", "tiny-262144-s0-stable", "tiny-65536-s0-stable"]
    assert {s.row_fields("x")["schedule_phase"] for s in twins.values()} == {"stable"}
    assert {s.row_fields("x")["schedule_phase"] for s in main_checkpoints(specs).values()} == {"decayed"}
    # a sweep run's own checkpoint keeps its params (no rerun of studies made before twins existed),
    # and the pre-training runs (loss curves) are its own, not the twins
    assert all("phase" not in checkpoint_params(s) for s in main_checkpoints(specs).values())
    assert {checkpoint_params(s)["phase"] for s in twins.values()} == {"stable"}
    assert pretrain_dirs(cfg, specs) == [s.path for s in main_checkpoints(specs).values()]
    assert twins["tiny-65536-s0-stable"].path == layout.study_path(
        "wsd-test", layout.PRETRAIN_STABLE_TWIN, model="tiny", pretrain_seed=0, budget=65536
    )


def test_a_new_budget_adds_one_decay_job_and_one_stable_segment(tmp_path):
    """The forced dry run's job counts: 3 budgets give 3 stable segments and 3 decays; a fourth budget
    one more of each (on top of the cosine sweep's jobs, which the schedule does not change); stable
    twins add a segment and a twin per budget."""

    def jobs(budgets, **more) -> dict[str, int]:
        from workflow_utils import write_config

        cfg = smoke_config(study="wsd-test", **WSD, **{"pretrain.budgets": budgets}, **more)
        res = snakemake(write_config(tmp_path, cfg), "-n", "--forceall", "--cores", "1", "--quiet", "rules")
        text = res.stdout + res.stderr
        assert res.returncode == 0, text[-3000:]
        return {r: int(n) for r, n in re.findall(r"^(pretrain\w*)\s+(\d+)$", text, re.M)}

    assert jobs([16384, 65536, 262144]) == {"pretrain": 3, "pretrain_stable": 3}
    assert jobs([16384, 65536, 131072, 262144]) == {"pretrain": 4, "pretrain_stable": 4}
    # stable twins: the stable run cut at each budget's last step too, and each twin written there
    twins = jobs([16384, 65536, 262144], **{"pretrain.stable_twins": True})
    assert twins == {"pretrain": 3, "pretrain_stable": 6, "pretrain_stable_twin": 3}


def test_a_seven_budget_sweep_under_wsd_trains_under_six_tenths_of_cosines_tokens():
    """Seven budgets sqrt(2) apart (config/wsd.yaml): the stable run to the largest branch step plus
    every decay against every budget from scratch, as the start-up log prints it."""
    budgets = [500000, 707107, 1000000, 1414214, 2000000, 2828427, 4000000]
    cfg = config(**WSD, **{"pretrain.budgets": budgets, "pretrain.seq_len": 128, "pretrain.batch_size": 16})
    steps = sweep_steps(cfg)
    assert steps["wsd"] / steps["cosine"] <= 0.6
    text = sweep_cost(cfg)
    assert (
        f"cosine {steps['cosine'] * 16 * 128:,} tokens" in text
        and f"wsd {steps['wsd'] * 16 * 128:,} tokens" in text
    )
    assert "GPU-hours at 50 TFLOP/s delivered per GPU (gpu.tflops)" in text


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"pretrain.schedule": "wsd"}, "pretrain.warmup_steps: schedule wsd needs the warmup in steps"),
        (
            {**WSD, "pretrain.warmup_steps": 30},
            "pretrain.decay_fraction: the decay of budget 16,384 (6 of its 32 steps) would start at step 26, "
            "inside the warmup (30 steps",
        ),
        ({"pretrain.ranks": 3}, "pretrain.batch_size 8 cannot be split evenly over pretrain.ranks 3"),
        (
            {"pretrain.stable_twins": True},
            "pretrain.stable_twins: a budget's stable twin is the undecayed WSD run at its tokens; expected "
            "pretrain.schedule: wsd, got 'cosine'",
        ),
        (
            {"pretrain.parameterization": "mup"},
            "pretrain.parameterization: mup needs a base width, and preset 'tiny' has none; expected one of "
            "['olmo-15m', 'olmo-30m', 'olmo-90m']",
        ),
    ],
)
def test_bad_wsd_settings_stop_at_start_up(change, needle):
    with pytest.raises(ConfigError) as err:
        check_config(config(**change), check_benchmark_tasks=False)
    assert needle in str(err.value)


def test_a_decay_longer_than_the_budget_is_a_schema_error():
    with pytest.raises(ConfigError, match="decay_fraction"):
        config(**WSD, **{"pretrain.decay_fraction": 1.5})


@pytest.mark.parametrize("tflops", [0, -50, None])
def test_a_runtime_model_throughput_that_is_not_positive_stops_at_start_up_naming_the_key(tflops):
    with pytest.raises(ConfigError, match=r"gpu\.tflops"):
        config(**{"gpu.tflops": tflops})
    with pytest.raises(ValueError, match=r"gpu\.tflops: the training throughput one GPU delivers"):
        GpuSettings(tflops=tflops)


def test_the_runtime_model_runs_at_the_configured_measured_throughput():
    """GPU-hours = tokens x the project's FLOPs per token / gpu.tflops (default: the kit's H100
    measurement, 50 TFLOP/s), not a spec-sheet peak times a guessed MFU."""
    cfg = config()
    assert cfg["gpu"]["tflops"] == 50
    from pipeline.models.presets import preset_shape

    flops = preset_shape("tiny", cfg["tokenizer"]["vocab_size"]).train_flops_per_token(
        cfg["pretrain"]["seq_len"]
    )
    assert gpu_hours(cfg, "tiny", 3.6e9) == pytest.approx(3.6e9 * flops / 50e12 / 3600)
    assert gpu_hours(config(**{"gpu.tflops": 100}), "tiny", 3.6e9) == pytest.approx(
        gpu_hours(cfg, "tiny", 3.6e9) / 2
    )


def test_small_presets_pre_train_on_one_gpu_and_large_ones_keep_their_ranks():
    """config/paper-controlled.yaml on 80 GB GPUs, pretrain.ranks null: the memory planner gives
    olmo-15m's budget jobs one GPU each (batch 256 x 1024 fits one) and olmo-90m a node's 8; the
    SLURM resources and time limits follow; a pretrain.ranks set is kept."""
    cfg = workflow_config(ROOT / "config" / "paper-controlled.yaml")
    validate_config(cfg, load_schema(ROOT / "config" / "schema.yaml"))
    assert cfg["pretrain"]["ranks"] is None
    assert pretrain_ranks(cfg, "olmo-15m") == 1
    assert pretrain_ranks(cfg, "olmo-90m") == 8
    resources = pretrain_resources("cuda", {}, cfg, lambda wc: 4_000_000_000)
    small, large = SimpleNamespace(model="olmo-15m", budget="4000000000"), SimpleNamespace(model="olmo-90m")
    assert resources["ranks"](small) == resources["gpu"](small) == 1
    assert resources["ranks"](large) == resources["gpu"](large) == 8
    tokens = 4_000_000_000
    assert runtime_minutes(cfg, "olmo-15m", tokens) == math.ceil(
        gpu_hours(cfg, "olmo-15m", tokens) * 60 * 1.5
    )
    cfg["pretrain"]["ranks"] = 2
    assert pretrain_ranks(cfg, "olmo-15m") == pretrain_ranks(cfg, "olmo-90m") == 2
    cfg["pretrain"]["ranks"], cfg["device"] = None, "cpu"
    assert pretrain_ranks(cfg, "olmo-90m") == 1  # on the CPU: one process unless set
