"""Adaptive learning-rate search (`finetune.learning_rates: {search: ...}`): per (checkpoint, task, λ),
the learning rate with the best in-domain validation score, found with a fraction of a grid's runs.

The search walks a lattice of learning rates, log-spaced or a given grid's values, by index.
Round 0 runs a coarse subset `stride` lattice steps apart. Each later round either *widens*, one
coarse step past the evaluated edge when the best point sits on it, or *refines*, halving the
stride and running the best point's two new neighbours. It stops when the stride is one lattice
step, so on a unimodal score it returns the lattice's argmin, with both lattice neighbours
evaluated. A best point at the lattice's end is reported as unbracketed, never silently picked.

Pure and torch-free: the workflow's checkpoint rules call `advance` once per round, the
benchmark replays the same function over a full grid's scores.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from pipeline.layout import format_hparam
from pipeline.sweeps.lr_grids import finetune_lr_grid

KEY = "finetune.learning_rates.search"
# the score a search minimises: the in-domain validation perplexity
SELECT_SPLIT, SELECT_METRIC = "validation", "ppl"


@dataclass(frozen=True)
class Selection:
    """What a tuned learning rate is best on: rows of `eval_data` (None: the task's own) on
    `split`, `metric`, maximised or minimised."""

    eval_data: str | None
    split: str
    metric: str
    maximize: bool = False


# finetune.select_metric -> its Selection: the in-domain validation perplexity (Section 3.4.2), the
# judged win rate against the reference (Appendix B.3: how the paper tunes instruction tuning), or
# the VLM score (Appendix B.2: how it tunes LLaVA's stage 2; pipeline/multimodal/vlm_eval.py)
SELECTIONS = {
    "ppl": Selection(None, SELECT_SPLIT, SELECT_METRIC),
    "win_rate": Selection("alpaca_eval", "eval", "win_rate", maximize=True),
    "vlm_score": Selection("vlm", "eval", "vlm_score", maximize=True),
}
MIN_RESOLUTION = 1e-4  # decades: neighbours then differ by 0.023%, still apart at 6 significant digits


class SearchError(ValueError):
    """An invalid search setting; the message names the key."""


@dataclass(frozen=True)
class SearchSettings:
    """`finetune.learning_rates: {search: ...}` as written (config/schema/finetune.yaml types each
    key); the defaults are these fields'. Either `grid`, or `bracket` + `resolution`."""

    grid: str | list[float] | None = None  # a named grid or values, searched by index
    bracket: list[float] | None = None  # [lo, hi] of a log lattice
    resolution: float | None = None  # the lattice's spacing in decades (bracket)
    points: int = 3  # learning rates of round 0
    max_widenings: int = 2  # rounds that may extend the lattice past an edge


@dataclass(frozen=True)
class LRSearch:
    """A search over `lattice` (ascending learning rates, as file names write them): round 0 runs
    `start`, `stride` lattice steps apart; at most `max_widenings` rounds extend it past an edge."""

    lattice: tuple[float, ...]
    start: tuple[int, ...]
    stride: int
    max_widenings: int

    def __post_init__(self) -> None:  # from JSON (rule params) the sequences come as lists
        object.__setattr__(self, "lattice", tuple(float(x) for x in self.lattice))
        object.__setattr__(self, "start", tuple(int(i) for i in self.start))

    @property
    def rounds_bound(self) -> int:
        """The most rounds: the coarse one, every widening and a refinement per halving."""
        return 1 + self.max_widenings + int(math.log2(self.stride))

    @property
    def grid_size(self) -> int:
        """Learning rates of the full grid the search stands in for: the lattice without its widenings."""
        return len(self.lattice) - 2 * self.max_widenings * self.stride

    @property
    def runs_bound(self) -> int:
        """The most fine-tuning runs of one search (two per refinement, one per widening)."""
        return len(self.start) + self.max_widenings + 2 * int(math.log2(self.stride))


@dataclass
class SearchState:
    """What a search knows after a round: each evaluated lattice index's score (lower is better;
    inf for a diverged run), the round it was run in and why, the current stride, the widenings
    spent, and the next round's indices (empty when done)."""

    scores: dict[int, float] = field(default_factory=dict)
    rounds: dict[int, int] = field(default_factory=dict)
    steps: dict[int, str] = field(default_factory=dict)
    stride: int = 1
    widenings: int = 0
    round: int = -1
    next_step: str = "coarse"
    next_indices: list[int] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return not self.next_indices

    @property
    def best(self) -> int:
        """The best evaluated index; ties (and all-diverged) go to the smaller learning rate."""
        return min(self.scores, key=lambda i: (self.scores[i], i))


def from_config(value: dict) -> LRSearch:
    """The search a `learning_rates: {search: ...}` mapping describes (one of two forms):

    - `grid: <name or list>`, `points`: search a grid's values by index (e.g. Table 4's 27 at the
      paper's spacing); round 0 runs at least `points` of them, centred, a power-of-two stride apart.
    - `bracket: [lo, hi]`, `points`, `resolution`: a log lattice `resolution` decades apart; round 0
      runs `points` values from lo to hi, whose spacing must halve down to `resolution`; the lattice
      reaches `max_widenings` coarse steps past each end.
    """
    s = SearchSettings(**value)
    if s.points < 2:
        raise SearchError(f"{KEY}.points: got {s.points}; expected at least 2 coarse points")
    if (s.grid is None) == (s.bracket is None):
        raise SearchError(f"{KEY}: give either `grid` (search a grid's values) or `bracket` + `resolution`")
    if s.grid is not None:
        if s.resolution is not None:
            raise SearchError(
                f"{KEY}.resolution: a grid search's resolution is the grid's own spacing; drop it"
            )
        return _grid_search(s.grid, s.points)
    return _lattice_search(s.bracket, s.points, s.resolution, s.max_widenings)


def exhaustive(grid: tuple[float, ...]) -> LRSearch:
    """A grid run whole in one round (`seeds_at: tuned`: the other seeds then run at its argmin)."""
    values = _as_named(grid)
    return LRSearch(values, tuple(range(len(values))), stride=1, max_widenings=0)


def _as_named(grid) -> tuple[float, ...]:
    """Ascending learning rates as their runs know them: the value their file name writes (a run
    parses its rate from it, and the search looks runs up by it)."""
    return tuple(sorted(float(format_hparam(v)) for v in grid))


def _grid_search(grid: str | list[float], points: int) -> LRSearch:
    try:
        values = _as_named(finetune_lr_grid(grid))
    except ValueError as err:
        raise SearchError(f"{KEY}.grid: {err}") from None
    n = len(values)
    if n < points:
        raise SearchError(f"{KEY}.points: {points} coarse points but the grid has {n} values")
    stride = 2 ** int(math.log2((n - 1) / (points - 1)))
    count = (n - 1) // stride + 1
    offset = (n - 1 - (count - 1) * stride) // 2
    start = tuple(offset + k * stride for k in range(count))
    return LRSearch(values, start, stride, max_widenings=0)


def _lattice_search(bracket: list[float], points: int, resolution: float | None, widenings: int) -> LRSearch:
    lo, hi = (float(x) for x in bracket)
    if not 0 < lo < hi:
        raise SearchError(f"{KEY}.bracket: got {bracket}; expected [lo, hi] with 0 < lo < hi")
    if resolution is None or resolution <= 0:
        raise SearchError(f"{KEY}.resolution: got {resolution}; expected the final spacing in decades, > 0")
    if resolution < MIN_RESOLUTION:
        raise SearchError(
            f"{KEY}.resolution: {resolution} decades is finer than learning rates written with 6 "
            f"significant digits can tell apart; expected at least {MIN_RESOLUTION}"
        )
    coarse = math.log10(hi / lo) / (points - 1)
    ratio = coarse / resolution
    stride = 2 ** round(math.log2(ratio)) if ratio >= 1 else 0
    if stride < 1 or not math.isclose(ratio, stride, rel_tol=1e-6):
        halvings = ", ".join(f"{coarse / 2**k:.4g}" for k in range(1, 5))
        raise SearchError(
            f"{KEY}.resolution: got {resolution} decades; halving the coarse spacing "
            f"({coarse:.4g} decades: bracket {bracket}, {points} points) never reaches it; expected one "
            f"of {halvings}, ..."
        )
    first = -widenings * stride
    last = (points - 1) * stride + widenings * stride
    lattice = tuple(float(format_hparam(lo * 10 ** (k * resolution))) for k in range(first, last + 1))
    if len(set(lattice)) < len(lattice):
        raise SearchError(
            f"{KEY}.resolution: {resolution} decades is finer than learning rates written with 6 "
            "significant digits can tell apart (two lattice points share a file name)"
        )
    start = tuple(-first + k * stride for k in range(points))
    return LRSearch(lattice, start, stride, widenings)


def initial_state(search: LRSearch) -> SearchState:
    """Before round 0: the coarse indices are next."""
    return SearchState(stride=search.stride, next_indices=list(search.start))


def advance(search: LRSearch, state: SearchState, scores: dict[int, float]) -> SearchState:
    """The state after the round that ran `state.next_indices` scored `scores` (index -> score):
    the next round's indices, or none when the search is done."""
    missing = set(state.next_indices) - set(scores)
    if missing:
        raise ValueError(f"round {state.round + 1}: no score for lattice indices {sorted(missing)}")
    new = SearchState(
        scores=state.scores | {i: _finite_or_inf(scores[i]) for i in state.next_indices},
        rounds=state.rounds | {i: state.round + 1 for i in state.next_indices},
        steps=state.steps | {i: state.next_step for i in state.next_indices},
        stride=state.stride,
        widenings=state.widenings,
        round=state.round + 1,
    )
    new.next_step, new.next_indices, new.stride, new.widenings = _next_round(search, new)
    return new


def _next_round(search: LRSearch, state: SearchState) -> tuple[str, list[int], int, int]:
    best, last = state.best, len(search.lattice) - 1
    low, high = min(state.scores), max(state.scores)
    if state.widenings < search.max_widenings:
        if best == low and low > 0:
            return "widen", [max(low - state.stride, 0)], state.stride, state.widenings + 1
        if best == high and high < last:
            return "widen", [min(high + state.stride, last)], state.stride, state.widenings + 1
    stride = state.stride
    while stride > 1:
        stride //= 2
        near = {min(max(best + d, 0), last) for d in (-stride, stride)} - set(state.scores)
        if near:
            return "refine", sorted(near), stride, state.widenings
    return "done", [], stride, state.widenings


def _finite_or_inf(x: float) -> float:
    return float(x) if math.isfinite(x) else math.inf


def bracketed(search: LRSearch, state: SearchState) -> bool:
    """Whether the best point has evaluated lattice neighbours on both sides (a bracketed optimum)."""
    best = state.best
    return 0 < best < len(search.lattice) - 1 and {best - 1, best + 1} <= set(state.scores)


def replay(search: LRSearch, score_of: Callable[[float], float]) -> SearchState:
    """Run a whole search against known scores (learning rate -> score), e.g. a full grid's."""
    state = initial_state(search)
    while not state.done:
        state = advance(search, state, {i: score_of(search.lattice[i]) for i in state.next_indices})
    return state


# --- the JSON a round writes (the workflow reads the next round's learning rates from it) ---------


def state_record(search: LRSearch, state: SearchState) -> dict:
    """The state as JSON: every evaluated learning rate with its round, step and score, the next
    round's learning rates, and when done the chosen one and whether it is bracketed."""
    rows = [
        {
            "learning_rate": search.lattice[i],
            "index": i,
            "round": state.rounds[i],
            "step": state.steps[i],
            "score": state.scores[i] if math.isfinite(state.scores[i]) else None,
        }
        for i in sorted(state.scores)
    ]
    record = {
        "round": state.round,
        "evaluated": rows,
        "stride": state.stride,
        "widenings": state.widenings,
        "next_step": state.next_step,
        "next": [search.lattice[i] for i in state.next_indices],
        "done": state.done,
    }
    if state.done:
        record |= {"chosen": search.lattice[state.best], "bracketed": bracketed(search, state)}
    return record


def state_from_record(search: LRSearch, record: dict) -> SearchState:
    """The state a round's JSON holds (inverse of state_record)."""
    index = {lr: i for i, lr in enumerate(search.lattice)}
    return SearchState(
        scores={r["index"]: math.inf if r["score"] is None else r["score"] for r in record["evaluated"]},
        rounds={r["index"]: r["round"] for r in record["evaluated"]},
        steps={r["index"]: r["step"] for r in record["evaluated"]},
        stride=record["stride"],
        widenings=record["widenings"],
        round=record["round"],
        next_step=record["next_step"],
        next_indices=[index[lr] for lr in record["next"]],
    )
