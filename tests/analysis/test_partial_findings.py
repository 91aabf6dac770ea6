"""`make docs` from a partial sweep (pipeline/analysis/findings.py): the evidence study's committed
tables cut to the budgets a coarse-to-fine run finishes first render, each claim saying "n of N
budgets"; a study directory without its metrics table yet has it aggregated from its finished jobs."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

from pipeline import layout
from pipeline.analysis import findings
from pipeline.analysis.claims import CLAIMS
from pipeline.workflow.priority import coarse_to_fine

STUDY = "evidence"
SOURCE = findings.REFERENCE / STUDY
CLAIMS_OF_STUDY = [c for c in CLAIMS if c.study == STUDY]


@pytest.fixture(scope="module")
def sweep():
    """The evidence study's metrics, its planned budgets and the first three a coarse-to-fine run
    finishes (both ends and the middle)."""
    metrics = pd.read_parquet(SOURCE / layout.METRICS)
    budgets = sorted(metrics["budget"].unique())
    first = [budgets[i] for i in coarse_to_fine(len(budgets))[:3]]
    return metrics, budgets, first


def plan(budgets: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"checkpoint": [f"c{b:.0f}" for b in budgets], "budget": budgets})


def write(path, frame: pd.DataFrame) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(path)


def test_a_partial_sweep_renders_saying_n_of_n_budgets(sweep, tmp_path):
    metrics, budgets, first = sweep
    assert first == [budgets[-1], budgets[0], budgets[(len(budgets) - 1) // 2]]
    ref = tmp_path / "reference"
    for rel in findings.tables_read():
        if (SOURCE / rel).is_file():
            table = pd.read_parquet(SOURCE / rel)
            write(ref / STUDY / rel, table[table["budget"].isin(first)] if "budget" in table else table)
    write(ref / STUDY / layout.SWEEP_PLAN, plan(budgets))

    found, coverage = findings.findings_for(CLAIMS_OF_STUDY, ref)
    n_of_n = f"{len(first)} of {len(budgets)} budgets"
    on_budgets = [c.key for c in CLAIMS_OF_STUDY if layout.METRICS in c.tables]
    assert on_budgets and all(coverage[k] == n_of_n for k in on_budgets), coverage
    assert "tokens-covered" not in coverage  # a data check: its table has no budgets
    computed = [f for f in found if f.claim.key in on_budgets and f.verdict != "not computed"]
    assert computed, [(f.claim.key, f.missing) for f in found]  # the claims still decide on 3 budgets
    page = findings.render(found, "Findings", findings.INTRO, coverage=coverage)
    assert page.count(f"({n_of_n})") == 2 * len(coverage)  # the summary row and the claim's heading

    # the whole sweep: no count (the committed pages, whose studies have no plan, render as before)
    write(ref / STUDY / layout.METRICS, metrics)
    for rel in (layout.FINETUNE_TUNED, layout.PRETRAIN_RUNS):
        shutil.copyfile(SOURCE / rel, ref / STUDY / rel)
    assert findings.findings_for(CLAIMS_OF_STUDY, ref)[1] == {}


def test_make_docs_aggregates_the_finished_jobs_of_a_study_without_metrics(sweep, tmp_path):
    metrics, budgets, first = sweep
    study_dir, ref = tmp_path / "results" / STUDY, tmp_path / "reference"
    done = metrics[metrics["budget"].isin(first)]
    for checkpoint, rows in done.groupby("checkpoint"):
        perturb, sft = rows[rows["modification"] != "sft"], rows[rows["modification"] == "sft"]
        write(study_dir / layout.PERTURB_PART.format(checkpoint=checkpoint), perturb)
        run = dict(checkpoint=checkpoint, task="t", method="full", lr="0.01", lam="0", seed=0)
        write(study_dir / layout.FINETUNE_PART.format(**run), sft)
        write(study_dir / layout.FINETUNE_LINE_PART.format(**run), sft.head(1))  # a line table: not metrics
    write(study_dir / layout.SWEEP_PLAN, plan(budgets))
    write(ref / STUDY / layout.FINETUNE_TUNED, pd.read_parquet(SOURCE / layout.FINETUNE_TUNED))  # stale

    copied = findings.copy_reference(study_dir, ref)
    assert ref / STUDY / layout.METRICS in copied and ref / STUDY / layout.SWEEP_PLAN in copied
    assert not (ref / STUDY / layout.FINETUNE_TUNED).exists()  # no table of an earlier run stays
    partial = pd.read_parquet(ref / STUDY / layout.METRICS)
    assert len(partial) == len(done) and set(partial["budget"]) == set(first)
    assert (partial["config_hash"] == "partial").all()
    _, coverage = findings.findings_for(CLAIMS_OF_STUDY, ref)
    assert coverage["gaussian-sensitivity"] == f"{len(first)} of {len(budgets)} budgets"


def test_the_theory_track_is_not_counted_against_the_planned_token_budgets(tmp_path):
    """The theory track's budgets count features (budget_unit feature_index), not tokens: a study's
    plan of token budgets says nothing about them, so its claims render without an "n of N"."""
    source, ref = findings.REFERENCE / "default", tmp_path / "reference" / "default"
    theory = [c for c in CLAIMS if c.study == "default" and c.tables == (layout.THEORY_METRICS,)]
    assert theory
    table = pd.read_parquet(source / layout.THEORY_METRICS)
    assert set(table["budget_unit"].dropna()) == {"feature_index"}
    write(ref / layout.THEORY_METRICS, table)
    write(ref / layout.SWEEP_PLAN, plan([5e5, 1e6, 2e6, 4e6]))
    found, coverage = findings.findings_for(theory, ref.parent)
    assert coverage == {} and all(f.verdict != "not computed" for f in found)
