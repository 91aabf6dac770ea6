# Shared by every rule: wildcard constraints, and one-line wrappers that bind this study's config
# to the workflow layer (pipeline/workflow/: config checks, results layout, targets, params, jobs).
from dataclasses import asdict

from snakemake.logging import logger

from pipeline.data.shard_tokenize import HUB
from pipeline.data.tasks import TASK_NAMES
from pipeline.data.token_shards import shard_set
from pipeline.multimodal.config import VLM_TASKS
from pipeline import layout, warm_start
from pipeline.workflow import cluster, multimodal, pretrain_sweep, priority, targets
from pipeline.workflow.config import (
    alpaca_eval_config,
    alpaca_eval_enabled,
    bench_config,
    check_config,
    curvature_section,
    eval_config,
    finetune_enabled,
    finetune_search,
    finetune_section,
    grid_job_seeds,
    grid_jobs,
    reference_checkpoint,
    task_settings,
    text_files,
)
from pipeline.workflow.methods import check_methods, config_at_hand
from pipeline.analysis.figure_registry import LEGEND as FIGURE_LEGEND, figures_of_rule
from pipeline.workflow.params import (
    checkpoint_params,
    curvature_eval,
    curvature_finetune_params,
    curvature_params,
    benchmark_params,
    finetune_params,
    generation_params,
    judge_params,
    lr_search_params,
    ntk_params,
    pretrain_params,
    provenance_config,
    task_base_params,
    theory_params,
    theory_transfer_params,
)

TEXT_TASK = "|".join(TASK_NAMES)  # rules finetune and task_base; the LLaVA rules take VLM_TASK
VLM_TASK = "|".join(VLM_TASKS)


wildcard_constraints:
    model=r"[A-Za-z0-9_.-]+",
    budget=r"\d+",
    step=r"\d+",
    pretrain_seed=r"\d+",
    checkpoint=r"[A-Za-z0-9._-]+",
    task=f"{TEXT_TASK}|{VLM_TASK}",
    lr=r"[0-9.e+-]+",
    lam=r"[0-9.e+-]+",
    method=r"[a-z][a-z0-9-]*",
    seed=r"\d+",
    round=r"\d+",
    judge=r"[A-Za-z0-9._-]+",
    shard=r"[A-Za-z0-9._-]+",


# Under a cluster executor Snakemake exits within a second of Ctrl-C (after cancelling the jobs) or
# of a run's end, not when its status-check sleep ends (up to 3 minutes; profiles/README.md)
if workflow.is_main_process:
    cluster.stop_status_checks_promptly()

CHECKPOINTS = check_config(config, check_benchmark_tasks=workflow.is_main_process)
if workflow.is_main_process:  # method patterns on each model's names (pipeline/workflow/methods.py)
    check_methods(config, [s for s in CHECKPOINTS.values() if config_at_hand(s)])
if workflow.is_main_process and finetune_enabled(config) and finetune_search(config):
    logger.info(targets.search_bound(config, CHECKPOINTS))  # a dry run shows the search's cost
if workflow.is_main_process and config["checkpoints"]["source"] == "sweep":
    logger.info(pretrain_sweep.sweep_cost(config))  # a dry run shows the sweep's cost
MAIN_CHECKPOINTS = targets.main_checkpoints(CHECKPOINTS)  # without the WSD stable twins
DEVICE = config["device"]
FORMATS = config["analysis"]["figure_formats"]


def study_path(rel, **fields):
    """A path under results/<study>/ (a layout pattern; fields fill its wildcards)."""
    return targets.path(config, rel, **fields)


def figure_outputs(rule):
    """Named outputs of a figure rule: each figure it writes (figure registry) in every format,
    filed in the report under its caption and category."""
    return {
        f.name: report(
            [study_path(layout.FIGURE, name=f.name, ext=ext) for ext in FORMATS],
            caption=f"../{f.caption}",
            category=f.category,
        )
        for f in figures_of_rule(rule)
    }


