"""Registered claims: decision rules, statistics on rows with a known answer, a claim whose rows are
missing, a study's findings page, and the committed findings equal to their rendering."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

from pipeline.analysis import findings
from pipeline.analysis.claims import CLAIMS, evaluate
from pipeline.analysis.evidence import (
    CONTRADICTED,
    NOT_ESTABLISHED,
    SUPPORTED,
    all_of,
    any_of,
    interval_verdict,
    trend,
    ushape,
)
from pipeline.analysis.stats import deltas
from pipeline.analysis.study_tables import StudyTables
from pipeline.tables import metric_row, metrics_frame

BUDGETS = [500_000, 707_107, 1_000_000, 1_414_214, 2_000_000, 2_828_427, 4_000_000]


def test_decision_rules():
    assert interval_verdict(0.1, 0.3, +1) == SUPPORTED and interval_verdict(-0.3, -0.1, +1) == CONTRADICTED
    assert (
        interval_verdict(-0.1, 0.3, +1) == NOT_ESTABLISHED and interval_verdict(-0.3, -0.1, -1) == SUPPORTED
    )
    assert interval_verdict(math.nan, math.nan, +1) == NOT_ESTABLISHED  # no interval decides nothing
    assert (
        all_of([SUPPORTED, SUPPORTED]) == SUPPORTED
        and all_of([SUPPORTED, NOT_ESTABLISHED]) == NOT_ESTABLISHED
    )
    assert any_of([NOT_ESTABLISHED, SUPPORTED]) == SUPPORTED and any_of([CONTRADICTED] * 2) == CONTRADICTED
    assert all_of([]) == NOT_ESTABLISHED


def sweep_rows(shape, noise: float, seed: int = 0) -> pd.DataFrame:
    """Gaussian-perturbation rows of 3 pre-training seeds x 3 perturbation seeds over BUDGETS: base
    ppl 100 x 2^(-0.3 x) and perturbed ppl = base x exp(shape(x)) with x = log2(tokens / 0.5M)."""
    rng = np.random.default_rng(seed)
    rows = []
    for p in range(3):
        offset = rng.normal(0, noise)
        for b in BUDGETS:
            x = np.log2(b / BUDGETS[0])
            base = 100 * 2 ** (-0.3 * x) * np.exp(offset)
            common = dict(study="t", checkpoint=f"tiny-{b}-s{p}", source="sweep", model="tiny")
            common |= dict(budget=float(b), budget_unit="tokens", pretrain_seed=p, eval_data="pretrain")
            common |= dict(split="validation", metric="ppl")
            rows.append(metric_row(**common, modification="none", value=base))
            for s in range(3):
                value = base * np.exp(shape(x) + rng.normal(0, noise))
                rows.append(metric_row(**common, modification="gaussian", gamma=6.0, seed=s, value=value))
    return metrics_frame(rows)


def test_trend_recovers_a_known_slope_over_both_seed_levels():
    metrics = sweep_rows(lambda x: 0.2 * x, noise=0.02)
    d = deltas(metrics, "ppl").dropna(subset=["gamma"])
    est = trend(d, "delta_log", "γ = 6", +1, np.random.default_rng(0))
    assert est.low < 0.2 < est.high and est.high - est.low < 0.1 and est.verdict == SUPPORTED
    assert est.n == "7 budgets; 3 pre-training seeds x 3 perturbation seeds"


def test_a_u_is_found_and_a_monotone_curve_is_not():
    u = deltas(sweep_rows(lambda x: 0.15 * x**2, noise=0.01), "ppl").dropna(subset=["gamma"])
    assert ushape(u, "value", "U").verdict == SUPPORTED
    falling = deltas(sweep_rows(lambda x: 0.0, noise=0.01), "ppl").dropna(subset=["gamma"])
    assert ushape(falling, "value", "falling").verdict == CONTRADICTED  # still falling at the largest budgets


def write_study(root, metrics: pd.DataFrame) -> StudyTables:
    (root / "analysis").mkdir(parents=True)
    metrics.to_parquet(root / "metrics.parquet")
    epochs = [b / 1e7 for b in BUDGETS]
    runs = pd.DataFrame({"model": "tiny", "pretrain_seed": 0, "budget": BUDGETS, "epochs": epochs})
    runs.to_parquet(root / "analysis" / "pretrain_runs.parquet")
    return StudyTables(root, "t")


def test_claims_without_their_rows_are_not_computed_and_say_which(tmp_path):
    tables = write_study(tmp_path, sweep_rows(lambda x: 0.15 * x**2, noise=0.01))
    by_key = {c.key: c for c in CLAIMS}
    found = evaluate(by_key["gaussian-overtraining"], tables)
    assert found.verdict == SUPPORTED and "minimum at" in found.estimates[0].note
    assert evaluate(by_key["no-repeated-data"], tables).verdict == SUPPORTED
    missing = evaluate(by_key["tuned-overtraining"], tables)
    assert missing.verdict == "not computed" and "no rows for the tuned runs of sft" in missing.missing
    coverage = evaluate(by_key["tokens-covered"], tables)
    assert coverage.verdict == "not computed" and "data/token_coverage.parquet" in coverage.missing
    page = findings.study_findings(tmp_path, "t")
    assert "not computed: no rows for data/token_coverage.parquet" in page
    # every claim once: a replica (the same claim on another study, e.g. WSD beside cosine) is not repeated
    assert all((c.title in page) == (c.replica_of is None) for c in CLAIMS)


def test_every_claim_states_its_comparison_statistic_and_rule():
    keys = [c.key for c in CLAIMS]
    assert len(keys) == len(set(keys))
    for c in CLAIMS:
        assert c.compares and c.statistic and c.rule and c.study in findings.RUN, c.key
        assert "supported" in c.rule, c.key  # the rule names its verdicts


@pytest.mark.skipif(not findings.FINDINGS.is_file(), reason="docs/findings.md is written by `make docs`")
def test_committed_findings_equal_their_rendering():
    """Edit them by `make docs` (from the studies' tables), never by hand."""
    page, readme = findings.rendered()
    assert findings.FINDINGS.read_text() == page
    assert findings.README.read_text() == readme


def test_every_figure_the_docs_show_is_refreshed_by_make_docs():
    """docs/figures/<name>.png named in README.md or docs/*.md is in findings.DOC_FIGURES (one study
    draws it), so no committed image outlives the code that draws it."""
    from pipeline.analysis.findings import DOC_FIGURES, ROOT

    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    shown = {m for p in pages for m in re.findall(r"figures/([a-z0-9_]+)\.png", p.read_text())}
    registered = [n for names in DOC_FIGURES.values() for n in names]
    assert len(registered) == len(set(registered))
    assert shown == set(registered), shown ^ set(registered)
