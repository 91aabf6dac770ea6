"""The training loop: schedule, resumption after a kill, divergence, budgets."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from pipeline.data.batches import ChunkSampler
from pipeline.data.tokenizer import token_stream
from pipeline.train.config import PretrainConfig, TrainConfig, steps_for_budget
from pipeline.train.loop import make_optimizer, make_schedule, train
from pipeline.train.pretrain_job import PretrainJob

HP = dict(
    seq_len=32,
    batch_size=4,
    lr=1e-2,
    betas=[0.9, 0.95],
    weight_decay=0.1,
    warmup_fraction=0.1,
    grad_clip=1.0,
    checkpoint_every=10,
    log_every=10,
)


@pytest.fixture(scope="module")
def train_tokens(tmp_path_factory, tokenizer, moby_docs):
    path = tmp_path_factory.mktemp("tokens") / "train.npy"
    np.save(path, token_stream(tokenizer, [d.text for d in moby_docs[:20]]))
    return path


def test_cosine_schedule_warms_up_and_reaches_exactly_zero(tiny_model):
    cfg = TrainConfig(steps=50, lr=1e-3, warmup_fraction=0.1)
    opt = make_optimizer(tiny_model, cfg)
    sched = make_schedule(opt, cfg)
    lrs = []
    for _ in range(cfg.steps):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    assert lrs[0] == 0.0 and max(lrs) == pytest.approx(1e-3)
    assert int(np.argmax(lrs)) == 5  # 10% warmup
    assert sched.get_last_lr()[0] == 0.0  # at the budget


def test_weight_decay_only_on_matrices(tiny_model):
    opt = make_optimizer(tiny_model, TrainConfig(steps=1, lr=1e-3, weight_decay=0.1))
    decayed = {id(p) for g in opt.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    for name, p in tiny_model.named_parameters():
        assert (id(p) in decayed) == (p.dim() >= 2), name


def test_sampler_is_a_pure_function_of_step(train_tokens):
    tokens = np.load(train_tokens)
    a, b = ChunkSampler(tokens, 32, 4, seed=3), ChunkSampler(tokens, 32, 4, seed=3)
    assert torch.equal(a.batch(17)["input_ids"], b.batch(17)["input_ids"])
    batch = a.batch(0)
    assert torch.equal(batch["input_ids"][:, 1:], batch["labels"][:, :-1])  # labels are shifted inputs
    assert not torch.equal(a.batch(0)["input_ids"], ChunkSampler(tokens, 32, 4, seed=4).batch(0)["input_ids"])


def test_resume_in_process_gives_identical_numbers(tiny_model, train_tokens, tmp_path):
    tokens = np.load(train_tokens)
    sampler = ChunkSampler(tokens, 32, 4, seed=0)
    cfg = TrainConfig(steps=30, lr=1e-2, checkpoint_every=10, log_every=5)
    init = {k: v.clone() for k, v in tiny_model.state_dict().items()}
    straight = train(tiny_model, sampler.batch, cfg)
    want = {k: v.clone() for k, v in tiny_model.state_dict().items()}

    tiny_model.load_state_dict(init)
    state = tmp_path / "state.pt"
    first = train(tiny_model, sampler.batch, cfg, state_path=state, stop_after=13)
    assert first.steps_done == 13 and state.exists()
    tiny_model.load_state_dict(init)  # a fresh process would start from a fresh model
    resumed = train(tiny_model, sampler.batch, cfg, state_path=state)
    assert resumed.resumed_from == 13
    assert resumed.losses == straight.losses
    for k, v in tiny_model.state_dict().items():
        assert torch.equal(v, want[k]), k


def test_resume_file_from_other_hyperparameters_is_refused(tiny_model, train_tokens, tmp_path):
    sampler = ChunkSampler(np.load(train_tokens), 32, 4, seed=0)
    state = tmp_path / "state.pt"
    train(
        tiny_model,
        sampler.batch,
        TrainConfig(steps=20, lr=1e-2, checkpoint_every=5),
        state_path=state,
        stop_after=5,
    )
    with pytest.raises(ValueError, match="other hyperparameters"):
        train(tiny_model, sampler.batch, TrainConfig(steps=20, lr=2e-2, checkpoint_every=5), state_path=state)


def test_diverging_run_is_recorded_not_raised(tiny_model, train_tokens):
    sampler = ChunkSampler(np.load(train_tokens), 32, 4, seed=0)
    with torch.no_grad():
        tiny_model.lm_head.weight.fill_(float("nan"))
    result = train(tiny_model, sampler.batch, TrainConfig(steps=20, lr=1e-2, log_every=5))
    assert result.diverged and result.steps_done == 5


def test_budget_smaller_than_one_batch_is_an_error():
    with pytest.raises(ValueError, match="smaller than one batch"):
        steps_for_budget(100, batch_size=4, seq_len=32)
    assert steps_for_budget(1000, 4, 32) == 7


RUN = textwrap.dedent(
    """
    import json, sys, torch
    torch.set_num_threads(1)
    from pipeline.train.config import PretrainConfig
    from pipeline.train.pretrain import pretrain_run
    from pipeline.train.pretrain_job import PretrainJob
    args = json.loads(sys.argv[1])
    pretrain_run(PretrainJob(cfg=PretrainConfig(**args.pop("hp")), **args))
    """
)


# RUN, its second resume state's write hanging in the background writer (DCP's thread): the file
# named by argv[2] appears once that write is under way, while training goes on
HANGING_WRITE = (
    textwrap.dedent(
        """
    import pathlib, sys, time
    import torch.distributed.checkpoint.filesystem as fs
    write, writes = fs.FileSystemWriter.write_data, []
    def hanging(self, plan, planner):
        writes.append(1)
        if len(writes) == 2:
            pathlib.Path(sys.argv[2]).touch()
            time.sleep(600)
        return write(self, plan, planner)
    fs.FileSystemWriter.write_data = hanging
    """
    )
    + RUN
)


def _pretrain(args: dict, kill_when: Path | None = None, script: str = RUN) -> int:
    proc = subprocess.Popen(
        [sys.executable, "-c", script, json.dumps(args), str(kill_when)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    if kill_when is None:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()[-2000:]
        return proc.returncode
    deadline = time.time() + 120
    while not kill_when.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.002)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    return proc.returncode


def test_killed_pretraining_resumes_with_the_same_numbers(train_tokens, tokenizer_dir, tmp_path):
    """SIGKILL a real pre-training process after its first resume state; rerun; same weights and curve."""
    hp = {**HP, "checkpoint_every": 20}
    common = dict(
        train_tokens=str(train_tokens),
        tokenizer_path=str(tokenizer_dir),
        preset="tiny",
        budget=600 * 4 * 32,
        seed=0,
        hp=hp,
        allow_repeat=True,  # a short split: this test is about resuming
    )
    _pretrain({**common, "out": str(tmp_path / "straight"), "state_path": str(tmp_path / "s1.pt")})

    state = tmp_path / "s2.pt"
    out = tmp_path / "resumed"
    rc = _pretrain({**common, "out": str(out), "state_path": str(state)}, kill_when=state)
    assert rc == -signal.SIGKILL
    assert state.exists() and not out.exists(), "a killed run must leave no output that looks complete"
    _pretrain({**common, "out": str(out), "state_path": str(state)})
    summary = json.loads((out / "summary.json").read_text())
    assert summary["resumed_from_step"] >= 20
    assert not state.exists()

    a, b = load_file(tmp_path / "straight" / "model.safetensors"), load_file(out / "model.safetensors")
    for k in a:
        assert torch.equal(a[k], b[k]), k
    ca, cb = (
        pd.read_parquet(tmp_path / "straight" / "loss_curve.parquet"),
        pd.read_parquet(out / "loss_curve.parquet"),
    )
    pd.testing.assert_frame_equal(ca, cb)
    assert json.loads((out / "init_std.json").read_text()) == json.loads(
        (tmp_path / "straight" / "init_std.json").read_text()
    )


def test_a_job_killed_while_its_state_is_written_in_the_background_resumes_bit_for_bit(
    train_tokens, tokenizer_dir, tmp_path
):
    """States on the time cadence (checkpoint_seconds 0: at every logging step), written by DCP's
    background thread while training goes on: SIGKILL while the second is half written (its writer
    held mid-write). The last complete state is the first one, the partial one is beside it and not
    read; the rerun resumes from the first and ends with the uninterrupted run's weights and curve."""
    hp = {**HP, "checkpoint_every": 10**6, "checkpoint_seconds": 0, "log_every": 20}
    common = dict(
        train_tokens=str(train_tokens),
        tokenizer_path=str(tokenizer_dir),
        preset="tiny",
        budget=100 * 4 * 32,
        seed=0,
        hp=hp,
        allow_repeat=True,
    )
    _pretrain({**common, "out": str(tmp_path / "straight"), "state_path": str(tmp_path / "s1")})

    state, out, writing = tmp_path / "s2", tmp_path / "resumed", tmp_path / "writing"
    args = {**common, "out": str(out), "state_path": str(state)}
    assert _pretrain(args, kill_when=writing, script=HANGING_WRITE) == -signal.SIGKILL
    assert writing.exists() and not out.exists()
    assert torch.load(state / "extra.pt", weights_only=False)["step"] == 20  # the first state, complete
    partial = tmp_path / "s2.tmp"
    assert partial.is_dir() and not (partial / ".metadata").exists()  # the second, never swapped in
    _pretrain(args)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["resumed_from_step"] == 20
    assert not state.exists() and not partial.exists()

    a, b = load_file(tmp_path / "straight" / "model.safetensors"), load_file(out / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    pd.testing.assert_frame_equal(
        pd.read_parquet(tmp_path / "straight" / "loss_curve.parquet"),
        pd.read_parquet(out / "loss_curve.parquet"),
    )


def test_a_budget_beyond_the_training_split_stops_before_any_step(train_tokens, tokenizer_dir, tmp_path):
    """More tokens than the split holds would repeat data: the run stops before training, naming the
    budget and the split's size, unless pretrain.allow_repeat; then summary.json records epochs > 1."""
    from pipeline.train.pretrain import pretrain_run

    available = (len(np.load(train_tokens)) - 1) // 32 * 32
    budget = (available // 128 + 2) * 128  # whole steps of 4 x 32, just past the split
    common = dict(
        train_tokens=train_tokens, tokenizer_path=tokenizer_dir, preset="tiny", budget=budget, seed=0
    )
    cfg = PretrainConfig(**{**HP, "lr": 1e-3})
    with pytest.raises(ValueError, match=rf"pretrain.budgets: budget {budget:,} .*{available:,} tokens"):
        pretrain_run(PretrainJob(cfg=cfg, out=tmp_path / "out", state_path=tmp_path / "s.pt", **common))
    assert not (tmp_path / "out").exists() and not (tmp_path / "s.pt").exists()  # nothing was trained
    summary = pretrain_run(
        PretrainJob(cfg=cfg, out=tmp_path / "out", state_path=tmp_path / "s.pt", allow_repeat=True, **common)
    )
    assert summary["epochs"] > 1 and summary["seed"] == 0
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["epochs"] == summary["epochs"]
