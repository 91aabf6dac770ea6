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
from pipeline.analysis.evidence import fcr_level, trend, u_fit, u_runs, ushape, ushapes
from pipeline.analysis.stats import deltas
from pipeline.analysis.study_tables import StudyTables
from pipeline.analysis.verdicts import (
    CONTRADICTED,
    NOT_COMPUTED,
    NOT_ESTABLISHED,
    NOT_REACHED,
    SUPPORTED,
    all_of,
    any_of,
    interval_verdict,
)
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
    assert all_of([]) == NOT_COMPUTED and any_of([NOT_COMPUTED]) == NOT_COMPUTED
    assert all_of([SUPPORTED, NOT_COMPUTED]) == NOT_ESTABLISHED  # a setting not computed: not all hold
    assert (
        all_of([NOT_REACHED, CONTRADICTED]) == NOT_REACHED
        and any_of([NOT_REACHED, CONTRADICTED]) == NOT_REACHED
    )


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
    est = trend(d, "delta_log", "γ = 6", +1)
    assert est.low < 0.2 < est.high and est.high - est.low < 0.1 and est.verdict == SUPPORTED
    unit, inner = est.n.split("; ")
    assert unit == "3 pre-training seeds (the unit) x 7 budgets = 21 runs"
    assert inner == "3 perturbation seeds averaged within each run"
    assert est.pretraining_variance


def test_a_u_is_found_and_a_monotone_curve_is_not():
    u = deltas(sweep_rows(lambda x: 0.15 * x**2, noise=0.01), "ppl").dropna(subset=["gamma"])
    assert ushape(u, "value", "U").verdict == SUPPORTED
    falling = deltas(sweep_rows(lambda x: 0.0, noise=0.01), "ppl").dropna(subset=["gamma"])
    # falling reliably at its largest budgets, the minimum at the top edge: the claimed U is contradicted
    assert ushape(falling, "value", "falling").verdict == CONTRADICTED


def test_a_family_prints_its_selected_minima_at_the_false_coverage_statement_level():
    """Benjamini & Yekutieli 2005: R of m settings selected print their intervals at 1 - R 0.05 / m."""
    u = deltas(sweep_rows(lambda x: 0.15 * x**2, noise=0.01), "ppl").dropna(subset=["gamma"])
    flats = [
        deltas(sweep_rows(lambda x: 0.0, 0.01, seed), "ppl").dropna(subset=["gamma"]) for seed in (1, 2, 3)
    ]
    family = [("U", u)] + [(f"flat {i}", f) for i, f in enumerate(flats)]
    found = ushapes(family, "value")
    assert [e.verdict == SUPPORTED for e in found] == [True, False, False, False]
    assert fcr_level(1, 4) == pytest.approx(0.9875) and "1 of 4 tested settings selected" in found[0].note
    assert "98.75%" in found[0].note and found[1:] == [ushape(f, "value", n) for n, f in family[1:]]
    # beside it, the interval given that the test passed (coverage given selection, not a share)
    assert "given that the test passed (selective 95%)" in found[0].note
    assert all("selective" not in e.note for e in found[1:])
    budgets, runs, _ = u_fit(u, "value")
    narrow, wide = u_runs(budgets, runs), u_runs(budgets, runs, fcr_level(1, 4))
    assert wide.min_low <= narrow.min_low <= narrow.min_high <= wide.min_high
    assert (wide.min_low, wide.min_high) != (narrow.min_low, narrow.min_high)
    assert ushapes(family[:1], "value") == [ushape(u, "value", "U")]  # one setting: its own 95% level


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


