"""The findings pages, rendered from studies' tables (`make docs`; rule `findings` for every study).

    python -m pipeline.analysis.findings results/evidence results/default ...   # refresh + render
    python -m pipeline.analysis.findings --check                                # docs == rendering

With study directories: the tables the registered claims read (claims.tables_read) are copied from each
`results/<study>/` into `docs/reference/<study>/` (committed), the figures the docs show (DOC_FIGURES)
into `docs/figures/`, and docs/findings.md is rendered from the reference copies alone, as is the
README's claims table (between `<!-- findings:begin -->` and `<!-- findings:end -->`). A test renders
both again and compares, so no documented number can drift from the rows it came from. Every
number in them comes from here: nothing is typed by hand.
"""

from __future__ import annotations

import argparse
import math
import re
import shutil
import sys
from pathlib import Path

from pipeline.analysis.claims import CLAIMS, Claim, Finding, evaluate, tables_read
from pipeline.analysis.stats import SCENARIO_CLAIMS, figure7_scenario
from pipeline.analysis.study_tables import StudyTables

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


def verdict_text(f: Finding) -> str:
    return MARK.get(f.verdict, f"not computed: {f.missing}")


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


def render_finding(f: Finding, number: str) -> str:
    c = f.claim
    out = [f"### {number} {c.title}: {verdict_text(f)}", "", f"> {c.statement}", ""]
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


def render(findings: list[Finding], title: str, intro: str, note: str = NOTE) -> str:
    """A findings page: a summary table of every claim's verdict, then each claim in full."""
    sections: dict[str, list[tuple[str, Finding]]] = {}
    for i, f in enumerate(findings, 1):
        sections.setdefault(f.claim.section, []).append((f"F{i}.", f))
    summary = [
        [n, f.claim.section, f.claim.title, f"`{f.claim.study}`", verdict_text(f)]
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
        out += [f"## {name}", ""] + [render_finding(f, n) for n, f in items]
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
    "bench/claims_calibration.py shows each interval's coverage by simulation. The toy's confounds "
    "are named with each claim; none of this is worded more strongly than its interval. Rendered "
    "from the studies' tables in docs/reference/."
)


def findings_for(claims: list[Claim], reference: Path = REFERENCE) -> list[Finding]:
    return [evaluate(c, StudyTables(reference / c.study, c.study)) for c in claims]


def study_findings(study_dir: Path, study: str) -> str:
    """A study's own findings page (rule `findings`): every claim on this study's tables."""
    tables = StudyTables(study_dir, study)
    # every claim on this study's tables, once (a replica repeats its original on another study)
    findings = [
        evaluate(Claim(**{**vars(c), "study": study}), tables) for c in CLAIMS if c.replica_of is None
    ]
    intro = INTRO.replace(
        "Rendered from the studies' tables in docs/reference/.", f"Rendered from results/{study}/."
    )
    note = "<!-- rendered by rule findings (pipeline/analysis/findings.py) from this study's tables -->"
    return render(findings, f"Findings of the study `{study}`", intro, note)


def figure7_scenarios(tables: StudyTables) -> dict[str, str]:
    """Per task: its Figure 7 scenario as the registered claims decide it on `tables`
    (stats.figure7_scenario), the label of the tuned-rate figure's optimal-LR panel."""
    by_task: dict[str, dict[str, str]] = {}
    for part, key in SCENARIO_CLAIMS.items():
        claim = next(c for c in CLAIMS if c.key == key)
        for e in evaluate(claim, tables).estimates:
            by_task.setdefault(e.label, {})[part] = e.verdict
    return {task: figure7_scenario(verdicts) for task, verdicts in by_task.items()}


def readme_block(findings: list[Finding]) -> str:
    rows = [[f.claim.title, f"`{f.claim.study}`", verdict_text(f)] for f in findings]
    return f"{NOTE}\n{_table(['claim', 'study', 'verdict'], rows)}\n"


_BLOCK = re.compile(r"(<!-- findings:begin -->\n)(.*?)(<!-- findings:end -->)", re.S)


def readme_with(readme: str, block: str) -> str:
    if not _BLOCK.search(readme):
        raise ValueError("README.md has no <!-- findings:begin --> / <!-- findings:end --> markers")
    return _BLOCK.sub(lambda m: m.group(1) + block + m.group(3), readme)


def copy_reference(study_dir: Path, reference: Path = REFERENCE) -> list[Path]:
    """The claim tables of one study into docs/reference/<study>/ (those the study has), and the
    figures the docs show from it into docs/figures/."""
    study = study_dir.name
    out = []
    for rel in tables_read():
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
    findings = findings_for(CLAIMS)
    return render(findings, "Findings", INTRO), readme_with(README.read_text(), readme_block(findings))


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
