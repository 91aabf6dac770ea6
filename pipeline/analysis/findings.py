"""The findings pages, rendered from studies' tables (`make docs`; rule `findings` for every study).

    python -m pipeline.analysis.findings results/evidence results/default ...   # refresh + render
    python -m pipeline.analysis.findings --check                                # docs == rendering

With study directories: the tables the registered claims read (claims.tables_read) are copied from each
`results/<study>/` into `docs/reference/<study>/` (committed), the figures the docs show (DOC_FIGURES)
into `docs/figures/`, and docs/findings.md is rendered from the reference copies alone, as is the
README's claims table (between `<!-- findings:begin -->` and `<!-- findings:end -->`). A test renders
both again and compares, so no documented number can drift from the rows it came from. Every
number in them comes from here: nothing is typed by hand.

A partial sweep renders too (the workflow runs it coarse to fine, pipeline/workflow/priority.py):
a study directory without its metrics table yet has it aggregated from the per-job tables finished so
far, and a claim whose tables lack some of the study's planned budgets (data/sweep_plan.parquet)
says "n of N budgets" beside its verdict.
"""

from __future__ import annotations

import argparse
import math
import re
import shutil
import sys
from pathlib import Path

import pandas as pd

from pipeline import layout
from pipeline.analysis.claims import CLAIMS, Claim, Finding, evaluate, tables_read
from pipeline.analysis.stats import SCENARIO_CLAIMS, figure7_scenario
from pipeline.analysis.study_tables import StudyTables
from pipeline.io import write_parquet
from pipeline.tables import aggregate_metrics, git_commit, package_versions

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"
FINDINGS = ROOT / "docs" / "findings.md"
README = ROOT / "README.md"
FIGURES = ROOT / "docs" / "figures"
# the figures the docs show (docs/figures/<name>.png), each refreshed by `make docs` from one study
DOC_FIGURES = {
    "evidence": [
        "progressive_sensitivity",
        "inflection_point",
        "finetune_fixed_lr",
        "finetune_tuned",
        "finetune_distance",
        "pretrain_loss",
        "linearization_gap_tokens",
    ],
    "pilot": ["sharpness", "ntk_outcome"],
    # the curvature lines are not among the reference tables: the default study draws this one
    "default": ["curvature_gaussian", "theory_perturbation", "transfer_overtraining"],
    "vlm-demo": ["vlm_benchmarks"],
}
NOTE = "<!-- rendered by `make docs` (pipeline/analysis/findings.py) from docs/reference/: do not edit -->"
# how to produce each study's tables
RUN = {
    "evidence": "make evidence",
    "pilot": "snakemake --cores all --configfile config/pilot.yaml",
    "wsd": "make wsd",
    "schedule": "make schedule",
    "default": "make study",
    "lora": "snakemake --cores all --configfile config/lora.yaml",
    "linearization": "snakemake --cores all --configfile config/linearization.yaml",
    "vlm-demo": "make vlm-demo",
}
MARK = {
    "supported": "✅ supported",
    "not established": "◻️ not established",
    "not reached within the budgets": "⏳ not reached within the budgets",
    "contradicted": "❌ contradicted",
}


def fmt(x: float) -> str:
    """A number with 3 significant digits (NaN: an en dash)."""
    if not math.isfinite(x):
        return "–"
    if x != 0 and (abs(x) >= 1e5 or abs(x) < 1e-3):
        return f"{x:.2e}"
    return f"{x:.3g}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def verdict_text(f: Finding, coverage: str = "") -> str:
    """The verdict's mark, with "(n of N budgets)" where the claim's tables lack planned budgets."""
    text = MARK.get(f.verdict, f"not computed: {f.missing}")
    return f"{text} ({coverage})" if coverage else text


