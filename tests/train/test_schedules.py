"""The hand-written schedules equal transformers' step by step (pipeline/train/schedules.py), WSD's
included (transformers' get_wsd_schedule)."""

import pytest
import torch
from transformers.optimization import (
    get_constant_schedule,
    get_constant_schedule_with_warmup,
    get_cosine_schedule_with_warmup,
    get_wsd_schedule,
)

from pipeline.train.config import DECAY_SHAPES, SCHEDULES
from pipeline.train.schedules import lambda_schedule

REFERENCE = {
    "cosine": lambda opt, warmup, total: get_cosine_schedule_with_warmup(opt, warmup, total),
    "constant_with_warmup": lambda opt, warmup, total: get_constant_schedule_with_warmup(opt, warmup),
    "constant": lambda opt, warmup, total: get_constant_schedule(opt),
}


def _lrs(make, warmup: int, total: int) -> list[float]:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.3)
    sched, out = make(opt, warmup, total), []
    for _ in range(total + 2):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


@pytest.mark.parametrize("name", SCHEDULES)
@pytest.mark.parametrize(("warmup", "total"), [(0, 7), (3, 10), (10, 100), (1, 1)])
def test_schedule_equals_transformers(name: str, warmup: int, total: int) -> None:
    ours = _lrs(lambda opt, w, t: lambda_schedule(opt, name, w, t), warmup, total)
    assert ours == _lrs(REFERENCE[name], warmup, total)  # bit for bit: the same float arithmetic


def test_every_config_schedule_is_built() -> None:
    assert set(REFERENCE) == set(SCHEDULES)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.3)
    with pytest.raises(ValueError, match="linear"):
        lambda_schedule(opt, "linear", 0, 10)


@pytest.mark.parametrize("shape", DECAY_SHAPES)
@pytest.mark.parametrize(("warmup", "decay", "total"), [(0, 1, 7), (3, 2, 10), (10, 20, 100), (5, 45, 50)])
def test_wsd_equals_transformers(shape: str, warmup: int, decay: int, total: int) -> None:
    ours = _lrs(lambda opt, w, t: lambda_schedule(opt, "wsd", w, t, decay, shape), warmup, total)
    theirs = _lrs(
        lambda opt, w, t: get_wsd_schedule(opt, w, decay, num_training_steps=t, decay_type=shape),
        warmup,
        total,
    )
    assert ours == theirs  # bit for bit
    assert ours[total] == 0.0 and max(ours) == 0.3


def test_the_stable_run_has_the_wsd_rates_up_to_the_branch_step() -> None:
    warmup, decay, total = 3, 4, 12
    wsd = _lrs(lambda opt, w, t: lambda_schedule(opt, "wsd", w, t, decay), warmup, total)
    stable = _lrs(REFERENCE["constant_with_warmup"], warmup, total)
    assert wsd[: total - decay + 1] == stable[: total - decay + 1]
    assert wsd[total - decay + 1] < stable[total - decay + 1]