TEXT_FILES = text_files(config)  # pretrain.text_files by shard name


def pretrain_tokens():
    """What pre-training reads: the shards the study tokenizes from pretrain.text_files, the shards
    of pretrain.token_shards, else the study's split."""
    shards = config["pretrain"].get("token_shards")
    if TEXT_FILES:
        return [study_path(layout.TOKEN_SHARD, shard=name) for name in TEXT_FILES]
    return list(shard_set(shards).paths) if shards else study_path(layout.TRAIN_TOKENS)


def text_file(wildcards):
    """A local text file's path (an input); none for a hub dataset's file (the job fetches it)."""
    source = TEXT_FILES[wildcards.shard]
    return [] if source.startswith(HUB) else source


def wsd_decay_input(wildcards):
    """Under WSD, the stable state a budget's decay branches from."""
    return pretrain_sweep.decay_inputs(
        config, wildcards.model, wildcards.pretrain_seed, int(wildcards.budget)
    )


def wsd_stable_input(wildcards):
    """The stable state a stable segment goes on from (none for the first)."""
    return pretrain_sweep.stable_inputs(config, wildcards.model, wildcards.pretrain_seed, int(wildcards.step))


def wsd_twin_input(wildcards):
    """The stable state at a budget's last step, which its stable twin's checkpoint holds."""
    return pretrain_sweep.twin_inputs(config, wildcards.model, wildcards.pretrain_seed, int(wildcards.budget))


def preset_resources(stage, ranks=1):
    return cluster.preset_resources(stage, DEVICE, CHECKPOINTS, ranks)


def pretrain_resources(job_tokens):
    return cluster.pretrain_resources(DEVICE, CHECKPOINTS, config, job_tokens)


def finetune_resources(runs=1):
    return cluster.finetune_resources(DEVICE, CHECKPOINTS, config, runs)


def fixed_resources(mem_mb, runtime):
    return cluster.fixed_resources(mem_mb, runtime)


def budget_priority(wildcards):
    """Coarse to fine: a job's priority from its budget's place in the sweep (ends and middle first)."""
    return priority.job_priority(CHECKPOINTS, dict(wildcards.items()))


def evaluate_inputs(wildcards):
    return targets.evaluate_inputs(config, CHECKPOINTS[wildcards.checkpoint])


def checkpoint_dir(wildcards):
    return targets.checkpoint_inputs(CHECKPOINTS[wildcards.checkpoint])


def checkpoint_spec(wildcards):
    return checkpoint_params(CHECKPOINTS[wildcards.checkpoint])


def corpus_packages(wildcards):
    return targets.corpus_packages(config)


def task_config(wildcards):
    return task_settings(config, wildcards.task)


def task_package_files(wildcards):
    return targets.task_package_files(config, wildcards.task)


def tokenizer_task_tables(wildcards):
    return targets.tokenizer_task_tables(config)


def coverage_task_tables(wildcards):
    return targets.coverage_task_tables(config)


def reference_ppl(wildcards):
    """The study's reference perplexities (unigram, uniform), where it pre-trains; none for hub checkpoints."""
    return targets.reference_ppl(config, CHECKPOINTS)


def findings_inputs(wildcards):
    return targets.findings_inputs(config, CHECKPOINTS)


def benchmark_figure_inputs(wildcards):
    return targets.benchmark_figure_inputs(config)


# --- the adaptive learning-rate search: rounds are checkpoints; each (checkpoint, task, method, λ) walks its own ---


def search_setting(wildcards):
    """The (checkpoint, task, method, λ) a search job belongs to."""
    return {k: getattr(wildcards, k) for k in ("checkpoint", "task", "method", "lam")}


def search_round_file(**fields):
    """round -> that search round's JSON (raises, so Snakemake runs it, until it exists)."""
    return lambda r: checkpoints.lr_search_round.get(**fields, round=r).output[0]


