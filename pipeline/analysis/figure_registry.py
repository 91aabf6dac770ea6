"""The figure registry: every figure the workflow writes, declared once.

A record names the figure (its file stem under `results/<study>/figures/`), the rule that writes
it, the report category it is filed under, and the study stage that produces it; its caption is
`report/<name>.rst`. Rules, `rule all`, the report and the figure code all derive their lists
from here, and a test checks every record has its caption and every figure function writes
exactly the stems registered for its rule. Torch-, numpy- and pandas-free: the Snakefile imports it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.analysis.verdicts import P_U

# What a curve's band and its inflection marker mean: one text for the figures' legends
# (pipeline/analysis/sweep_figures.py) and the report captions (the rules' `params.legend`).
RUN_BAND = "95% t-band over the pre-training seeds"
MARKS = (
    f"★ where the U test's P(U) clears its claim's level ({P_U}, Bonferroni over a claim's settings); "
    "○ with its P(U) where it does not"
)
MINIMUM = (
    f"◆ with its 95% interval over the pre-training runs where the U test's P(U) clears {P_U}; "
    "◇ with its P(U) and no interval where it does not (the claims print no minimum there)"
)
LEGEND = {"band": RUN_BAND, "marks": MARKS, "minimum": MINIMUM}

STAGES = (
    "sweep",
    "pretrain",
    "finetune",
    "alpaca_eval",
    "benchmarks",
    "curvature",
    "linearization",
    "multimodal",
    "theory",
)


@dataclass(frozen=True)
class Figure:
    name: str  # file stem under results/<study>/figures/
    rule: str  # the rule that writes it
    category: str  # report category
    stage: str  # which part of the study produces it (one of STAGES)

    @property
    def caption(self) -> str:
        """The caption file, relative to the repository root."""
        return f"report/{self.name}.rst"


def _figures(rule: str, category: str, stage: str, *names: str) -> tuple[Figure, ...]:
    """The figures one rule writes, in its order, under one report category and stage."""
    return tuple(Figure(name, rule, category, stage) for name in names)


FIGURES: tuple[Figure, ...] = (
    *_figures("figures", "Gaussian perturbations", "sweep", "progressive_sensitivity", "inflection_point"),
    *_figures("loss_curves", "Pre-training", "pretrain", "pretrain_loss"),
    *_figures(
        "finetune_figures",
        "Fine-tuning",
        "finetune",
        "finetune_fixed_lr",
        "finetune_tuned",
        "finetune_distance",
    ),
    *_figures(
        "alpaca_eval_figures", "Instruction following (AlpacaEval)", "alpaca_eval", "alpaca_eval_win_rate"
    ),
    *_figures("benchmark_figures", "Benchmarks", "benchmarks", "benchmarks"),
    *_figures(
        "curvature_figures",
        "Sharpness and the quadratic prediction (Appendix D)",
        "curvature",
        "curvature_gaussian",
        "curvature_finetune",
        "sharpness",
    ),
    *_figures(
        "linearization_figures",
        "Linearization, the NTK and mitigations",
        "linearization",
        "linearization_table1",
        "linearization_gap_tokens",
        "linearized_vs_real",
        "ntk_outcome",
        "layer_selection",
        "wise_ft_front",
    ),
    *_figures(
        "theory",
        "Theory: two-layer linear networks",
        "theory",
        "theory_perturbation",
        "theory_delta_pre",
        "theory_finetune_loss",
        "theory_lambda_sweep",
    ),
    *_figures("vlm_figures", "Multimodal fine-tuning (LLaVA)", "multimodal", "vlm_benchmarks"),
    *_figures(
        "theory_transfer",
        "Theory: transfer (features are fate, linear teachers) and why overtraining needs depth",
        "theory",
        "transfer_faf_linear",
        "transfer_faf_ridge",
        "transfer_faf_finetune",
        "transfer_faf_distance",
        "transfer_lt_alignment",
        "transfer_lt_depth",
        "transfer_lt_frozen",
        "transfer_overtraining",
    ),
)


def figures_of_rule(rule: str) -> tuple[Figure, ...]:
    """The figures one rule writes, in registry order."""
    found = tuple(f for f in FIGURES if f.rule == rule)
    if not found:
        raise KeyError(f"no figure is registered for rule {rule!r}")
    return found


def figure_names(rule: str) -> tuple[str, ...]:
    """The file stems one rule writes, in registry order."""
    return tuple(f.name for f in figures_of_rule(rule))


def figures_of_stage(stage: str) -> tuple[Figure, ...]:
    """The figures of one study stage (`rule all` asks for a stage's figures when it is enabled)."""
    if stage not in STAGES:
        raise KeyError(f"unknown stage {stage!r}; expected one of {STAGES}")
    return tuple(f for f in FIGURES if f.stage == stage)
