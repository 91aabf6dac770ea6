# Input functions and config helpers shared by every rule.
from pathlib import Path

from snakemake.exceptions import WorkflowError

from pipeline.evaluate.benchmarks import BenchmarkError, benchmark_config, validate_benchmark_tasks
from pipeline.models.checkpoints import study_checkpoints
from pipeline.models.hub import HubRevisionError, check_hub_checkpoints
from pipeline.data.corpus import EMBEDDED_PACKAGES
from pipeline.models.presets import finetune_lr_grid, format_hparam, job_resources, steps_for_budget
from pipeline.data.tasks import TASK_NAMES, TaskError, task_files
from pipeline.workflow.figures import figure_names

FIGURE_STEMS = figure_names("theory")


wildcard_constraints:
    model=r"[A-Za-z0-9_.-]+",
    budget=r"\d+",
    checkpoint=r"[A-Za-z0-9._-]+",
    task="|".join(TASK_NAMES),
    lr=r"[0-9.e+-]+",
    lam=r"[0-9.e+-]+",
    seed=r"\d+",


def study_path(rel):
    """A path under results/<study>/."""
    return f"results/{config['study']}/{rel}"


def _check_config():
    """Semantic checks the JSON schema cannot express; fail before any job starts."""
    pt = config["pretrain"]
    try:
        for budget in pt["budgets"]:
            steps_for_budget(budget, pt["batch_size"], pt["seq_len"])
        specs = study_checkpoints(config)
    except (ValueError, KeyError) as err:
        raise WorkflowError(f"invalid config: {err}")
    for spec in specs:
        if spec.source == "local" and not Path(spec.path, "config.json").is_file():
            raise WorkflowError(
                f"invalid config: checkpoints.local entry {spec.name!r}: {spec.path} is not a model directory (expected config.json there)"
            )
    if config["tokenizer"]["kind"] == "file" and not config["tokenizer"].get("path"):
        raise WorkflowError("invalid config: tokenizer.path is required when tokenizer.kind is 'file'")
    _check_grid("finetune.learning_rates", finetune_lrs())
    _check_grid("finetune.lambdas", finetune_config().get("lambdas", [0.0]))
    _check_tasks()
    # lm-eval task names: checked once in the main process (source builtin builds lm-eval's task
    # index, ~10 s, which every cluster job's re-parse of the workflow would pay again)
    try:
        if workflow.is_main_process:
            validate_benchmark_tasks(bench_config()["tasks"], bench_config()["source"])
    except BenchmarkError as err:
        raise WorkflowError(f"invalid config: eval.benchmarks: {err}")
    return {s.name: s for s in specs}


def _check_tasks():
    """The data settings of every task a job reads (fine-tuning, tokenizer.extra_texts), e.g. a
    chat task without source hub, fail here rather than in a job."""
    names = list(finetune_config().get("tasks") or []) if finetune_enabled() else []
    names += [n for n in config["tokenizer"].get("extra_texts") or [] if n in TASK_NAMES and n not in names]
    data = finetune_config().get("task_data") or {}
    for name in names:
        try:
            task_files(name, data.get(name) or {})
        except TaskError as err:
            raise WorkflowError(f"invalid config: {err}")


def _check_grid(key, values):
    """Grid values name output files: two values with the same file name are an error."""
    names = [format_hparam(v) for v in values]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        raise WorkflowError(
            f"invalid config: {key} has values that differ only beyond 6 significant digits: {clash}"
        )


def finetune_config():
    return config.get("finetune") or {}


def eval_config():
    """`eval` without the benchmark suite's settings: perplexity jobs do not rerun when those change."""
    return {k: v for k, v in config["eval"].items() if k != "benchmarks"}


def bench_config():
    """`eval.benchmarks` with its defaults (pipeline.evaluate.benchmarks); no tasks: no benchmark jobs."""
    return benchmark_config(config["eval"].get("benchmarks"))


def benchmarks_enabled():
    return bool(bench_config()["tasks"])


def finetune_bench():
    """The benchmark settings a fine-tuning job scores its model with (None: no benchmarks, and
    then changing them reruns no fine-tuning job)."""
    return bench_config() if benchmarks_enabled() else None


def finetune_enabled():
    return bool(finetune_config().get("enabled", True)) and bool(finetune_config().get("tasks"))


def finetune_lrs():
    """The learning-rate grid: a list, or a named grid ("paper": Table 4, "instruct": Table 2)."""
    return finetune_lr_grid(finetune_config().get("learning_rates", []))


CHECKPOINTS = _check_config()
DEVICE = config.get("device", "auto")
FORMATS = config["analysis"]["figure_formats"]


def gpu_count():
    return 0 if DEVICE == "cpu" else int(DEVICE == "cuda")


def corpus_packages(wildcards):
    """The pinned npm data tarballs the embedded corpus reads."""
    if config["corpus"]["source"] != "embedded":
        return []
    return [f"{config['corpus']['package_dir']}/{EMBEDDED_PACKAGES[n]}" for n in config["corpus"]["embedded"]]


