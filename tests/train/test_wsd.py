"""Warmup-stable-decay pre-training: a budget's decay branched from the stable run's state gives the
whole WSD run's numbers bit for bit (the schedule itself: tests/train/test_schedules.py)."""

import json

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from pipeline.data.tokenizer import token_stream
from pipeline.train.config import PretrainConfig, steps_for_budget

HP = dict(
    seq_len=32,
    batch_size=4,
    lr=1e-2,
    betas=[0.9, 0.95],
    weight_decay=0.1,
    warmup_fraction=0.1,
    warmup_steps=4,
    grad_clip=1.0,
    checkpoint_every=10,
    log_every=10,
    schedule="wsd",
    decay_fraction=0.25,
)


def test_branch_steps_and_bad_settings() -> None:
    cfg = PretrainConfig(**HP)
    budget = 40 * 4 * 32
    assert cfg.branch_step(budget) == 30  # 40 steps, the last 10 decay
    assert cfg.train_config(40).decay_steps == 10 and cfg.stable_config(30).schedule == "constant_with_warmup"
    assert cfg.train_config(40).branch_key() == cfg.stable_config(30).branch_key()
    assert (
        cfg.train_config(40).branch_key()
        != PretrainConfig(**{**HP, "lr": 2e-2}).stable_config(30).branch_key()
    )
    with pytest.raises(
        ValueError, match=r"pretrain.decay_fraction: the decay of budget 1,280 .*inside the warmup"
    ):
        PretrainConfig(**{**HP, "decay_fraction": 0.9}).branch_step(10 * 4 * 32)
    with pytest.raises(ValueError, match=r"pretrain.warmup_steps: schedule wsd needs the warmup in steps"):
        PretrainConfig(**{**HP, "warmup_steps": None})
    with pytest.raises(ValueError, match=r"pretrain.decay_fraction: 1.5; expected a share"):
        PretrainConfig(**{**HP, "decay_fraction": 1.5})
    with pytest.raises(ValueError, match=r"pretrain.schedule: 'linear' is unknown"):
        PretrainConfig(**{**HP, "schedule": "linear"})


def test_cosine_configs_keep_their_identity() -> None:
    """The WSD fields at their defaults are not in a cosine run's params or resume fingerprint, so
    studies made before they existed keep their jobs and resume states."""
    from pipeline.train.config import hyperparameters

    cosine = {k: v for k, v in HP.items() if k not in ("schedule", "decay_fraction")}
    assert not {"schedule", "decay_fraction", "decay_shape"} & set(hyperparameters(PretrainConfig, cosine))
    assert {"schedule", "decay_fraction"} <= set(hyperparameters(PretrainConfig, HP))
    loop_cfg = PretrainConfig(**cosine).train_config(40)
    assert "decay_steps" not in json.dumps(loop_cfg.fingerprint()) and loop_cfg.decay_steps is None


@pytest.fixture(scope="module")
def train_tokens(tmp_path_factory, tokenizer, moby_docs):
    path = tmp_path_factory.mktemp("tokens") / "train.npy"
    np.save(path, token_stream(tokenizer, [d.text for d in moby_docs[:20]]))
    return path


