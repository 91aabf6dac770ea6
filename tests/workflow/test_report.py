"""`snakemake --report`: one self-contained HTML file with every figure of a study and its caption."""

from __future__ import annotations

import html
import re
import time
from pathlib import Path

import pytest
from workflow_utils import ROOT, SMOKE_STUDY, local_smoke_study, smoke_config, snakemake, write_config

from pipeline.analysis.figure_registry import FIGURES

# The theory stage at a fraction of its default cost (one seed, fewer draws and γ, population gradient).
FAST_THEORY = {
    "theory.enabled": True,
    "theory.seeds": [0],
    "theory.perturbation.gammas": [0.046, 0.1, 0.22],
    "theory.perturbation.mc_samples": 200,
    "theory.finetune.batch_size": None,
    "theory.finetune.lambdas": [0.0, 2.0],
}
# every registered figure but the lm-eval, judged and LLaVA ones (off in the smoke study; plotted in
# test_benchmarks, test_judge_workflow and test_vlm_workflow)
ELSEWHERE = ("benchmarks", "theory", "alpaca_eval", "multimodal")
SMOKE_FIGURES = [f.name for f in FIGURES if f.stage not in ELSEWHERE]
THEORY_FIGURES = [f.name for f in FIGURES if f.stage == "theory"]


def caption_title(rst: Path) -> str:
    """The bold first phrase every caption starts with (**...**)."""
    m = re.match(r"\*\*(.+?)\*\*", rst.read_text(), re.S)
    assert m, f"{rst} does not start with a **bold title**"
    return " ".join(m.group(1).split())


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The smoke study (shared local run) plus a quick theory stage, and its report."""
    tmp = tmp_path_factory.mktemp("report")
    local_smoke_study(tmp, SMOKE_STUDY)
    cfg = write_config(tmp, smoke_config(study=SMOKE_STUDY, **FAST_THEORY), "report.yaml")
    res = snakemake(cfg, "--cores", "2", *[f"results/{SMOKE_STUDY}/figures/{s}.png" for s in THEORY_FIGURES])
    assert res.returncode == 0, res.stderr[-3000:]
    t0 = time.monotonic()
    res = snakemake(cfg, "--report", str(tmp / "report.html"))
    print(f"report built in {time.monotonic() - t0:.1f} s")
    assert res.returncode == 0, res.stderr[-3000:]
    return (tmp / "report.html").read_text()


def test_report_has_every_figure_with_its_caption(report):
    for stem in SMOKE_FIGURES + THEORY_FIGURES:
        assert f"filename={stem}.png;base64," in report, f"figure {stem}.png is not embedded in the report"
        title = caption_title(ROOT / "report" / f"{stem}.rst")
        assert f"<strong>{html.escape(title, quote=False)}</strong>" in report, (
            f"caption of {stem} ({title!r}) missing"
        )
    assert f"Checkpoint-sweep study <strong>{SMOKE_STUDY}</strong>" in report  # report/workflow.rst, rendered


def test_captions_and_figures_are_one_to_one():
    """Every registered figure has its caption file, and every caption file belongs to one."""
    captions = {p.stem for p in (ROOT / "report").glob("*.rst")} - {"workflow"}
    assert captions == {f.name for f in FIGURES}
    assert all((ROOT / f.caption).is_file() for f in FIGURES)
