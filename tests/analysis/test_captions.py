"""The report captions of figures that draw bands, error bars or intervals say what they cover: the
statistic and which seeds (or draws) vary. Rendered as `snakemake --report` renders them (Jinja with
the default study's config, then reStructuredText)."""

import re
import types
from pathlib import Path

import jinja2
import pytest
import yaml
from docutils.core import publish_parts

from pipeline.analysis.figure_registry import FIGURES, LEGEND, MARKS, MINIMUM, RUN_BAND

ROOT = Path(__file__).resolve().parents[2]

SEEDS_SD = ("±1 sd", "seeds the table holds", "fine-tuning seeds")
SIMULATION_SE = ("± 1 standard error of the mean", "``instances`` independent draws")
# figure -> phrases its rendered caption must contain (the default study: 3 perturbation seeds)
COVERS = {
    "progressive_sensitivity": (
        RUN_BAND,
        "3 perturbation seeds",
        "averaged, not counted as replicates",
        MARKS,
    ),
    "inflection_point": (MINIMUM, "``perturb.seeds``", "not counted as replicates"),
    "finetune_fixed_lr": (RUN_BAND, "fine-tuning seeds", "``fixed_rate_runs``", MARKS),
    "finetune_tuned": (*SEEDS_SD, "``tuned_table``"),
    "finetune_distance": ("±1 sd over the pre-training runs", "fine-tuning seeds (``finetune.seeds``)"),
    "alpaca_eval_win_rate": (*SEEDS_SD, "``tuned_table``"),
    "benchmarks": ("±1 sd over the", "3 perturbation seeds", *SEEDS_SD, "±1 standard error", "items"),
    "vlm_benchmarks": (*SEEDS_SD, "standard error of the accuracy over the benchmark's items"),
    "sharpness": ("±1 standard error over its ``curvature.probes``", "±1 sd over the perturbation seeds"),
    "ntk_outcome": ("95% Fisher-z interval", "over its checkpoints", "a checkpoint is a pre-training run"),
    "layer_selection": ("95% Fisher-z interval over the (checkpoint, task, group) points", "too narrow"),
    "theory_perturbation": ("3 theory seeds", "minimum to maximum"),
    "theory_delta_pre": ("3 theory seeds", "minimum to maximum"),
    "transfer_faf_linear": ("± 1 standard error of the mean", "``instances`` independent draws"),
    "transfer_faf_ridge": SIMULATION_SE,
    "transfer_faf_finetune": ("± 1 standard error of the mean", "``instances`` independent draws"),
    "transfer_lt_alignment": SIMULATION_SE,
    "transfer_lt_depth": ("± 1 standard error of the mean", "``instances`` independent draws"),
    "transfer_lt_frozen": SIMULATION_SE,
    "transfer_overtraining": ("± 1 standard error of the mean", "``instances`` independent draws"),
}


def rendered(name: str) -> str:
    """The caption after Jinja, at the default study's config (config.yaml)."""
    params = types.SimpleNamespace(legend=LEGEND)  # the rules' params.legend: the legends' own words
    snakemake = types.SimpleNamespace(
        config=yaml.safe_load((ROOT / "config.yaml").read_text()), params=params
    )
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)  # as snakemake's report
    return env.from_string((ROOT / "report" / f"{name}.rst").read_text()).render(snakemake=snakemake)


def flat(text: str) -> str:
    """`text` with every run of whitespace (line breaks too) as one space."""
    return " ".join(text.split())


@pytest.mark.parametrize("name", [f.name for f in FIGURES])
def test_every_caption_renders(name):
    text = rendered(name)
    publish_parts(text, writer="html", settings_overrides={"halt_level": 2, "report_level": 2})
    assert text.startswith("**") or name == "alpaca_eval_win_rate"


@pytest.mark.parametrize("name", sorted(COVERS))
def test_a_band_caption_names_its_statistic_and_its_seeds(name):
    text = flat(rendered(name))
    missing = [phrase for phrase in COVERS[name] if phrase not in text]
    assert not missing, f"report/{name}.rst does not say {missing}"
    vague = re.findall(r"(?:sd|SE|interval) over seeds", text)
    assert not vague, f"report/{name}.rst: {vague} (which seeds?)"
