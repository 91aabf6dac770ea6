"""What a study asks for: the per-job parts each aggregation reads, the outputs of `rule all`,
and the inputs that depend on the config. Paths come from the results layout (layout.py), figure
names from the figure registry (figures.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from pipeline import layout
from pipeline.analysis.claims import tables_read
from pipeline.analysis.figure_registry import figures_of_stage
from pipeline.data.corpus import EMBEDDED_SOURCES
from pipeline.data.tasks import TASK_NAMES, task_files
from pipeline.layout import format_hparam
from pipeline.models.checkpoints import CheckpointSpec
from pipeline.workflow.config import (
    alpaca_eval_config,
    alpaca_eval_enabled,
    benchmarks_enabled,
    curvature_enabled,
    finetune_enabled,
    finetune_lrs,
    finetune_methods,
    finetune_search,
    finetune_section,
    linearization_enabled,
    ntk_enabled,
    reference_checkpoint,
    task_settings,
    theory_enabled,
)
from pipeline.workflow.multimodal import text_tasks, vlm_tasks
from pipeline.workflow.priority import job_priority

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


def main_checkpoints(checkpoints: Checkpoints) -> Checkpoints:
    """The study's checkpoints without the WSD stable twins: what the metrics table, the analysis and
    the figures read (the twins' rows go to their own table, STABLE_TWIN_METRICS)."""
    return {name: s for name, s in checkpoints.items() if s.phase != "stable"}


def stable_twins(checkpoints: Checkpoints) -> Checkpoints:
    """pretrain.stable_twins: each budget's undecayed twin (the schedule claims read their rows)."""
    return {name: s for name, s in checkpoints.items() if s.phase == "stable"}


def pretrain_dirs(config: dict, checkpoints: Checkpoints) -> list[str]:
    """The study's own pre-training runs (checkpoints of source sweep; not the WSD stable twins, the
    stable run's weights at a budget's tokens)."""
    return [s.path for s in checkpoints.values() if s.source == "sweep" and s.phase is None]


def perturb_parts(config: dict, checkpoints: Checkpoints) -> list[str]:
    return [path(config, layout.PERTURB_PART, checkpoint=name) for name in checkpoints]


def lm_eval_parts(config: dict, checkpoints: Checkpoints) -> list[str]:
    if not benchmarks_enabled(config):
        return []
    return [path(config, layout.LM_EVAL_PART, checkpoint=name) for name in checkpoints]


def base_eval_tasks(config: dict) -> list[str]:
    """The fine-tuning tasks whose base in-domain metrics rule evaluate writes: the text tasks (a
    LLaVA task's base rows come from its stage 1, rule vlm_projector)."""
    return text_tasks(config) if finetune_enabled(config) else []


def evaluate_outputs(config: dict) -> dict[str, str | list[str]]:
    """Rule evaluate's tables for one checkpoint (its wildcard left to the rule): the perplexity
    grid's, the lm-eval grid's when the suite is on, each text task's base metrics."""
    checkpoint = "{checkpoint}"
    out: dict[str, str | list[str]] = {"perturb": path(config, layout.PERTURB_PART)}
    if benchmarks_enabled(config):
        out["lm_eval"] = path(config, layout.LM_EVAL_PART)
    if tasks := base_eval_tasks(config):
        out["base"] = [path(config, layout.TASK_BASE_PART, checkpoint=checkpoint, task=t) for t in tasks]
    return out


def evaluate_inputs(config: dict, spec: CheckpointSpec) -> dict[str, str | list[str]]:
    """Rule evaluate's inputs: the checkpoint (none for hub), the corpus of the held-out split, the
    table of each task the base model is scored on."""
    tables = [path(config, layout.TASK_TABLE, task=t) for t in base_eval_tasks(config)]
    return {"checkpoint": checkpoint_inputs(spec), "corpus": path(config, layout.CORPUS), "tasks": tables}


def finetune_parts(config: dict, checkpoints: Checkpoints, pattern: str = layout.FINETUNE_PART) -> list[str]:
    """One metrics file per (checkpoint, task, method, lr, λ, seed), plus each (checkpoint, task)'s
    base evaluation (`pattern`: another per-run output, e.g. its line table, without the base).
    With a search: one file per (checkpoint, task, method, λ) holding its runs' rows (its runs are
    known only as it goes)."""
    if not finetune_enabled(config):
        return []
    ft, search = finetune_section(config), finetune_search(config)
    out = []
    for name in checkpoints:
        for task in ft["tasks"]:
            if pattern == layout.FINETUNE_PART:
                out.append(path(config, layout.TASK_BASE_PART, checkpoint=name, task=task))
            for method in finetune_methods(config):
                for lam in ft["lambdas"]:
                    if search:
                        setting = dict(checkpoint=name, task=task, method=method, lam=format_hparam(lam))
                        out.append(path(config, SEARCH_PARTS[pattern], **setting))
                    else:
                        out += [
                            run_path(config, pattern, name, task, method, lr, lam, seed)
                            for lr in finetune_lrs(config)
                            for seed in ft["seeds"]
                        ]
    return out


# a search's per-(checkpoint, task, λ) file standing for each per-run output
SEARCH_PARTS = {
    layout.FINETUNE_PART: layout.LR_SEARCH_RUNS,
    layout.FINETUNE_LINE_PART: layout.LR_SEARCH_LINES,
}


def grid_job_paths(config: dict, pattern: str) -> list[str]:
    """The outputs of one grid job (finetune.grid_per_job): `pattern`'s file at each rate of the
    grid, its other wildcards left to the rule."""
    fields = {k: "{" + k + "}" for k in ("checkpoint", "task", "method", "lam", "seed")}
    return [path(config, pattern, lr=lr, **fields) for lr in grid_job_rates(config)]


def grid_job_rates(config: dict) -> list[str]:
    """The grid's learning rates as its file names write them."""
    return [format_hparam(lr) for lr in finetune_lrs(config)]


def run_path(
    config: dict, pattern: str, checkpoint: str, task: str, method: str, lr: float, lam: float, seed: int
) -> str:
    """A fine-tuning run's file (`pattern`: its metrics or its line table)."""
    return path(
        config,
        pattern,
        checkpoint=checkpoint,
        task=task,
        method=method,
        lr=format_hparam(lr),
        lam=format_hparam(lam),
        seed=seed,
    )


# --- the adaptive learning-rate search (checkpoint rules: each round's runs come from the last) ----

# round r's JSON of one (checkpoint, task, method, λ); the workflow's checkpoint raises until it exists
RoundFile = Callable[[int], str]


def search_round_inputs(
    config: dict, checkpoint: str, task: str, method: str, lam: float, previous: str | None
) -> dict:
    """Inputs of a search round: the previous round's JSON (none for round 0) and the runs it asks for."""
    search = finetune_search(config)
    if previous is None:
        lrs = [search.lattice[i] for i in search.start]
    else:
        record = json.loads(Path(previous).read_text())
        if record["done"]:
            raise ValueError(f"{previous}: the search ended in this round; there is no next round")
        lrs = record["next"]
    seed = finetune_section(config)["seeds"][0]
    runs = [run_path(config, layout.FINETUNE_PART, checkpoint, task, method, lr, lam, seed) for lr in lrs]
    return {"previous": [previous] if previous else [], "runs": runs}


def search_final(config: dict, round_file: RoundFile) -> str:
    """The JSON of a search's last round, walking its rounds from 0."""
    for r in range(finetune_search(config).rounds_bound):
        record_file = round_file(r)
        if json.loads(Path(record_file).read_text())["done"]:
            return record_file
    raise ValueError(f"{record_file}: the search has not ended after its most rounds ({r + 1})")


def search_setting_inputs(
    config: dict, checkpoint: str, task: str, method: str, lam: str, final: str
) -> dict:
    """Inputs of a finished search's (checkpoint, task, method, λ): its last round's JSON, and the metrics
    and line tables of every run: each evaluated learning rate with the first seed, the other
    seeds at the chosen one."""
    record, seeds = json.loads(Path(final).read_text()), finetune_section(config)["seeds"]
    runs = [(row["learning_rate"], seeds[0]) for row in record["evaluated"]]
    runs += [(record["chosen"], seed) for seed in seeds[1:]]
    lam = float(lam)

    def parts(pattern: str) -> list[str]:
        return [run_path(config, pattern, checkpoint, task, method, lr, lam, seed) for lr, seed in runs]

    return {"final": [final], "runs": parts(layout.FINETUNE_PART), "lines": parts(layout.FINETUNE_LINE_PART)}


def search_finals(config: dict, checkpoints: Checkpoints) -> list[str]:
    """Every search's final record (rule lr_search's inputs)."""
    ft = finetune_section(config)
    return [
        path(config, layout.LR_SEARCH_FINAL, checkpoint=c, task=t, method=m, lam=format_hparam(lam))
        for c in checkpoints
        for t in ft["tasks"]
        for m in finetune_methods(config)
        for lam in ft["lambdas"]
    ]


def search_bound(config: dict, checkpoints: Checkpoints) -> str:
    """The search's cost before it runs (shown by a dry run): its most runs and rounds, against the
    full grid at its resolution."""
    search, ft = finetune_search(config), finetune_section(config)
    settings = len(checkpoints) * len(ft["tasks"]) * len(finetune_methods(config)) * len(ft["lambdas"])
    seeds = len(ft["seeds"])
    per_search, rounds = search.runs_bound + seeds - 1, search.rounds_bound + (seeds > 1)
    grid = search.grid_size * seeds
    searching = isinstance(ft["learning_rates"], dict)
    label = "finetune.learning_rates.search" if searching else "finetune.seeds_at: tuned"
    return (
        f"{label}: at most {per_search} fine-tuning runs in {rounds} "
        f"rounds per (checkpoint, task, method, λ) ({search.runs_bound} with seed {ft['seeds'][0]}, "
        f"then {seeds - 1} other seed(s) at the chosen rate); at most {per_search * settings} runs in all vs "
        f"{grid * settings} for the full grid at the same resolution ({per_search / grid:.0%})"
    )


def curvature_sharpness_parts(config: dict, checkpoints: Checkpoints) -> list[str]:
    if not curvature_enabled(config):
        return []
    return [path(config, layout.CURVATURE_SHARPNESS_PART, checkpoint=name) for name in checkpoints]


def ntk_parts(config: dict, checkpoints: Checkpoints) -> list[str]:
    """The empirical NTK's rows: one file per checkpoint (every fine-tuning task)."""
    if not ntk_enabled(config):
        return []
    return [path(config, layout.NTK_PART, checkpoint=c) for c in checkpoints]


def ntk_task_tables(config: dict) -> dict[str, str]:
    """Rule ntk's task inputs: each fine-tuning task's table, by name."""
    return {t: path(config, layout.TASK_TABLE, task=t) for t in text_tasks(config)}


def curvature_line_parts(config: dict, checkpoints: Checkpoints) -> list[str]:
    """Every line table: the Gaussian lines of each checkpoint and each fine-tuning run's line."""
    if not curvature_enabled(config):
        return []
    gaussian = [path(config, layout.CURVATURE_LINE_PART, checkpoint=name) for name in checkpoints]
    return gaussian + finetune_parts(config, checkpoints, layout.FINETUNE_LINE_PART)


# --- the judged instruction-following metric (alpaca_eval) ------------------------------------------


def judge_parts(config: dict, checkpoints: Checkpoints, pattern: str = layout.JUDGE_PART) -> list[str]:
    """One judge job's table per (checkpoint, task) (`pattern`: its metric rows or its annotations)."""
    if not alpaca_eval_enabled(config):
        return []
    judge = alpaca_eval_config(config).judge.name
    tasks = finetune_section(config)["tasks"]
    return [path(config, pattern, judge=judge, checkpoint=c, task=t) for c in checkpoints for t in tasks]


def judge_inputs(config: dict, checkpoints: Checkpoints, checkpoint: str, task: str) -> dict[str, list[str]]:
    """A judge job's inputs: the instruction set, the reference run's responses, the responses of
    every fine-tuning run of (checkpoint, task) and of the checkpoint before fine-tuning. The
    reference is a run of the first fine-tuning method."""
    ft, section = finetune_section(config), alpaca_eval_config(config)
    ref, methods = section.reference, list(finetune_methods(config))
    ref_checkpoint = reference_checkpoint(config, checkpoints.values())
    runs = [
        run_path(config, layout.GENERATIONS, checkpoint, task, method, lr, lam, seed)
        for method in methods
        for lr in finetune_lrs(config)
        for lam in ft["lambdas"]
        for seed in ft["seeds"]
    ]
    return {
        "instructions": [path(config, layout.ALPACA_EVAL_INSTRUCTIONS)],
        "reference": [
            run_path(
                config,
                layout.GENERATIONS,
                ref_checkpoint,
                task,
                methods[0],
                ref.learning_rate,
                ref.lambda_reg,
                ref.seed,
            )
        ],
        "runs": runs,
        "base": [path(config, layout.BASE_GENERATIONS, checkpoint=checkpoint)] if section.base else [],
    }


def instruction_inputs(config: dict) -> list[str]:
    """The instruction rule's input: the chat task's table when the instructions come from one."""
    src = alpaca_eval_config(config).instructions
    return [path(config, layout.TASK_TABLE, task=src.task)] if src.source == "task" else []


def metric_parts(config: dict, checkpoints: Checkpoints) -> list[str]:
    """Every per-job table the metrics rule aggregates."""
    theory = [path(config, layout.THEORY_METRICS)] if theory_enabled(config) else []
    return (
        perturb_parts(config, checkpoints)
        + lm_eval_parts(config, checkpoints)
        + finetune_parts(config, checkpoints)
        + judge_parts(config, checkpoints)
        + curvature_sharpness_parts(config, checkpoints)
        + ntk_parts(config, checkpoints)
        + theory
    )


def reference_ppl(config: dict, checkpoints: Checkpoints) -> list[str]:
    """data/reference_ppl.parquet where the study pre-trains (its training targets make the unigram)."""
    return [path(config, layout.REFERENCE_PPL)] if pretrain_dirs(config, checkpoints) else []


def sweep_plan(checkpoints: Checkpoints) -> list[dict]:
    """One row per checkpoint of the study (rule sweep_plan): its series, budget in tokens and
    coarse-to-fine priority (pipeline/workflow/priority.py)."""
    return [
        {
            "checkpoint": name,
            "source": spec.source,
            "model": spec.model,
            "pretrain_seed": spec.pretrain_seed,
            "budget": float(spec.tokens),
            "priority": job_priority(checkpoints, {"checkpoint": name}),
        }
        for name, spec in checkpoints.items()
    ]


def findings_inputs(config: dict, checkpoints: Checkpoints) -> list[str]:
    """The tables of this study that the registered claims read (their records declare them,
    pipeline/analysis/claims.py), those this study makes, and its sweep's plan (the budgets a
    partial sweep's findings count against)."""
    pretrain = bool(pretrain_dirs(config, checkpoints))
    made = {
        layout.METRICS: True,
        layout.FINETUNE_TUNED: finetune_enabled(config),
        layout.PRETRAIN_RUNS: pretrain,
        layout.STABLE_TWIN_METRICS: bool(stable_twins(checkpoints)),
        layout.REFERENCE_PPL: bool(reference_ppl(config, checkpoints)),
        layout.TOKEN_COVERAGE: pretrain and bool(coverage_task_tables(config)),
        layout.VLM_DATA: bool(vlm_tasks(config)),
        layout.THEORY_METRICS: theory_enabled(config),
        layout.THEORY_TRANSFER: theory_enabled(config),
    }
    return [path(config, t) for t in tables_read() if made[t]] + [path(config, layout.SWEEP_PLAN)]


def all_outputs(config: dict, checkpoints: Checkpoints) -> list[str]:
    """What `rule all` asks for: metrics, analysis tables, the figures of every enabled stage and the
    study's findings page."""
    out = [path(config, layout.METRICS), path(config, layout.INFLECTION), path(config, layout.FINDINGS)]
    out += stage_figures(config, "sweep")
    if pretrain_dirs(config, checkpoints):
        out += stage_figures(config, "pretrain") + [path(config, layout.CORPUS_MANIFEST)]
    if pretrain_dirs(config, checkpoints) and coverage_task_tables(config):
        out += [path(config, layout.TOKEN_COVERAGE)]
    if finetune_enabled(config):
        out += [path(config, layout.FINETUNE_TUNED)] + stage_figures(config, "finetune")
        out += [path(config, layout.LR_SEARCH)] if finetune_search(config) else []
    if alpaca_eval_enabled(config):
        out += stage_figures(config, "alpaca_eval")
    if benchmarks_enabled(config):
        out += stage_figures(config, "benchmarks")
    if curvature_enabled(config):
        out += [path(config, layout.CURVATURE_SUMMARY)] + stage_figures(config, "curvature")
    if linearization_enabled(config):
        out += stage_figures(config, "linearization")
    if vlm_tasks(config):
        out += stage_figures(config, "multimodal")
    if theory_enabled(config):
        out += [path(config, layout.THEORY_METRICS), path(config, layout.THEORY_TRANSFER)]
        out += stage_figures(config, "theory")
    return out


# --- inputs that depend on the config -------------------------------------------------------------


def corpus_packages(config: dict) -> list[str]:
    """The pinned npm data tarballs the embedded corpus reads."""
    corpus = config["corpus"]
    if corpus["source"] != "embedded":
        return []
    return [f"{corpus['package_dir']}/{f}" for n in corpus["embedded"] for f in EMBEDDED_SOURCES[n].files]


def checkpoint_inputs(spec: CheckpointSpec) -> list[str]:
    """Input of a job on one checkpoint: the sweep's output dir or the local dir (none for hub)."""
    return [spec.path] if spec.source in ("sweep", "local") else []


def task_package_files(config: dict, task: str) -> list[str]:
    """The pinned package files a task's embedded data is read from (none for the hub source)."""
    return task_files(task, task_settings(config, task))


def tokenizer_task_tables(config: dict) -> list[str]:
    """Task tables whose training texts the tokenizer is also trained on (tokenizer.extra_texts)."""
    names = [n for n in config["tokenizer"]["extra_texts"] if n in TASK_NAMES]
    return [path(config, layout.TASK_TABLE, task=n) for n in names]


def text_task_params(config: dict, task: str) -> dict:
    """The record of a text task in its fine-tuning jobs (pipeline/tasks/text.py TextTaskSpec): its table
    and the study's cache of LM tasks' tokenized training splits (the same tokens, ~9 s less per job)."""
    return {
        "kind": "text",
        "name": task,
        "table": path(config, layout.TASK_TABLE, task=task),
        "token_cache": path(config, layout.TOKEN_CACHE),
    }


def coverage_task_tables(config: dict) -> list[str]:
    """The fine-tuning text tasks' tables, whose evaluation tokens rule token_coverage checks."""
    return (
        [path(config, layout.TASK_TABLE, task=n) for n in text_tasks(config)]
        if finetune_enabled(config)
        else []
    )


def benchmark_figure_inputs(config: dict) -> dict[str, str]:
    """The metrics table, and the tuned-LR table when the study fine-tunes."""
    inputs = {"metrics": path(config, layout.METRICS)}
    return inputs | ({"tuned": path(config, layout.FINETUNE_TUNED)} if finetune_enabled(config) else {})


def vlm_tower_tokenizer(config: dict, checkpoints: Checkpoints) -> list[str]:
    """The toy tower's caption tokenizer: the study's own (a sweep), else its first checkpoint's
    directory (a hub checkpoint: none here, its job reads the hub revision's)."""
    if config["checkpoints"]["source"] == "sweep":
        return [path(config, "tokenizer/tokenizer.json")]
    return checkpoint_inputs(next(iter(checkpoints.values())))
