"""`snakemake --report`: one self-contained HTML file with every figure of a study and its caption."""

from __future__ import annotations

import html
import re
import time
from pathlib import Path

import pytest
from workflow_utils import ROOT, SMOKE_STUDY, local_smoke_study, smoke_config, snakemake, write_config

# The theory stage at a fraction of its default cost (one seed, fewer draws and γ, population gradient).
FAST_THEORY = {
    "theory.enabled": True,
    "theory.seeds": [0],
    "theory.perturbation.gammas": [0.046, 0.1, 0.22],
    "theory.perturbation.mc_samples": 200,
    "theory.finetune.batch_size": None,
    "theory.finetune.lambdas": [0.0, 2.0],
}
SWEEP_FIGURES = [
    "progressive_sensitivity",
    "inflection_point",
    "pretrain_loss",
    "finetune_fixed_lr",
    "finetune_tuned",
    "finetune_distance",
]
THEORY_FIGURES = ["theory_perturbation", "theory_delta_pre", "theory_finetune_loss", "theory_lambda_sweep"]


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
    for stem in SWEEP_FIGURES + THEORY_FIGURES:
        assert f"filename={stem}.png;base64," in report, f"figure {stem}.png is not embedded in the report"
        title = caption_title(ROOT / "report" / f"{stem}.rst")
        assert f"<strong>{html.escape(title, quote=False)}</strong>" in report, (
            f"caption of {stem} ({title!r}) missing"
        )
    assert f"Checkpoint-sweep study <strong>{SMOKE_STUDY}</strong>" in report  # report/workflow.rst, rendered


def test_every_caption_belongs_to_a_figure():
    captions = {p.stem for p in (ROOT / "report").glob("*.rst")} - {"workflow"}
    # benchmarks: the lm-eval figure, off in the smoke study (plotted in test_benchmarks / test_finetune)
    assert captions == set(SWEEP_FIGURES + THEORY_FIGURES + ["benchmarks"])


def test_report_is_self_contained(report):
    assert not re.search(r"""<(script|link|img)[^>]+(src|href)=["']https?://""", report)
    assert "data:image/png" in report