def budget_coverage(claim: Claim, tables: StudyTables) -> str:
    """The text "n of N budgets" when the claim's tables hold n < N of the N budgets its study
    planned (a partial sweep: a budget counts once every table of the claim has a row of it; a
    table whose budgets are not in tokens, the theory track's, does not count); "" for a whole
    sweep, or a study without a plan (data/sweep_plan.parquet)."""
    plan = tables.root / layout.SWEEP_PLAN
    if not plan.is_file():
        return ""
    planned = set(pd.read_parquet(plan, columns=["budget"])["budget"])
    held = set(planned)
    for rel in (t for t in claim.tables if t.endswith(".parquet")):  # not the VLM data's JSON
        if tables.has(rel) and "budget" in (table := tables.table(rel)).columns:
            if "budget_unit" in table.columns:  # the theory track counts features, not tokens
                table = table[table["budget_unit"] == "tokens"]
                if table.empty:
                    continue
            held &= set(table["budget"].dropna())
    return f"{len(held)} of {len(planned)} budgets" if len(held) < len(planned) else ""


def stability(f: Finding) -> str:
    """Whether the verdict covers pre-training variance (stable across machines) or rests on one
    pre-training seed (its runs' randomness differs between machines, so it may flip); '–' for a
    claim that involves no pre-training run (a data check, the theory track)."""
    computed = [e for e in f.estimates if e.verdict != "not computed"]
    if computed and all(e.pretraining_variance for e in computed):
        return "covers pre-training variance: stable across machines"
    if any("pre-training seed" in e.n for e in computed):
        return "rests on one pre-training seed: may flip on another machine"
    return "–"


def _detectable(e) -> str:
    """The effect a not-established (or not reached) setting's design detects with 80% power."""
    if e.verdict in ("supported", "contradicted") or not math.isfinite(e.detectable):
        return "–"
    return f"{fmt(e.detectable)}"


def render_finding(f: Finding, number: str, coverage: str = "") -> str:
    c = f.claim
    out = [f"### {number} {c.title}: {verdict_text(f, coverage)}", "", f"> {c.statement}", ""]
    out += [
        _table(
            ["", ""],
            [
                ["compared", c.compares],
                ["statistic", c.statistic],
                ["decision rule (fixed before the data)", c.rule],
                ["study", f"`{c.study}` ({RUN.get(c.study, c.study)})"],
                ["across machines", stability(f)],
                ["confounds of the toy setup", c.confounds or "–"],
            ],
        ),
        "",
    ]
    if f.estimates:
        rows = [
            [
                e.label,
                fmt(e.value),
                "–" if not math.isfinite(e.low) else f"{fmt(e.low)} to {fmt(e.high)}",
                e.n,
                e.verdict,
                _detectable(e),
                e.note or "–",
            ]
            for e in f.estimates
        ]
        header = [
            "setting",
            "estimate",
            "95% interval",
            "n (the unit: a pre-training run or seed)",
            "verdict",
        ]
        out += [_table([*header, "detectable with 80% power", "note"], rows), ""]
    return "\n".join(out)


def render(
    findings: list[Finding],
    title: str,
    intro: str,
    note: str = NOTE,
    coverage: dict[str, str] | None = None,
) -> str:
    """A findings page: a summary table of every claim's verdict, then each claim in full;
    `coverage`: "n of N budgets" by claim key, for those whose tables lack planned budgets."""
    coverage = coverage or {}
    sections: dict[str, list[tuple[str, Finding]]] = {}
    for i, f in enumerate(findings, 1):
        sections.setdefault(f.claim.section, []).append((f"F{i}.", f))
    summary = [
        [
            n,
            f.claim.section,
            f.claim.title,
            f"`{f.claim.study}`",
            verdict_text(f, coverage.get(f.claim.key, "")),
        ]
        for sec in sections.values()
        for n, f in sec
    ]
    out = [
        f"# {title}",
        "",
        note,
        "",
        intro,
        "",
        _table(["", "section", "claim", "study", "verdict"], summary),
        "",
    ]
    for name, items in sections.items():
        out += [f"## {name}", ""] + [render_finding(f, n, coverage.get(f.claim.key, "")) for n, f in items]
    return "\n".join(out).rstrip() + "\n"