def pretrain_hparams():
    """Every pre-training hyperparameter that changes the numbers (a change reruns the sweep)."""
    keys = ["seq_len", "batch_size", "lr", "betas", "weight_decay", "warmup_fraction", "grad_clip", "seed"]
    return {k: config["pretrain"][k] for k in keys}


def provenance_config():
    """The config without keys that cannot change a number (cadence, threads, analysis)."""
    skip = {"log_every", "checkpoint_every", "threads"}
    cfg = {k: v for k, v in config.items() if k != "analysis"}
    if not benchmarks_enabled():  # benchmark settings without benchmark tasks change no number
        cfg["eval"] = eval_config()
    return {
        k: ({kk: vv for kk, vv in v.items() if kk not in skip} if isinstance(v, dict) else v)
        for k, v in cfg.items()
    }


def job_preset(wildcards):
    """The model preset of a job on one model (pretrain) or one checkpoint (perturb, ...)."""
    return wildcards.model if hasattr(wildcards, "model") else CHECKPOINTS[wildcards.checkpoint].model


def job_params(wildcards):
    """Parameter count of a job's hub checkpoint (sizes its resources); None for size presets."""
    spec = CHECKPOINTS[wildcards.checkpoint] if hasattr(wildcards, "checkpoint") else None
    return spec.params if spec is not None and spec.source == "hub" else None


def preset_resources(stage):
    """resources: callables sized from the job's model preset (a hub checkpoint: from its parameter
    count); mem_mb and runtime grow with the attempt (`--retries`, profiles/slurm), so a job killed
    for memory or time comes back larger."""

    def get(wildcards, key, attempt):
        return (
            job_resources(
                job_preset(wildcards), stage, "cuda" if gpu_count() else "cpu", job_params(wildcards)
            )[key]
            * attempt
        )

    return {
        "mem_mb": lambda wc, attempt: get(wc, "mem_mb", attempt),
        "runtime": lambda wc, attempt: get(wc, "runtime", attempt),
        "gpu": gpu_count(),  # one device per job whatever the model (pipeline.models.presets.job_resources)
    }


def fixed_resources(mem_mb, runtime):
    """resources of a preset-independent job: mem_mb and runtime (minutes) times the attempt."""
    return {"mem_mb": lambda wc, attempt: mem_mb * attempt, "runtime": lambda wc, attempt: runtime * attempt}


def checkpoint_dir(wildcards):
    """Input of a job on one checkpoint: the sweep's output dir or the local dir (none for hub)."""
    spec = CHECKPOINTS[wildcards.checkpoint]
    return [spec.path] if spec.source in ("sweep", "local") else []


def checkpoint_spec(wildcards):
    """The CheckpointSpec a job rebuilds (a params change reruns it): hub cache_dir / offline only
    when set, so sweep and local jobs keep their params; the parameter count (resources only) is left out."""
    spec = CHECKPOINTS[wildcards.checkpoint]
    out = {k: getattr(spec, k) for k in ("name", "source", "model", "tokens", "path", "model_id", "revision")}
    return out | {k: getattr(spec, k) for k in ("cache_dir", "offline") if getattr(spec, k) is not None}


def perturb_parts():
    return [study_path(f"perturb/{name}.parquet") for name in CHECKPOINTS]


def pretrain_dirs():
    return [study_path(f"pretrain/{s.model}/{s.tokens}") for s in CHECKPOINTS.values() if s.source == "sweep"]


def task_config(wildcards):
    """Data settings of one fine-tuning task (a change rebuilds its table and reruns its jobs)."""
    return (finetune_config().get("task_data") or {}).get(wildcards.task) or {}


def task_package_files(wildcards):
    """The pinned package files a task's embedded data is read from (none for the hub source)."""
    return task_files(wildcards.task, task_config(wildcards))


def tokenizer_task_tables(wildcards):
    """Task tables whose training texts the tokenizer is also trained on (tokenizer.extra_texts)."""
    names = [n for n in config["tokenizer"].get("extra_texts") or [] if n in TASK_NAMES]
    return [study_path(f"data/tasks/{n}.parquet") for n in names]


def finetune_hparams():
    """Every fine-tuning hyperparameter except the grid ones (those are wildcards)."""
    keys = [
        "epochs",
        "max_steps",
        "batch_size",
        "micro_batch_size",
        "seq_len",
        "schedule",
        "warmup_fraction",
        "warmup_steps",
        "betas",
        "weight_decay",
        "grad_clip",
        "eval_batch_size",
        "eval_max_tokens",
    ]
    ft = finetune_config()
    return {k: ft[k] for k in keys if k in ft}


def finetune_parts():
    """One metrics file per (checkpoint, task, lr, λ, seed), plus each (checkpoint, task)'s base evaluation."""
    if not finetune_enabled():
        return []
    ft = finetune_config()
    out = []
    for name in CHECKPOINTS:
        for task in ft["tasks"]:
            out.append(study_path(f"finetune/{name}/{task}/base.parquet"))
            out += [
                study_path(
                    f"finetune/{name}/{task}/lr{format_hparam(lr)}_lam{format_hparam(lam)}_seed{seed}.parquet"
                )
                for lr in finetune_lrs()
                for lam in ft["lambdas"]
                for seed in ft["seeds"]
            ]
    return out


