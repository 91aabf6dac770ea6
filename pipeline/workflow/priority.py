"""Coarse to fine: the jobs of a sweep's ends and middle budget run first, then the budgets that
bisect the gaps between those already run, so a partial sweep already spans its whole range (the
findings render from it, saying "n of N budgets"). Snakemake's `priority:` of every job on one
budget (rules pretrain, evaluate, finetune, ...) comes from here."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline.models.checkpoints import CheckpointSpec

# a budget's series: the (model, pre-training seed) whose sweep it belongs to
Series = tuple[str, int | None]
FIRST = 1_000_000  # above every budget's priority: the study's plan, which a partial sweep needs
# the data every budget is made from (corpus, task tables, tokenizer, training tokens): on its chain
# before the jobs that need none of it (theory), so no core waits on it
DATA = FIRST - 1


def coarse_to_fine(n: int) -> list[int]:
    """The positions 0..n-1 of a sorted sweep in run order: both ends (the longest first, the
    critical path of pre-training), the middle, then the middle of each gap, breadth first
    (n 6: 5, 0, 2, 1, 3, 4)."""
    if n <= 0:
        return []
    order = [n - 1] + ([0] if n > 1 else [])
    gaps = deque([(0, n - 1)])
    while gaps:
        lo, hi = gaps.popleft()
        if hi - lo < 2:
            continue
        mid = (lo + hi) // 2
        order.append(mid)
        gaps += [(lo, mid), (mid, hi)]
    return order


def budget_priorities(budgets: Iterable[int]) -> dict[int, int]:
    """Snakemake priority of each budget of one series: n for the first in coarse-to-fine order down
    to 1 for the last (a job on no single budget keeps Snakemake's default, 0)."""
    ordered = sorted(set(budgets))
    return {ordered[pos]: len(ordered) - rank for rank, pos in enumerate(coarse_to_fine(len(ordered)))}


def series_priorities(checkpoints: Mapping[str, CheckpointSpec]) -> dict[Series, dict[int, int]]:
    """budget_priorities of each (model, pre-training seed) series of a study's checkpoints."""
    series: dict[Series, list[int]] = {}
    for spec in checkpoints.values():
        series.setdefault((spec.model, spec.pretrain_seed), []).append(spec.tokens)
    return {key: budget_priorities(budgets) for key, budgets in series.items()}


def job_priority(checkpoints: Mapping[str, CheckpointSpec], wildcards: Mapping[str, str]) -> int:
    """A job's priority from its wildcards: its checkpoint's, or (pre-training) its model, budget and
    seed's; a WSD stable segment, which every later budget of its series needs, the series' highest."""
    table = series_priorities(checkpoints)
    if "checkpoint" in wildcards:
        spec = checkpoints[wildcards["checkpoint"]]
        return table[(spec.model, spec.pretrain_seed)][spec.tokens]
    if "model" in wildcards and "pretrain_seed" in wildcards:
        of_series = table.get((wildcards["model"], int(wildcards["pretrain_seed"])), {})
        if "budget" in wildcards:
            return of_series.get(int(wildcards["budget"]), 0)
        return max(of_series.values(), default=0)
    return 0