INTRO = (
    "Each finding below is a registered claim (pipeline/analysis/claims.py): what is compared, the "
    "statistic with its 95% interval and n at the level where independent randomness enters (the "
    "pre-training run: inner seeds are averaged within it), and a decision rule fixed before the data, "
    "which gives **supported**, **not established**, **not reached within the budgets** (a U claim "
    "whose curve still falls at its largest budget) or **contradicted**; a design that gives a "
    'statistic no power renders **not computed** with its reason. "Not established" is a result: '
    "the data do not decide, and the row says the effect its design could have detected with 80% "
    "power at its own noise. Each claim says whether its verdict covers pre-training variance "
    "(stable across machines) or rests on one pre-training seed (may flip on another machine). "
    "A U's minimum is printed only where its test clears the level, with an interval widened for "
    "that selection over its claim's settings (false coverage-statement rate ≤ 5%, Benjamini & "
    "Yekutieli 2005), and beside it the interval given that the test passed (95% coverage given "
    "selection: Fithian, Sun & Taylor 2014; often open on one side). "
    "bench/claims_calibration.py shows each interval's coverage by simulation. "
    "The toy's confounds "
    "are named with each claim; none of this is worded more strongly than its interval. Rendered "
    "from the studies' tables in docs/reference/."
)


def findings_for(claims: list[Claim], reference: Path = REFERENCE) -> tuple[list[Finding], dict[str, str]]:
    """Each claim evaluated on its study's reference tables, and its budget coverage (by key)."""
    found, coverage = [], {}
    for c in claims:
        tables = StudyTables(reference / c.study, c.study)
        found.append(evaluate(c, tables))
        if text := budget_coverage(c, tables):
            coverage[c.key] = text
    return found, coverage


def study_findings(study_dir: Path, study: str) -> str:
    """A study's own findings page (rule `findings`): every claim on this study's tables."""
    tables = StudyTables(study_dir, study)
    # every claim on this study's tables, once (a replica repeats its original on another study)
    claims = [Claim(**{**vars(c), "study": study}) for c in CLAIMS if c.replica_of is None]
    findings = [evaluate(c, tables) for c in claims]
    coverage = {c.key: text for c in claims if (text := budget_coverage(c, tables))}
    intro = INTRO.replace(
        "Rendered from the studies' tables in docs/reference/.", f"Rendered from results/{study}/."
    )
    note = "<!-- rendered by rule findings (pipeline/analysis/findings.py) from this study's tables -->"
    return render(findings, f"Findings of the study `{study}`", intro, note, coverage)


def figure7_scenarios(tables: StudyTables) -> dict[str, str]:
    """Per task: its Figure 7 scenario as the registered claims decide it on `tables`
    (stats.figure7_scenario), the label of the tuned-rate figure's optimal-LR panel."""
    by_task: dict[str, dict[str, str]] = {}
    for part, key in SCENARIO_CLAIMS.items():
        claim = next(c for c in CLAIMS if c.key == key)
        for e in evaluate(claim, tables).estimates:
            by_task.setdefault(e.label, {})[part] = e.verdict
    return {task: figure7_scenario(verdicts) for task, verdicts in by_task.items()}


def readme_block(findings: list[Finding], coverage: dict[str, str] | None = None) -> str:
    coverage = coverage or {}
    rows = [
        [f.claim.title, f"`{f.claim.study}`", verdict_text(f, coverage.get(f.claim.key, ""))]
        for f in findings
    ]
    return f"{NOTE}\n{_table(['claim', 'study', 'verdict'], rows)}\n"


_BLOCK = re.compile(r"(<!-- findings:begin -->\n)(.*?)(<!-- findings:end -->)", re.S)