def finetune_outputs():
    if not finetune_enabled():
        return []
    out = [study_path("analysis/finetune_tuned.parquet")]
    return out + [study_path(f"figures/{f}.{ext}") for f in FINETUNE_FIGURES for ext in FORMATS]


FINETUNE_FIGURES = ["finetune_fixed_lr", "finetune_tuned", "finetune_distance"]


def theory_enabled():
    return bool(config.get("theory", {}).get("enabled", False))


def lm_eval_parts():
    return [study_path(f"lm_eval/{name}.parquet") for name in CHECKPOINTS] if benchmarks_enabled() else []


def benchmark_figure_inputs(wildcards):
    """The metrics table, and the tuned-LR table when the study fine-tunes."""
    inputs = {"metrics": study_path("metrics.parquet")}
    return inputs | ({"tuned": study_path("analysis/finetune_tuned.parquet")} if finetune_enabled() else {})


def metric_parts():
    return (
        perturb_parts()
        + lm_eval_parts()
        + finetune_parts()
        + ([study_path("theory/metrics.parquet")] if theory_enabled() else [])
    )


def theory_outputs():
    """Everything the theory stage writes (rule all asks for it when theory.enabled)."""
    return [study_path("theory/metrics.parquet")] + [
        study_path(f"figures/{s}.{ext}") for s in FIGURE_STEMS for ext in FORMATS
    ]


def all_outputs():
    figs = ["progressive_sensitivity", "inflection_point"] + (["pretrain_loss"] if pretrain_dirs() else [])
    out = [study_path("metrics.parquet"), study_path("analysis/inflection.parquet")]
    out += [study_path(f"figures/{f}.{ext}") for f in figs for ext in FORMATS]
    out += finetune_outputs()
    if benchmarks_enabled():
        out += [study_path(f"figures/benchmarks.{ext}") for ext in FORMATS]
    if theory_enabled():
        out += theory_outputs()
    return out


def check_hub_revisions(jobs):
    """Every hub revision a job to run loads exists (offline: is in the cache); the error names the
    model id, the revision and what to do. Not under --dry-run (onstart does not run there)."""
    names = {getattr(job.wildcards, "checkpoint", None) for job in jobs} - {None}
    specs = [CHECKPOINTS[n] for n in sorted(names) if n in CHECKPOINTS and CHECKPOINTS[n].source == "hub"]
    try:
        check_hub_checkpoints(specs)
    except HubRevisionError as err:
        raise WorkflowError(f"checkpoints.hub: {err}")


# Cluster execution (profiles/slurm): start-up checks that run before any job is submitted.
CLUSTER_KEYS = ("slurm_account", "slurm_partition")


def max_gpus(preset):
    """GPUs one job can use: every stage runs its model on a single device (no model or data
    parallelism), so 1 - and 0 with `device: cpu`."""
    return 0 if DEVICE == "cpu" else 1


def requested_gpus(resources):
    """GPU count a job asks the scheduler for: `gpu` (2 or 'a100:2') or `gres` ('gpu:2', 'gpu:a100:2')."""
    counts = []
    for key in ("gpu", "gres"):
        value = resources.get(key)
        if value in (None, "", 0):
            continue
        text = str(value)
        if key == "gres" and not text.startswith("gpu"):
            continue
        last = text.rsplit(":", 1)[-1]
        counts.append(int(last) if last.isdigit() else 1)
    return max(counts, default=0)


def check_cluster_jobs(jobs, executor):
    """Errors for a cluster run that cannot work: a profile placeholder left in a resource
    (profiles/slurm/config.yaml ships `<ACCOUNT>` / `<PARTITION>`), or a job asking for more
    GPUs than its model preset can use. Only under the slurm executor; the message names the key."""
    if executor != "slurm":
        return
    for job in jobs:
        resources, name = job.resources, job.rule.name
        for key in CLUSTER_KEYS:
            value = resources.get(key)
            if isinstance(value, str) and value.startswith("<") and value.endswith(">"):
                hint = (
                    " (or delete that line on a cluster without accounts)" if key == "slurm_account" else ""
                )
                raise WorkflowError(
                    f"cluster profile: {key}={value!r} (job {name}) is still the placeholder of profiles/slurm/config.yaml; "
                    f"set {key} under default-resources in the profile{hint}"
                )
        keys = job.wildcards.keys()
        preset = job_preset(job.wildcards) if ("model" in keys or "checkpoint" in keys) else None
        allowed = max_gpus(preset) if preset else 0
        asked = requested_gpus(resources)
        if asked > allowed:
            what = f"a job of model preset {preset!r}" if preset else "this step (it runs no model)"
            raise WorkflowError(
                f"cluster profile: {name} asks for {asked} GPUs (resource gpu/gres), but {what} can use at most {allowed} "
                f"(one device per job, none with device cpu); lower gpu for {name} under set-resources"
            )
