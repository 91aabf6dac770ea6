"""Checkpoint families (pipeline/models/families.py): each family's token rule on real hub names
(tests/models/fixtures/hub_revisions.json, each with its public source), selection by token
range, the family's seeds as the statistics' pre-training seeds, and every bad input a clear
error naming it. Parse time only: nothing here reaches the network."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from pipeline.analysis.seeds import curve_bands
from pipeline.models.checkpoints import study_checkpoints
from pipeline.models.families import FAMILIES, family_checkpoints, step_tokens
from pipeline.models.hub import HubRevisionError

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "hub_revisions.json").read_text())


def one(hub: dict):
    (ck,) = family_checkpoints(hub)
    return ck


@pytest.mark.parametrize("case", FIXTURE["cases"], ids=lambda c: f"{c['repo']}@{c['revision']}")
def test_token_rule_on_real_names(case):
    """A real revision (or budget) name of each family gives the repo the hub has and the tokens
    the family's documented rule gives; where the source states a count in words, it agrees to 5%."""
    hub = {k: case[k] for k in ("family", "size", "variant", "stage_batches") if k in case}
    hub |= {"revisions": [case["revision"]], "seeds": [case["seed"]] if "seed" in case else None}
    ck = one(hub)
    assert ck.repo == case["repo"]
    assert ck.revision == ("main" if FAMILIES[case["family"]].completed_runs else case["revision"])
    assert ck.tokens == case["tokens"]
    if "approx" in case:
        assert ck.tokens == pytest.approx(case["approx"], rel=0.05)
    assert ck.pretrain_seed == case.get("seed")


def test_every_family_is_tested_on_real_names_or_says_why_not():
    tested = {c["family"] for c in FIXTURE["cases"]}
    assert tested | set(FIXTURE["unconfirmed"]) == set(FAMILIES)
    # SmolLM3's card: 40,000 steps = 94.4B tokens at GBS 2,359,296
    assert step_tokens(FAMILIES["smollm3"], "3B", "step-40000") == pytest.approx(94.4e9, rel=0.001)


def test_pythia_publishes_154_revisions():
    published = FAMILIES["pythia"].published
    assert len(published) == 154 and published[:3] == ("step0", "step1", "step2")
    assert published[10:12] == ("step512", "step1000") and published[-1] == "step143000"


def test_selection_by_token_range_is_log_spaced_nearest_and_deduplicated():
    """12 log-spaced targets over 1B-300B -> the nearest of Pythia's 154 revisions (log distance):
    11 distinct ones (1B and 1.7B both map to step512 / step1000 neighbours), in token order."""
    picked = family_checkpoints(
        {"family": "pythia", "size": "160m", "select": {"tokens": [1e9, 3e11], "count": 12}}
    )
    revs = [c.revision for c in picked]
    assert revs == [
        "step512", "step1000", "step2000", "step4000", "step6000", "step11000", "step18000",
        "step30000", "step51000", "step85000", "step143000",
    ]  # fmt: skip
    assert len(set(revs)) == len(revs) and [c.tokens for c in picked] == sorted(c.tokens for c in picked)
    # a completed-run family: budgets by range
    ladder = family_checkpoints(
        {"family": "olmo-ladder", "size": "1B", "select": {"tokens": [1e10, 2e11], "count": 3}}
    )
    assert [c.repo for c in ladder] == [
        "allenai/OLMo-Ladder-1B-0.5xC",
        "allenai/OLMo-Ladder-1B-2xC",
        "allenai/OLMo-Ladder-1B-10xC",
    ]


def polypythia_config(**hub) -> dict:
    base = {
        "family": "polypythias",
        "size": "160m",
        "seeds": [1, 2, 3],
        "revisions": ["step1000", "step143000"],
    }
    return {"study": "pp", "checkpoints": {"source": "hub", "hub": base | hub}}