def readme_with(readme: str, block: str) -> str:
    if not _BLOCK.search(readme):
        raise ValueError("README.md has no <!-- findings:begin --> / <!-- findings:end --> markers")
    return _BLOCK.sub(lambda m: m.group(1) + block + m.group(3), readme)


# the per-job metric tables of a study (layout.py's parts, wildcards as globs; a search's runs by
# their own tables, not its gathered copy): a partial sweep's metrics are its finished jobs' rows
METRIC_PARTS = (
    layout.PERTURB_PART,
    layout.LM_EVAL_PART,
    layout.TASK_BASE_PART,
    layout.FINETUNE_PART,
    layout.JUDGE_PART,
    layout.CURVATURE_SHARPNESS_PART,
    layout.NTK_PART,
    layout.THEORY_METRICS,
)


def finished_parts(study_dir: Path) -> list[Path]:
    """The per-job metric tables a study has written so far (not its line or generation tables)."""
    found: set[Path] = set()
    for pattern in METRIC_PARTS:
        found.update(study_dir.glob(re.sub(r"\{[^}]+\}", "*", pattern)))
    return sorted(p for p in found if not p.name.endswith((".line.parquet", ".generations.parquet")))


def partial_metrics(study_dir: Path) -> pd.DataFrame | None:
    """A study's metrics table from the per-job tables finished so far (None if it has none), when
    its sweep has not finished (no metrics.parquet yet); provenance: this repository's commit, no
    config hash (the aggregation did not run in the workflow)."""
    parts = finished_parts(study_dir)
    if not parts:
        return None
    provenance = {"config_hash": "partial", "git_commit": git_commit(ROOT), "packages": package_versions()}
    return aggregate_metrics(parts, provenance)


def copy_reference(study_dir: Path, reference: Path = REFERENCE) -> list[Path]:
    """The claim tables of one study and its sweep's plan into docs/reference/<study>/ (those the
    study has; a partial sweep's metrics aggregated from its finished jobs), and the figures the
    docs show from it into docs/figures/."""
    study = study_dir.name
    out = []
    rels = (*tables_read(), layout.SWEEP_PLAN)
    if not (study_dir / layout.METRICS).is_file() and (metrics := partial_metrics(study_dir)) is not None:
        for rel in rels:  # a partial sweep's reference holds its own tables only, none of an earlier run
            (reference / study / rel).unlink(missing_ok=True)
        write_parquet(reference / study / layout.METRICS, metrics)
        out.append(reference / study / layout.METRICS)
    for rel in rels:
        src = study_dir / rel
        if src.is_file():
            dst = reference / study / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
            out.append(dst)
    for name in DOC_FIGURES.get(study, []):
        png = study_dir / "figures" / f"{name}.png"
        if png.is_file():
            FIGURES.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(png, FIGURES / png.name)
    return out


def rendered() -> tuple[str, str]:
    findings, coverage = findings_for(CLAIMS)
    page = render(findings, "Findings", INTRO, coverage=coverage)
    return page, readme_with(README.read_text(), readme_block(findings, coverage))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("studies", nargs="*", type=Path, help="results/<study> directories to refresh from")
    ap.add_argument("--check", action="store_true", help="exit 1 if the docs differ from their rendering")
    args = ap.parse_args(argv)
    for study_dir in args.studies:
        copied = copy_reference(study_dir)
        print(f"{study_dir}: {len(copied)} tables into {REFERENCE / study_dir.name}")
    page, readme = rendered()
    if args.check:
        ok = FINDINGS.is_file() and FINDINGS.read_text() == page and README.read_text() == readme
        print(
            "docs/findings.md and README.md match their rendering" if ok else "out of date: run `make docs`"
        )
        return 0 if ok else 1
    FINDINGS.write_text(page)
    README.write_text(readme)
    print(f"wrote {FINDINGS} and the README's findings table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