def test_the_run_is_the_unit_not_its_inner_seeds():
    """Many inner seeds of few runs do not make a flat curve U-shaped or a slope certain: a per-run
    effect (sd 0.02) dominates the inner noise (sd 0.005), and each run counts once."""
    rng = np.random.default_rng(3)
    false_u = covered = 0
    n = 60
    for _ in range(n):
        run_effect = {(p, b): rng.normal(0, 0.02) for p in range(3) for b in BUDGETS}
        rows = sweep_rows(lambda x: 0.0, noise=0.005, seed=int(rng.integers(1 << 30)))
        gauss = rows["modification"] == "gaussian"
        bump = [run_effect[p, b] for p, b in zip(rows["pretrain_seed"], rows["budget"])]
        rows.loc[gauss, "value"] = rows.loc[gauss, "value"] * np.exp(np.asarray(bump)[gauss.to_numpy()])
        d = deltas(rows, "ppl").dropna(subset=["gamma"])
        false_u += ushape(d, "value", "flat").verdict == SUPPORTED
        est = trend(d, "delta_log", "flat", +1)
        covered += est.low <= 0 <= est.high
    assert false_u / n <= 0.1 and covered / n >= 0.85


def test_designs_without_power_are_not_computed_with_their_reason():
    one_seed = deltas(sweep_rows(lambda x: 0.15 * x**2, noise=0.01), "ppl").dropna(subset=["gamma"])
    one_seed = one_seed[one_seed["pretrain_seed"] == 0]
    est = ushape(one_seed, "value", "U")
    assert est.verdict == NOT_COMPUTED and "one pre-training seed" in est.note
    two_budgets = one_seed[one_seed["budget"].isin(BUDGETS[:2])]
    assert trend(two_budgets, "delta_log", "x", +1).verdict == NOT_COMPUTED
    constant = one_seed.assign(delta_log=1.0)
    est = trend(constant, "delta_log", "x", +1)
    assert est.verdict == NOT_COMPUTED and "constant" in est.note
    # a trend on one pre-training seed still has an interval (its runs), and says it rests on one seed
    one = trend(one_seed, "delta_log", "x", +1)
    assert one.verdict == SUPPORTED and not one.pretraining_variance and "1 pre-training seed" in one.n


def test_not_established_states_what_the_design_could_detect():
    flat = deltas(sweep_rows(lambda x: 0.0, noise=0.02), "ppl").dropna(subset=["gamma"])
    est = trend(flat, "delta_log", "flat", +1)
    assert est.verdict == NOT_ESTABLISHED and 0 < est.detectable < 0.2
    # at 80% power the detectable slope is (t_0.975 + t_0.8) standard errors: wider than the half-width
    assert est.detectable > (est.high - est.low) / 2


def test_a_claim_reads_only_the_tables_its_record_declares(tmp_path):
    """The declarations are the one place: the reference copies and the findings rule's inputs derive
    from them, and a claim reading an undeclared table is an error, not a silent extra input."""
    from pipeline import layout
    from pipeline.analysis.claims import Claim, tables_read
    from pipeline.analysis.study_tables import UndeclaredTable

    tables = write_study(tmp_path, sweep_rows(lambda x: 0.0, noise=0.01))
    base = next(c for c in CLAIMS if c.key == "no-repeated-data")
    sneaky = Claim(**{**vars(base), "tables": (layout.METRICS,)})  # reads pretrain_runs undeclared
    with pytest.raises(UndeclaredTable, match="no-repeated-data"):
        evaluate(sneaky, tables)
    assert set(tables_read()) == {t for c in CLAIMS for t in c.tables}
    assert layout.REFERENCE_PPL in tables_read() and len(tables_read()) == len(set(tables_read()))