def lr_search_round_inputs(wildcards):
    r = int(wildcards.round)
    fields = search_setting(wildcards)
    previous = search_round_file(**fields)(r - 1) if r > 0 else None
    return targets.search_round_inputs(config, **fields, previous=previous)


def lr_search_setting_inputs(wildcards):
    fields = search_setting(wildcards)
    final = targets.search_final(config, search_round_file(**fields))
    return targets.search_setting_inputs(config, **fields, final=final)


# --- the judged metric (alpaca_eval): fine-tuning jobs also write responses when it is on ---------


def generation_inputs():
    on = alpaca_eval_enabled(config)
    return {"instructions": study_path(layout.ALPACA_EVAL_INSTRUCTIONS)} if on else {}


def generation_outputs():
    return {"generations": study_path(layout.GENERATIONS)} if alpaca_eval_enabled(config) else {}


def generation_rule_params():
    return {"generation": generation_params(config)} if alpaca_eval_enabled(config) else {}


def alpaca_eval_instruction_inputs(wildcards):
    return targets.instruction_inputs(config)


def alpaca_eval_instruction_params(config):
    return asdict(alpaca_eval_config(config).instructions)


def alpaca_eval_judge_inputs(wildcards):
    return targets.judge_inputs(config, CHECKPOINTS, wildcards.checkpoint, wildcards.task)


def alpaca_eval_reference(config):
    """The reference run, its checkpoint resolved (null: the study's last)."""
    if not alpaca_eval_enabled(config):
        return None
    ref = asdict(alpaca_eval_config(config).reference)
    return ref | {"checkpoint": reference_checkpoint(config, CHECKPOINTS.values())}


def alpaca_eval_resources():
    return cluster.judge_resources(alpaca_eval_config(config).resources)


def check_judge(jobs):
    cluster.check_judge_jobs(jobs, alpaca_eval_config(config).judge)


# the warm-start server of this run (config warm_start; pipeline/warm_start.py): at most one
WARM_SERVER = []


def start_warm_server(executor):
    """A local run's jobs start in forks of one process that has imported the libraries."""
    if config["warm_start"] and executor == "local":
        WARM_SERVER.append(warm_start.start(Path(".snakemake", "log")))


def stop_warm_server():
    while WARM_SERVER:
        warm_start.stop(WARM_SERVER.pop())


def ntk_task_tables(wildcards):
    return targets.ntk_task_tables(config)


# --- LLaVA (rules/multimodal.smk) ------------------------------------------------------------------


def vlm_data_params(config):
    return multimodal.data_params(config)


def vlm_tower_params(config):
    return multimodal.tower_params(config)


def vlm_stage1_params(config):
    return multimodal.stage1_params(config)


def text_task_params(wildcards):
    """A text task's record (pipeline/tasks/text.py TextTaskSpec)."""
    return targets.text_task_params(config, wildcards.task)


def vlm_task_params(wildcards):
    """A LLaVA task's record, its execution settings aside (pipeline/tasks/llava.py LlavaTaskSpec)."""
    return multimodal.stage2_task_params(config, wildcards)


def vlm_tower_tokenizer(wildcards):
    return targets.vlm_tower_tokenizer(config, CHECKPOINTS)


def check_hub_methods():
    """Method patterns on the hub checkpoints whose config is not in the cache (parse time downloads
    nothing): when the run starts, after their revisions are found."""
    check_methods(config, [s for s in CHECKPOINTS.values() if not config_at_hand(s)])


def check_hub_revisions(jobs):
    cluster.check_hub_jobs(jobs, CHECKPOINTS)


def check_cluster_jobs(jobs, executor):
    cluster.check_cluster_jobs(jobs, executor, DEVICE, CHECKPOINTS)


def finetune_method_params(wildcards):
    """A fine-tuning job's hyperparameters: its method's (finetune.methods) over the section's."""
    return finetune_params(config, wildcards.method)