def test_polypythias_seeds_are_the_statistics_pretraining_seeds():
    """Every seed's checkpoints share one `model`, carry their seed as `pretrain_seed`, and the
    run-level bands count them as pre-training seeds, as the evidence study's own."""
    specs = study_checkpoints(polypythia_config())
    assert len(specs) == 6 and {s.model for s in specs} == {"polypythias-160m"}
    assert sorted({s.pretrain_seed for s in specs}) == [1, 2, 3]
    assert {s.model_id for s in specs} == {f"EleutherAI/pythia-160m-seed{k}" for k in (1, 2, 3)}
    rows = pd.DataFrame(
        [
            {**s.row_fields("pp"), "seed": inner, "value": 10.0 + s.pretrain_seed + inner + s.tokens / 1e11}
            for s in specs
            for inner in (0, 1)
        ]
    )
    assert rows["repo"].notna().all() and rows["revision"].isin(["step1000", "step143000"]).all()
    bands = curve_bands(rows, ["model"], "value")
    assert list(bands["n_pretrain_seeds"]) == [3, 3] and list(bands["n_seeds"]) == [2, 2]
    # run means 10.5 + k + t (k = 1, 2, 3; inner seeds averaged first): mean 12.5 + t, sd 1 over
    # the 3 runs, so the 95% t-band's half-width is t(0.975, 2) / sqrt(3) = 2.4843
    first = bands.iloc[0]
    assert first["mean"] == pytest.approx(12.5 + 2_097_152_000 / 1e11)
    assert (first["high"] - first["low"]) / 2 == pytest.approx(4.302653 / 3**0.5, rel=1e-5)


@pytest.mark.parametrize(
    ("hub", "needle"),
    [
        ({"revisions": ["step1500"]}, "publishes no revision ['step1500']"),
        (
            {"revisions": ["main"], "family": "smollm2", "size": "1.7B", "seeds": None},
            "'main' carries no token count",
        ),
        (
            {"revisions": [], "select": {"tokens": [1e9, 1e12], "count": 5}},
            "is not covered by family polypythias",
        ),
        (
            {"family": "olmo-3", "size": "7B", "seeds": None, "revisions": ["stage1-step1000"]},
            "lacks the global batch of stage 'stage1'",
        ),
        (
            {"family": "smollm2", "size": "360M", "seeds": None, "revisions": ["step-160000"]},
            "lacks the global batch",
        ),
        (
            {"family": "olmo-3", "size": "7B", "seeds": None, "revisions": ["stage4-step10"]},
            "in stage 'stage4', which its step-to-tokens rule does not know",
        ),
        ({"seeds": [1, 10]}, "does not publish 10"),
        ({"variant": "data", "seeds": [0]}, "does not publish seed 0 of variant 'data'"),
        (
            {"variant": "data", "size": "70m"},
            "checkpoints.hub.size: family polypythias does not publish '70m'",
        ),
        ({"family": "evolm", "size": "1B", "seeds": None, "revisions": ["25BT"]}, "does not publish '25BT'"),
        (
            {"family": "datadecide", "size": "1B", "variant": "c4", "seeds": None},
            "datadecide has no size to choose",
        ),
    ],
    ids=lambda x: x if isinstance(x, str) else None,
)
def test_bad_input_is_a_clear_error_at_parse_time(hub, needle):
    with pytest.raises(HubRevisionError) as err:
        study_checkpoints(polypythia_config(**hub))
    assert needle in str(err.value), str(err.value)


def test_a_stage_batch_from_the_study_completes_the_rule():
    hub = {"family": "olmo-3", "size": "7B", "revisions": ["stage1-step1000", "stage2-step10"]}
    with pytest.raises(HubRevisionError, match="stage 'stage2'"):
        family_checkpoints(hub | {"stage_batches": {"stage1": 4_194_304}})
    cks = family_checkpoints(hub | {"stage_batches": {"stage1": 4_194_304, "stage2": 1_000}})
    assert [c.tokens for c in cks] == [4_194_304_000, 10_000]