def test_a_decay_branched_from_the_stable_run_is_the_whole_wsd_run(train_tokens, tokenizer_dir, tmp_path):
    """Stable run to step 12, then to the branch step 30 from there (two DAG edges), then the
    budget's decay from that state: weights, loss curve and init stds equal those of one WSD run."""
    from pipeline.train.pretrain import pretrain_run, stable_run
    from pipeline.train.pretrain_job import PretrainJob

    torch.set_num_threads(1)
    cfg = PretrainConfig(**HP)
    budget = 40 * 4 * 32
    branch = cfg.branch_step(budget)
    common = dict(train_tokens=train_tokens, tokenizer_path=tokenizer_dir, preset="tiny", seed=0, cfg=cfg)
    whole = pretrain_run(
        PretrainJob(budget=budget, out=tmp_path / "whole", state_path=tmp_path / "w", **common)
    )

    segment = PretrainJob(stable_steps=12, out=tmp_path / "at12", state_path=tmp_path / "s12", **common)
    assert stable_run(segment) == 12
    stable_run(
        PretrainJob(
            stable_steps=branch,
            out=tmp_path / f"at{branch}",
            state_path=tmp_path / "s30",
            branch_from=tmp_path / "at12",
            **common,
        )
    )
    decay = pretrain_run(
        PretrainJob(
            budget=budget,
            out=tmp_path / "branched",
            state_path=tmp_path / "b",
            branch_from=tmp_path / f"at{branch}",
            **common,
        )
    )
    a, b = (
        load_file(tmp_path / "whole" / "model.safetensors"),
        load_file(tmp_path / "branched" / "model.safetensors"),
    )
    assert all(torch.equal(a[k], b[k]) for k in a)
    ca = pd.read_parquet(tmp_path / "whole" / "loss_curve.parquet")
    cb = pd.read_parquet(tmp_path / "branched" / "loss_curve.parquet")
    pd.testing.assert_frame_equal(ca, cb)
    assert ca["lr"].iloc[branch - 1] == HP["lr"] and ca["lr"].iloc[-1] < ca["lr"].iloc[branch]
    assert whole["steps"] == decay["steps"] == steps_for_budget(budget, 4, 32)
    assert decay["resumed_from_step"] == branch and decay["decay_start_step"] == branch
    for name in ("init_std.json",):
        assert (tmp_path / "whole" / name).read_text() == (tmp_path / "branched" / name).read_text()
    assert not (tmp_path / "s12").exists() and (tmp_path / "at12").is_dir()  # the branch point stays

    other = PretrainConfig(**{**HP, "lr": 2e-2})
    with pytest.raises(ValueError, match="cannot branch from"):
        pretrain_run(
            PretrainJob(
                budget=budget,
                out=tmp_path / "bad",
                state_path=tmp_path / "bad-state",
                branch_from=tmp_path / f"at{branch}",
                **{**common, "cfg": other},
            )
        )


def test_a_stable_twin_holds_the_stable_run_at_the_budget_tokens(train_tokens, tokenizer_dir, tmp_path):
    """pretrain.stable_twins: the twin of a budget is the stable run's weights at the budget's last step
    (its learning rate never decayed), as a checkpoint directory like the budget's own; it differs from
    the decayed branch at the same tokens, and a state at another step is refused."""
    from pipeline.train import resume
    from pipeline.train.pretrain import pretrain_run, set_up, stable_run, stable_twin
    from pipeline.train.pretrain_job import PretrainJob

    torch.set_num_threads(1)
    cfg = PretrainConfig(**HP)
    budget = 40 * 4 * 32
    steps, branch = steps_for_budget(budget, 4, 32), cfg.branch_step(budget)
    common = dict(train_tokens=train_tokens, tokenizer_path=tokenizer_dir, preset="tiny", seed=0, cfg=cfg)
    at_branch, at_budget = tmp_path / "at-branch", tmp_path / "at-budget"
    stable_run(PretrainJob(stable_steps=branch, out=at_branch, state_path=tmp_path / "s1", **common))
    stable_run(
        PretrainJob(
            stable_steps=steps, out=at_budget, state_path=tmp_path / "s2", branch_from=at_branch, **common
        )
    )
    decayed = pretrain_run(
        PretrainJob(
            budget=budget,
            out=tmp_path / "decayed",
            state_path=tmp_path / "d",
            branch_from=at_branch,
            **common,
        )
    )

    def twin_job(state, out):
        return PretrainJob(budget=budget, out=out, state_path=tmp_path / "t", branch_from=state, **common)

    twin = stable_twin(twin_job(at_budget, tmp_path / "twin"))
    assert twin["tokens_trained"] == decayed["tokens_trained"] == steps * 4 * 32  # equal tokens
    assert twin["phase"] == "stable" and twin["steps"] == steps
    curve = pd.read_parquet(tmp_path / "twin" / "loss_curve.parquet")
    assert len(curve) == steps and (curve["lr"].iloc[branch:] == HP["lr"]).all()  # never decayed
    a, b = (
        load_file(tmp_path / "twin" / "model.safetensors"),
        load_file(tmp_path / "decayed" / "model.safetensors"),
    )
    assert a.keys() == b.keys() and not all(torch.equal(a[k], b[k]) for k in a)
    run = set_up(twin_job(at_budget, tmp_path / "unused"))  # the stable run's own weights at that step
    resume.load_state(at_budget, run.model, None)
    state = {k: v for k, v in run.model.state_dict().items() if k in a}
    assert state.keys() == a.keys() and all(torch.equal(state[k], a[k]) for k in a)
    for name in ("init_std.json", "config.json", "tokenizer.json"):
        assert (tmp_path / "twin" / name).read_text() == (tmp_path / "decayed" / name).read_text()
    with pytest.raises(
        ValueError, match=rf"expected the stable run's state at step {steps} .*found step {branch}"
    ):
        stable_twin(twin_job(at_branch, tmp_path / "bad"))
    assert not (tmp_path / "bad").exists()