def test_a_four_budget_design_decides_a_falling_curve():
    """The registered evidence design has 4 budgets: the upper half keeps the median budget (3 of 4), a
    two-point slope per seed is a valid unit, so a curve falling reliably at its end is contradicted,
    and one whose fall is uncertain but whose minimum sits at the largest budget is not reached."""
    from pipeline.analysis.evidence import u_verdict

    rng = np.random.default_rng(0)
    tokens = np.array([1e6, 2e6, 4e6, 8e6])
    x = np.log2(tokens / 1e6)
    falling = -0.2 * x + rng.normal(0, 0.01, (7, 4)) + rng.normal(0, 0.05, (7, 1))
    assert u_verdict(tokens, falling)[1] == CONTRADICTED
    barely = -0.3 * 2.0 ** (-2 * x) - 0.004 * x + rng.normal(0, 0.02, (7, 4))
    assert u_verdict(tokens, barely)[1] in (NOT_REACHED, NOT_ESTABLISHED)
    assert (
        trend(pd.DataFrame(columns=["budget", "value", "pretrain_seed"]), "value", "x", +1).verdict
        == NOT_COMPUTED
    )


def schedule_rows(shape, noise: float, seed: int, phase: str) -> pd.DataFrame:
    """sweep_rows for one schedule phase (decayed: the study's runs; stable: their WSD twins), with a
    fine-tuning arm (code at LR 3e-2) beside the Gaussian one."""
    rows = sweep_rows(shape, noise, seed).assign(schedule_phase=phase)
    if phase == "stable":
        rows["checkpoint"] = rows["checkpoint"] + "-stable"
    sft = rows[(rows["modification"] == "gaussian") & (rows["seed"] == 0)].assign(
        modification="sft", gamma=np.nan, task="code", learning_rate=3e-2
    )
    return pd.concat([rows, sft], ignore_index=True)


def write_schedule_study(root, decayed: pd.DataFrame, stable: pd.DataFrame) -> StudyTables:
    from pipeline import layout

    tables = write_study(root, decayed)
    stable.to_parquet(root / layout.STABLE_TWIN_METRICS)
    return tables


@pytest.mark.parametrize("gap, verdict", [(0.1, SUPPORTED), (0.0, NOT_ESTABLISHED)])
def test_the_schedule_claims_compare_each_decay_with_its_stable_twin(tmp_path, gap, verdict):
    """Decayed checkpoints `gap` more sensitive than their stable twins at every budget, both rising
    0.2 per doubling: decay-sensitizes finds the gap in both arms (over the 3 pre-training seeds, the
    unit) or says what it could have detected; stable-sensitivity finds the rise along the stable run."""
    by_key = {c.key: c for c in CLAIMS}
    tables = write_schedule_study(
        tmp_path,
        schedule_rows(lambda x: 0.2 * x + gap, 0.01, seed=0, phase="decayed"),
        schedule_rows(lambda x: 0.2 * x, 0.01, seed=1, phase="stable"),
    )
    decay = evaluate(by_key["decay-sensitizes"], tables)
    assert decay.verdict == verdict
    assert [e.label for e in decay.estimates] == ["Gaussian, γ = 6", "code, LR 3e-2"]
    for e in decay.estimates:
        assert abs(e.value - gap) < 0.01 and e.pretraining_variance
        assert e.n.startswith("3 pre-training seed(s)")
        assert verdict == SUPPORTED or 0 < e.detectable < 0.1
    stable = evaluate(by_key["stable-sensitivity"], tables)
    assert stable.verdict == SUPPORTED and all(abs(e.value - 0.2) < 0.01 for e in stable.estimates)


def test_the_schedule_claims_need_replicate_pre_training_runs(tmp_path):
    """One pre-training seed: its decays and twins lie on one stable run, so neither claim has a unit
    to replicate over."""
    by_key = {c.key: c for c in CLAIMS}

    def one_seed(phase, seed):
        rows = schedule_rows(lambda x: 0.2 * x, 0.01, seed=seed, phase=phase)
        return rows[rows["pretrain_seed"] == 0]

    tables = write_schedule_study(tmp_path, one_seed("decayed", 0), one_seed("stable", 1))
    for key, reason in (
        ("decay-sensitizes", "one pre-training seed"),
        ("stable-sensitivity", "one pre-training seed"),
    ):
        found = evaluate(by_key[key], tables)
        assert found.verdict == NOT_COMPUTED and reason in found.missing, found
