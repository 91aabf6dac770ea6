"""The figure registry: every figure the workflow writes, declared once.

A record names the figure (its file stem under `results/<study>/figures/`), the rule that writes
it, the report category it is filed under, and the study stage that produces it; its caption is
`report/<name>.rst`. Rules, `rule all`, the report and the figure code all derive their lists
from here, and a test checks every record has its caption and every figure function writes
exactly the stems registered for its rule. Torch-, numpy- and pandas-free: the Snakefile imports it.
"""

from __future__ import annotations

from dataclasses import dataclass

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


_GAUSSIAN = "Gaussian perturbations"
_THEORY = "Theory: two-layer linear networks"
_CURVATURE = "Sharpness and the quadratic prediction (Appendix D)"
_LINEAR = "Linearization, the NTK and mitigations"
_TRANSFER = "Theory: transfer (features are fate, linear teachers) and why overtraining needs depth"

FIGURES: tuple[Figure, ...] = (
    Figure("progressive_sensitivity", "figures", _GAUSSIAN, "sweep"),
    Figure("inflection_point", "figures", _GAUSSIAN, "sweep"),
    Figure("pretrain_loss", "loss_curves", "Pre-training", "pretrain"),
    Figure("finetune_fixed_lr", "finetune_figures", "Fine-tuning", "finetune"),
    Figure("finetune_tuned", "finetune_figures", "Fine-tuning", "finetune"),
    Figure("finetune_distance", "finetune_figures", "Fine-tuning", "finetune"),
    Figure(
        "alpaca_eval_win_rate", "alpaca_eval_figures", "Instruction following (AlpacaEval)", "alpaca_eval"
    ),
    Figure("benchmarks", "benchmark_figures", "Benchmarks", "benchmarks"),
    Figure("curvature_gaussian", "curvature_figures", _CURVATURE, "curvature"),
    Figure("curvature_finetune", "curvature_figures", _CURVATURE, "curvature"),
    Figure("sharpness", "curvature_figures", _CURVATURE, "curvature"),
    Figure("linearization_table1", "linearization_figures", _LINEAR, "linearization"),
    Figure("linearization_gap_tokens", "linearization_figures", _LINEAR, "linearization"),
    Figure("linearized_vs_real", "linearization_figures", _LINEAR, "linearization"),
    Figure("ntk_outcome", "linearization_figures", _LINEAR, "linearization"),
    Figure("layer_selection", "linearization_figures", _LINEAR, "linearization"),
    Figure("wise_ft_front", "linearization_figures", _LINEAR, "linearization"),
    Figure("theory_perturbation", "theory", _THEORY, "theory"),
    Figure("theory_delta_pre", "theory", _THEORY, "theory"),
    Figure("theory_finetune_loss", "theory", _THEORY, "theory"),
    Figure("theory_lambda_sweep", "theory", _THEORY, "theory"),
    Figure("vlm_benchmarks", "vlm_figures", "Multimodal fine-tuning (LLaVA)", "multimodal"),
    Figure("transfer_faf_linear", "theory_transfer", _TRANSFER, "theory"),
    Figure("transfer_faf_ridge", "theory_transfer", _TRANSFER, "theory"),
    Figure("transfer_faf_finetune", "theory_transfer", _TRANSFER, "theory"),
    Figure("transfer_faf_distance", "theory_transfer", _TRANSFER, "theory"),
    Figure("transfer_lt_alignment", "theory_transfer", _TRANSFER, "theory"),
    Figure("transfer_lt_depth", "theory_transfer", _TRANSFER, "theory"),
    Figure("transfer_lt_frozen", "theory_transfer", _TRANSFER, "theory"),
    Figure("transfer_overtraining", "theory_transfer", _TRANSFER, "theory"),
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
