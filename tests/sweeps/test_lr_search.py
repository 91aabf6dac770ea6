"""The adaptive learning-rate search (pipeline/sweeps/lr_search.py): it finds the lattice argmin of
any unimodal score within its bounds, widens past an edge, reports an optimum it cannot bracket,
and rejects settings it cannot honour."""

import logging
import math

import pandas as pd
import pytest

from pipeline.sweeps import lr_search
from pipeline.sweeps.lr_grids import PAPER_FINETUNE_LRS
from pipeline.sweeps.lr_search import SearchError, from_config, replay
from pipeline.sweeps.search_rounds import play_round

PAPER = {"grid": "paper", "points": 4}
LATTICE = {"bracket": [1e-3, 1e-1], "points": 3, "resolution": 0.25, "max_widenings": 2}


def v_shaped(optimum: float, slope_low: float = 1.0, slope_high: float = 3.0):
    """A unimodal score in log-LR, steeper above the optimum (as divergence makes it)."""

    def score(lr: float) -> float:
        d = math.log10(lr / optimum)
        return 10 + (slope_high * d if d > 0 else -slope_low * d)

    return score


@pytest.mark.parametrize("setting", [PAPER, LATTICE], ids=["paper-grid", "log-lattice"])
def test_finds_the_lattice_argmin_of_every_unimodal_score(setting):
    search = from_config(setting)
    for k, optimum in enumerate(search.lattice):
        state = replay(search, v_shaped(optimum))
        assert state.best == k
        assert len(state.scores) <= search.runs_bound and state.round + 1 <= search.rounds_bound
        assert lr_search.bracketed(search, state) == (0 < k < len(search.lattice) - 1)


def test_paper_scale_bound_is_under_40_percent_of_the_grid():
    search = from_config(PAPER)
    assert search.lattice == tuple(sorted(PAPER_FINETUNE_LRS)) and search.grid_size == 27
    assert search.runs_bound == 10 and search.runs_bound / 27 <= 0.4  # one seed
    assert (search.runs_bound + 2) / (27 * 3) <= 0.4  # three seeds: two more at the chosen rate


def test_widens_past_the_bracket_edge_and_reports_what_it_cannot_bracket(caplog):
    search = from_config(LATTICE)
    lattice = search.lattice
    below = replay(search, v_shaped(3e-4))  # half a decade below the bracket
    assert lattice[below.best] == pytest.approx(3.16228e-4)
    assert below.widenings >= 1 and "widen" in below.steps.values()
    assert lr_search.bracketed(search, below)
    far = replay(search, v_shaped(1e-7))  # beyond every allowed widening
    assert far.best == 0 and far.widenings == 2 and not lr_search.bracketed(search, far)
    # the round that ends the search says so, naming the keys to change (never a silent edge pick)
    state = lr_search.initial_state(search)
    with caplog.at_level(logging.WARNING):
        while not state.done:
            rows = [_run_rows(lattice[i], v_shaped(1e-7)(lattice[i])) for i in state.next_indices]
            previous = lr_search.state_record(search, state) if state.round >= 0 else None
            state = play_round(search, previous, pd.concat(rows), "validation", "ppl")
    assert "not bracketed" in caplog.text and "1e-05" in caplog.text and "max_widenings" in caplog.text


def test_a_diverged_run_is_never_chosen():
    search = from_config(PAPER)
    score = v_shaped(2e-3)  # the optimum sits among the largest rates, which diverge from 3e-3 on
    state = replay(search, lambda lr: math.inf if lr >= 3e-3 else score(lr))
    assert search.lattice[state.best] == 2e-3
    assert any(math.isinf(s) for s in state.scores.values())  # it ran diverging rates, and passed them over


def test_state_survives_its_json_round_trip():
    search = from_config(LATTICE)
    state = lr_search.initial_state(search)
    state = lr_search.advance(
        search, state, {i: v_shaped(0.02)(search.lattice[i]) for i in state.next_indices}
    )
    record = lr_search.state_record(search, state)
    assert lr_search.state_from_record(search, record) == state
    assert record["next"] == [search.lattice[i] for i in state.next_indices] and not record["done"]


@pytest.mark.parametrize(
    "setting, message",
    [
        (
            {"bracket": [1e-3, 1e-1], "points": 3, "resolution": 0.3},
            "never reaches it; expected one of 0.5, 0.25",
        ),
        ({"bracket": [1e-3, 1e-1], "points": 3, "resolution": 1e-6}, "finer than learning rates written"),
        ({"bracket": [1e-1, 1e-3], "resolution": 0.5}, "0 < lo < hi"),
        ({"bracket": [1e-3, 1e-1]}, "resolution: got None"),
        ({"grid": "paper", "bracket": [1e-3, 1e-1]}, "either `grid`"),
        ({"grid": "paper", "resolution": 0.25}, "the grid's own spacing"),
        ({"grid": [1e-3, 1e-2], "points": 3}, "3 coarse points but the grid has 2"),
        ({"grid": "table9"}, "unknown grid 'table9'"),
    ],
)
def test_bad_settings_name_the_key(setting, message):
    with pytest.raises(SearchError, match="finetune.learning_rates.search") as err:
        from_config(setting)
    assert message in str(err.value)


def _run_rows(lr: float, score: float) -> pd.DataFrame:
    """The metric rows a fine-tuning run's table holds for the search's score."""
    return pd.DataFrame(
        {
            "modification": ["sft"],
            "model": ["tiny"],
            "task": ["code"],
            "lambda_reg": [0.0],
            "checkpoint": ["tiny-1"],
            "pretrain_seed": [0],
            "budget": [1],
            "learning_rate": [lr],
            "seed": [0],
            "eval_data": ["code"],
            "split": ["validation"],
            "metric": ["ppl"],
            "value": [score],
            "diverged": [False],
        }
    )


def test_the_search_owns_its_defaults():
    """lr_search.SearchSettings is the one place of the search's defaults: the schema declares none,
    has the same keys and accepts them (types and ranges agree)."""
    from dataclasses import asdict
    from pathlib import Path

    import jsonschema

    from pipeline.workflow.schema import load_schema

    schema = load_schema(Path(__file__).parents[2] / "config" / "schema.yaml")
    branch = schema["properties"]["finetune"]["properties"]["learning_rates"]["oneOf"][2]
    props = branch["properties"]["search"]["properties"]
    assert not [k for k, p in props.items() if "default" in p]
    assert set(props) == set(asdict(lr_search.SearchSettings()))
    for key, value in asdict(lr_search.SearchSettings()).items():
        if value is not None:
            jsonschema.validate(value, props[key])


def test_grid_rates_are_the_values_their_runs_parse():
    """A rate beyond 6 significant digits is searched as its file name writes it (the run's rate)."""
    search = from_config({"grid": [1.23456789e-3, 1e-2, 1e-1], "points": 2})
    assert search.lattice[0] == 1.23457e-3
    assert lr_search.exhaustive((1e-1, 1.23456789e-3)).lattice == (1.23457e-3, 1e-1)
