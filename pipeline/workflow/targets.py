"""What a study asks for: the per-job parts each aggregation reads, the outputs of `rule all`,
and the inputs that depend on the config. Paths come from the results layout (layout.py), figure
names from the figure registry (figures.py).
"""

from __future__ import annotations

from pipeline.data.corpus import EMBEDDED_PACKAGES
from pipeline.data.tasks import TASK_NAMES, task_files
from pipeline.models.checkpoints import CheckpointSpec
from pipeline.models.presets import format_hparam
from pipeline.workflow import layout
from pipeline.workflow.config import (
    benchmarks_enabled,
    curvature_enabled,
    finetune_enabled,
    finetune_lrs,
    finetune_section,
    task_settings,
    theory_enabled,
)
from pipeline.workflow.figures import figures_of_stage

Checkpoints = dict[str, CheckpointSpec]


def path(config: dict, rel: str, **fields: object) -> str:
    """A path of the config's study (layout.study_path)."""
    return layout.study_path(config["study"], rel, **fields)


def figure_paths(config: dict, names: list[str] | tuple[str, ...]) -> list[str]:
    """Every format (analysis.figure_formats) of each named figure."""
    formats = config["analysis"]["figure_formats"]
    return [path(config, layout.FIGURE, name=n, ext=ext) for n in names for ext in formats]


def stage_figures(config: dict, stage: str) -> list[str]:
    """The figure files of one study stage (figure registry)."""
    return figure_paths(config, [f.name for f in figures_of_stage(stage)])


def pretrain_dirs(config: dict, checkpoints: Checkpoints) -> list[str]:
    """The study's own pre-training runs (checkpoints of source sweep)."""
    return [s.path for s in checkpoints.values() if s.source == "sweep"]


def perturb_parts(config: dict, checkpoints: Checkpoints) -> list[str]:
    return [path(config, layout.PERTURB_PART, checkpoint=name) for name in checkpoints]


def lm_eval_parts(config: dict, checkpoints: Checkpoints) -> list[str]:
    if not benchmarks_enabled(config):
        return []
    return [path(config, layout.LM_EVAL_PART, checkpoint=name) for name in checkpoints]


def finetune_parts(config: dict, checkpoints: Checkpoints, pattern: str = layout.FINETUNE_PART) -> list[str]:
    """One metrics file per (checkpoint, task, lr, λ, seed), plus each (checkpoint, task)'s base
    evaluation (`pattern`: another per-run output, e.g. its line table, without the base)."""
    if not finetune_enabled(config):
        return []
    ft = finetune_section(config)
    out = []
    for name in checkpoints:
        for task in ft["tasks"]:
            if pattern == layout.FINETUNE_PART:
                out.append(path(config, layout.TASK_BASE_PART, checkpoint=name, task=task))
            out += [
                path(
                    config,
                    pattern,
                    checkpoint=name,
                    task=task,
                    lr=format_hparam(lr),
                    lam=format_hparam(lam),
                    seed=seed,
                )
                for lr in finetune_lrs(config)
                for lam in ft["lambdas"]
                for seed in ft["seeds"]
            ]
    return out


def curvature_sharpness_parts(config: dict, checkpoints: Checkpoints) -> list[str]:
    if not curvature_enabled(config):
        return []
    return [path(config, layout.CURVATURE_SHARPNESS_PART, checkpoint=name) for name in checkpoints]


def curvature_line_parts(config: dict, checkpoints: Checkpoints) -> list[str]:
    """Every line table: the Gaussian lines of each checkpoint and each fine-tuning run's line."""
    if not curvature_enabled(config):
        return []
    gaussian = [path(config, layout.CURVATURE_LINE_PART, checkpoint=name) for name in checkpoints]
    return gaussian + finetune_parts(config, checkpoints, layout.FINETUNE_LINE_PART)


def metric_parts(config: dict, checkpoints: Checkpoints) -> list[str]:
    """Every per-job table the metrics rule aggregates."""
    theory = [path(config, layout.THEORY_METRICS)] if theory_enabled(config) else []
    return (
        perturb_parts(config, checkpoints)
        + lm_eval_parts(config, checkpoints)
        + finetune_parts(config, checkpoints)
        + curvature_sharpness_parts(config, checkpoints)
        + theory
    )


def all_outputs(config: dict, checkpoints: Checkpoints) -> list[str]:
    """What `rule all` asks for: metrics, analysis tables and the figures of every enabled stage."""
    out = [path(config, layout.METRICS), path(config, layout.INFLECTION)]
    out += stage_figures(config, "sweep")
    if pretrain_dirs(config, checkpoints):
        out += stage_figures(config, "pretrain")
    if finetune_enabled(config):
        out += [path(config, layout.FINETUNE_TUNED)] + stage_figures(config, "finetune")
    if benchmarks_enabled(config):
        out += stage_figures(config, "benchmarks")
    if curvature_enabled(config):
        out += [path(config, layout.CURVATURE_SUMMARY)] + stage_figures(config, "curvature")
    if theory_enabled(config):
        out += [path(config, layout.THEORY_METRICS)] + stage_figures(config, "theory")
    return out


# --- inputs that depend on the config -------------------------------------------------------------


def corpus_packages(config: dict) -> list[str]:
    """The pinned npm data tarballs the embedded corpus reads."""
    corpus = config["corpus"]
    if corpus["source"] != "embedded":
        return []
    return [f"{corpus['package_dir']}/{EMBEDDED_PACKAGES[n]}" for n in corpus["embedded"]]


def checkpoint_inputs(spec: CheckpointSpec) -> list[str]:
    """Input of a job on one checkpoint: the sweep's output dir or the local dir (none for hub)."""
    return [spec.path] if spec.source in ("sweep", "local") else []


def task_package_files(config: dict, task: str) -> list[str]:
    """The pinned package files a task's embedded data is read from (none for the hub source)."""
    return task_files(task, task_settings(config, task))


def tokenizer_task_tables(config: dict) -> list[str]:
    """Task tables whose training texts the tokenizer is also trained on (tokenizer.extra_texts)."""
    names = [n for n in config["tokenizer"].get("extra_texts") or [] if n in TASK_NAMES]
    return [path(config, layout.TASK_TABLE, task=n) for n in names]


def benchmark_figure_inputs(config: dict) -> dict[str, str]:
    """The metrics table, and the tuned-LR table when the study fine-tunes."""
    inputs = {"metrics": path(config, layout.METRICS)}
    return inputs | ({"tuned": path(config, layout.FINETUNE_TUNED)} if finetune_enabled(config) else {})
