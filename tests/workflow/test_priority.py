"""Coarse to fine (pipeline/workflow/priority.py): the sweep's ends and middle first, then bisection;
each job's Snakemake priority from its budget."""

from __future__ import annotations

import math
import re

import pytest
from workflow_utils import smoke_config, snakemake, write_config

from pipeline.models.checkpoints import CheckpointSpec, sweep_checkpoints
from pipeline.workflow import priority
from pipeline.workflow.priority import budget_priorities, coarse_to_fine, job_priority


@pytest.mark.parametrize(
    "n, order",
    [
        (0, []),
        (1, [0]),
        (2, [1, 0]),
        (3, [2, 0, 1]),
        (6, [5, 0, 2, 1, 3, 4]),
        (9, [8, 0, 4, 2, 6, 1, 3, 5, 7]),
    ],
)
def test_coarse_to_fine_order(n, order):
    assert coarse_to_fine(n) == order


@pytest.mark.parametrize("n", range(1, 40))
def test_every_position_once_and_each_level_halves_the_widest_gap(n):
    """After the ends (level 0), each level of bisection (2^j + 1 budgets run) leaves no gap wider
    than ceil((n - 1) / 2^j): a partial sweep spans the whole range, ever more finely."""
    order = coarse_to_fine(n)
    assert sorted(order) == list(range(n))
    j = 0
    while 2**j + 1 <= n:
        run = sorted(order[: 2**j + 1])
        assert max(b - a for a, b in zip(run, run[1:], strict=False)) <= math.ceil((n - 1) / 2**j)
        j += 1


def test_priorities_of_a_log_spaced_sweep():
    budgets = [10**6, 10**7, 10**8, 10**9, 10**10]  # unsorted input, repeated budgets: one each
    prio = budget_priorities(reversed(budgets + [10**8]))
    assert prio == {10**10: 5, 10**6: 4, 10**8: 3, 10**7: 2, 10**9: 1}


def test_job_priority_from_its_wildcards():
    specs = sweep_checkpoints(["tiny", "small"], [100, 200, 300, 400], [0], "t")
    specs.append(CheckpointSpec("hub-a", "hub", "org/m", 5, model_id="org/m", revision="r5"))
    ckpts = {s.name: s for s in specs}
    assert job_priority(ckpts, {"checkpoint": "tiny-400-s0"}) == 4  # the longest
    assert job_priority(ckpts, {"checkpoint": "small-100-s0", "task": "mr"}) == 3  # each series its own
    assert job_priority(ckpts, {"model": "tiny", "budget": "200", "pretrain_seed": "0"}) == 2
    assert job_priority(ckpts, {"model": "tiny", "step": "7", "pretrain_seed": "0"}) == 4  # WSD stable
    assert job_priority(ckpts, {"checkpoint": "hub-a"}) == 1  # a series of one
    assert job_priority(ckpts, {}) == 0  # aggregation: Snakemake's default


def test_the_smoke_study_plans_its_jobs_coarse_to_fine(tmp_path):
    """A dry run shows each budget's jobs with its priority: 262144 (the longest) 3, 16384 2, 65536 1."""
    cfg = write_config(tmp_path, smoke_config(study="ci-priority"))
    res = snakemake(cfg, "-n", "--cores", "2")
    assert res.returncode == 0, res.stderr[-3000:]
    jobs = re.findall(r"rule (\w+):\n(?:    .*\n)*?    wildcards: (.*)\n    priority: (\d+)", res.stdout)
    seen = {}
    for rule, wildcards, prio in jobs:
        budget = re.search(r"(?:budget=|tiny-)(\d+)", wildcards)
        if budget:  # a job on one budget (task tables are on none)
            seen.setdefault(int(budget.group(1)), set()).add((rule, int(prio)))
    expected = {262144: 3, 16384: 2, 65536: 1}
    for budget, prio in expected.items():
        rules = {rule for rule, p in seen[budget]}
        assert {"pretrain", "evaluate", "finetune", "curvature", "ntk"} <= rules, rules
        assert {p for _, p in seen[budget]} == {prio}
    # the data every budget is made from comes before any budget's job
    data_rules = r"rule (corpus|task_data|tokenizer|tokenize_train):\n(?:    .*\n)*?    priority: (\d+)"
    data = re.findall(data_rules, res.stdout)
    assert {rule for rule, _ in data} == {"corpus", "task_data", "tokenizer", "tokenize_train"}, data
    assert {int(p) for _, p in data} == {priority.DATA} and priority.DATA > max(expected.values())
