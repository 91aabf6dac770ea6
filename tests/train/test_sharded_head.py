"""The fused head under FSDP2 on 2 CPU ranks (gloo, torchrun): the model's layers, output layer and
root each sharded, training and evaluation go through `FusedHead` (spied on), with the loss, every
gradient and the evaluation NLL of one whole model's full float32 logits."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from pipeline.train.launch import torchrun_command

WORKER = Path(__file__).with_name("sharded_head_worker.py")


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> dict:
    """The worker's findings in fp32 and bf16-mixed (one torchrun launch)."""
    out = tmp_path_factory.mktemp("sharded-head") / "found.json"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    subprocess.run(torchrun_command(2, str(WORKER), str(out)), env=env, check=True, timeout=300)
    return json.loads(out.read_text())


def test_two_ranks_train_and_evaluate_through_the_fused_head(sharded):
    got = sharded["fp32"]
    assert got["calls"]["fused_linear_cross_entropy"] == 1 and got["calls"]["linear_nll_sum"] == 1
    assert got["head_is_sharded"] == "DTensor"  # the head's weight is a shard outside its forward
    assert got["loss"] == pytest.approx(got["ref_loss"], rel=1e-6)
    assert got["nll"] == pytest.approx(got["ref_nll"], rel=1e-6)
    assert "lm_head.weight" in got["grad_err"] and max(got["grad_err"].values()) < 1e-5, got["grad_err"]


def test_two_ranks_in_bf16_mixed_use_the_fused_head_with_bf16_layers(sharded):
    """FSDP2's bf16 parameters in the layers, the head in float32 (its own policy): bf16 rounding of
    the activations only."""
    got = sharded["bf16-mixed"]
    assert got["calls"]["fused_linear_cross_entropy"] == 1
    assert got["loss"] == pytest.approx(got["ref_loss"], rel=1e-2)
    assert max(got["grad_err"].values()) < 5e-2, got["grad_err"]
