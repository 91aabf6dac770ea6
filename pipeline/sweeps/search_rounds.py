"""The adaptive learning-rate search's jobs (pipeline/sweeps/lr_search.py holds its logic): a round
scores the runs it was given and decides the next; the summary tabulates every search's path and
what it cost against the full grid."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pandas as pd

from pipeline.sweeps import lr_search
from pipeline.sweeps.selection import selection_scores

log = logging.getLogger(__name__)


def play_round(
    search: lr_search.LRSearch,
    previous: dict | None,
    runs: pd.DataFrame,
    split: str,
    metric: str,
) -> lr_search.SearchState:
    """The state after one round: `previous` is the last round's record (None before round 0),
    `runs` the metric rows of the runs it asked for."""
    state = (
        lr_search.initial_state(search) if previous is None else lr_search.state_from_record(search, previous)
    )
    scores = selection_scores(runs, lr_search.Selection(None, split, metric))  # one method's runs
    index = {lr: i for i, lr in enumerate(search.lattice)}
    state = lr_search.advance(search, state, dict(zip(scores["learning_rate"].map(index), scores["score"])))
    for i in sorted(i for i, r in state.rounds.items() if r == state.round):
        log.info(
            "round %d (%s): lr %g -> %s %.4g",
            state.round,
            state.steps[i],
            search.lattice[i],
            metric,
            state.scores[i],
        )
    best = state.best
    log.info(
        "best so far: lr %g (%s %.4g); stride %d lattice steps",
        search.lattice[best],
        metric,
        state.scores[best],
        state.stride,
    )
    if not state.done:
        log.info("next round (%s): %s", state.next_step, [search.lattice[i] for i in state.next_indices])
    elif lr_search.bracketed(search, state):
        log.info(
            "done after %d rounds, %d runs: lr %g", state.round + 1, len(state.scores), search.lattice[best]
        )
    else:
        edge = "lowest" if best == min(state.scores) else "highest"
        log.warning(
            "the optimum is not bracketed: the best learning rate %g (%s %.4g) is the %s the search "
            "may reach; move %s.bracket or raise %s.max_widenings",
            search.lattice[best],
            metric,
            state.scores[best],
            edge,
            lr_search.KEY,
            lr_search.KEY,
        )
    return state


def path_table(records: list[dict]) -> pd.DataFrame:
    """Every search's path: one row per evaluated learning rate (round, step, score), with the
    chosen one marked and whether it is bracketed."""
    rows = [
        {**r["setting"], **row, "chosen": row["learning_rate"] == r["chosen"], "bracketed": r["bracketed"]}
        for r in records
        for row in r["evaluated"]
    ]
    return pd.DataFrame(rows)


def cost_table(records: list[dict], grid_size: int, seeds: list[int], runtime_of) -> pd.DataFrame:
    """Per search: runs spent (searching + the other seeds at the chosen rate) vs the full grid
    (`grid_size` rates x seeds), rounds, and the latency the rounds add on a cluster that runs each
    round's jobs at once: the sum of each round's longest run minus the longest run of all (the
    grid's one round). runtime_of(setting, lr, seed): a run's seconds (its benchmark file)."""
    out = []
    for r in records:
        s = r["setting"]
        rounds: dict[int, list[float]] = {}
        for row in r["evaluated"]:
            rounds.setdefault(row["round"], []).append(runtime_of(s, row["learning_rate"], seeds[0]))
        fanout = [runtime_of(s, r["chosen"], seed) for seed in seeds[1:]]
        if fanout:
            rounds[len(rounds)] = fanout
        longest = [max(v) for v in rounds.values()]
        runs = len(r["evaluated"]) + len(fanout)
        out.append(
            {
                **s,
                "chosen": r["chosen"],
                "bracketed": r["bracketed"],
                "runs": runs,
                "grid_runs": grid_size * len(seeds),
                "fraction_of_grid": runs / (grid_size * len(seeds)),
                "rounds": len(rounds),
                "run_seconds": sum(sum(v) for v in rounds.values()),
                "rounds_latency_s": sum(longest),
                "added_latency_s": sum(longest) - max(longest),
            }
        )
    return pd.DataFrame(out)


def benchmark_seconds(path: str | Path) -> float:
    """A Snakemake benchmark file's wall-clock seconds (nan when the file is missing)."""
    path = Path(path)
    return float(pd.read_csv(path, sep="\t")["s"].iloc[0]) if path.is_file() else math.nan
