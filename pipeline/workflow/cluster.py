"""Jobs and the machines they run on: the resources a job asks for, and the start-up checks of
the jobs to run (onstart): cluster profile placeholders and GPU requests under the slurm
executor, hub revisions of the checkpoints the jobs load; and a cluster run's prompt exit on
Ctrl-C (`stop_status_checks_promptly`).

A job here is anything with Snakemake's job attributes (`rule.name`, `wildcards`, `resources`),
so the checks are tested with plain stand-ins.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from functools import cache
from typing import Any

from snakemake.exceptions import WorkflowError

from pipeline.judge.config import JudgeConfigError, JudgeResources
from pipeline.models.checkpoints import CheckpointSpec
from pipeline.models.hub import HubRevisionError, check_hub_checkpoints
from pipeline.models.integrity import lock_study
from pipeline.models.presets import SIZE_PRESETS
from pipeline.train.memory import Plan, PlanError
from pipeline.workflow.config import finetune_ranks
from pipeline.workflow.plans import checkpoint_shape, finetune_plan
from pipeline.workflow.pretrain_sweep import pretrain_ranks, runtime_minutes

CLUSTER_KEYS = ("slurm_account", "slurm_partition")  # profiles/slurm/config.yaml ships placeholders
STAGES = ("pretrain", "perturb", "finetune")  # the stages job_resources sizes

Checkpoints = dict[str, CheckpointSpec]


def gpu_count(device: str) -> int:
    """GPUs a model job asks for: one with `device: cuda`, none otherwise (`auto` takes what the
    node has)."""
    return int(device == "cuda")


def job_preset(wildcards: Any, checkpoints: Checkpoints) -> str:
    """The model preset of a job on one model (pretrain) or one checkpoint (perturb, ...)."""
    return wildcards.model if hasattr(wildcards, "model") else checkpoints[wildcards.checkpoint].model


def job_params(wildcards: Any, checkpoints: Checkpoints) -> int | None:
    """Parameter count of a job's hub checkpoint (sizes its resources); None for size presets."""
    spec = checkpoints[wildcards.checkpoint] if hasattr(wildcards, "checkpoint") else None
    return spec.params if spec is not None and spec.source == "hub" else None


def preset_resources(stage: str, device: str, checkpoints: Checkpoints, ranks: int = 1) -> dict[str, Any]:
    """resources: callables sized from the job's model preset (a hub checkpoint: from its parameter
    count); mem_mb and runtime grow with the attempt (`--retries`, profiles/slurm), so a job killed
    for memory or time comes back larger. `ranks`: processes of a sharded job (pipeline/train/
    distributed.py), one GPU each with `device: cuda`; each rank loads the model on the host."""
    sized_for = "cuda" if gpu_count(device) else "cpu"

    def get(wildcards: Any, key: str, attempt: int) -> int:
        preset, params = job_preset(wildcards, checkpoints), job_params(wildcards, checkpoints)
        return job_resources(preset, stage, sized_for, params)[key] * attempt

    return {
        "mem_mb": lambda wc, attempt: get(wc, "mem_mb", attempt) * ranks,
        "runtime": lambda wc, attempt: get(wc, "runtime", attempt),
        "gpu": gpu_count(device) * ranks,
        "ranks": ranks,  # the job starts this many processes (torchrun) when > 1
    }


def pretrain_resources(
    device: str, checkpoints: Checkpoints, config: dict, job_tokens: Callable[[Any], int]
) -> dict[str, Any]:
    """resources of a pre-training job (`job_tokens`: the tokens it trains, from its wildcards): the
    preset's per rank, on `pretrain_ranks` processes (pretrain.ranks, or on CUDA the memory planner's
    GPUs for the preset: one for the small presets); with GPUs its time limit from the cost model
    (pretrain_sweep.runtime_minutes) where that is longer than the preset's."""
    base = preset_resources("pretrain", device, checkpoints)  # one rank's

    def ranks(wc: Any) -> int:
        return pretrain_ranks(config, wc.model)

    resources = base | {
        "mem_mb": lambda wc, attempt: base["mem_mb"](wc, attempt) * ranks(wc),
        "gpu": lambda wc: gpu_count(device) * ranks(wc),
        "ranks": ranks,
    }
    if not gpu_count(device):
        return resources

    def runtime(wc: Any, attempt: int) -> int:
        own = runtime_minutes(config, wc.model, job_tokens(wc))
        return max(base["runtime"](wc, attempt), own * attempt)

    return resources | {"runtime": runtime}


def finetune_resources(device: str, checkpoints: Checkpoints, config: dict, runs: int = 1) -> dict[str, Any]:
    """resources of a fine-tuning job of `runs` runs (more than one: finetune.grid_per_job, its
    runtime that many times one run's). On CPU (and `auto`): finetune.ranks processes (1 when null).
    With `device: cuda`: the memory planner's GPU count per checkpoint (finetune.ranks when set),
    host memory for one float32 copy of the checkpoint (rank 0 reads it) plus each rank's process,
    and the preset's runtime. A job that
    fits on no allowed GPU count stops the run at start-up with the planner's arithmetic."""
    if not gpu_count(device):
        base = preset_resources("finetune", device, checkpoints, finetune_ranks(config))
        return base | {"runtime": lambda wc, attempt: base["runtime"](wc, attempt) * runs}

    vocab = config["tokenizer"]["vocab_size"]

    @cache
    def plan(name: str) -> Plan:
        try:
            return finetune_plan(checkpoints[name], config)
        except PlanError as err:
            raise WorkflowError(f"finetune (device cuda): {err}") from None

    @cache
    def host_mb(name: str) -> int:
        """Rank 0 alone reads the float32 checkpoint on the host (the shards live on the GPUs:
        pipeline/train/distributed.py, load_into_shards); every rank its process overhead."""
        return plan(name).gpus * 4000 + 4 * checkpoint_shape(checkpoints[name], vocab).params // 1_000_000

    def mem_mb(wildcards: Any, attempt: int) -> int:
        return host_mb(wildcards.checkpoint) * attempt

    base = preset_resources("finetune", device, checkpoints)
    threads = int(config["finetune"]["threads"])
    return {
        "mem_mb": mem_mb,
        "runtime": lambda wc, attempt: base["runtime"](wc, attempt) * runs,
        "gpu": lambda wildcards: plan(wildcards.checkpoint).gpus,
        "ranks": lambda wildcards: plan(wildcards.checkpoint).gpus,
        # the micro-batch of the same plan: the job's record takes it (changes no number)
        "micro_batch": lambda wildcards: plan(wildcards.checkpoint).micro_batch,
        # the job's threads shared by its ranks (SLURM: --cpus-per-gpu)
        "cpus_per_gpu": lambda wildcards: max(1, threads // plan(wildcards.checkpoint).gpus),
    }


def fixed_resources(mem_mb: int, runtime: int) -> dict[str, Callable]:
    """resources of a preset-independent job: mem_mb and runtime (minutes) times the attempt."""
    return {"mem_mb": lambda wc, attempt: mem_mb * attempt, "runtime": lambda wc, attempt: runtime * attempt}


def scan_resources(mem_mb: int, runtime: int, mb_per_minute: float) -> dict[str, Callable]:
    """resources of a job that reads its inputs once (a sweep's token shards may be terabytes):
    mem_mb, and `runtime` minutes plus one per `mb_per_minute` of input, times the attempt."""
    return fixed_resources(mem_mb, runtime) | {
        "runtime": lambda wc, input, attempt: int(runtime + input.size_mb / mb_per_minute) * attempt
    }


def max_gpus(preset: str, device: str, params: int | None = None) -> int:
    """GPUs one job on `preset` (a hub checkpoint: of `params` parameters) can use, by the rule
    that sizes its resources (job_resources): every stage runs its model on a single
    device (no model or data parallelism), so 1, and 0 with `device: cpu`."""
    sized_for = "cpu" if device == "cpu" else "cuda"
    return max(job_resources(preset, stage, sized_for, params)["gpu"] for stage in STAGES)


def requested_gpus(resources: dict) -> int:
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


def check_cluster_jobs(jobs: Iterable, executor: str | None, device: str, checkpoints: Checkpoints) -> None:
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
                    f"cluster profile: {key}={value!r} (job {name}) is still the placeholder of "
                    f"profiles/slurm/config.yaml; set {key} under default-resources in the profile{hint}"
                )
        keys = job.wildcards.keys()
        if name == JUDGE_RULE:  # the judge's GPUs are its own (alpaca_eval.resources), not the checkpoint's
            continue
        on_model = "model" in keys or "checkpoint" in keys
        preset = job_preset(job.wildcards, checkpoints) if on_model else None
        ranks = int(resources.get("ranks", 1) or 1)
        allowed = max_gpus(preset, device, job_params(job.wildcards, checkpoints)) * ranks if preset else 0
        asked = requested_gpus(resources)
        if asked > allowed:
            what = f"a job of model preset {preset!r}" if preset else "this step (it runs no model)"
            raise WorkflowError(
                f"cluster profile: {name} asks for {asked} GPUs (resource gpu/gres), but {what} can use at "
                f"most {allowed} (one device per rank, {ranks} rank(s), none with device cpu); lower gpu "
                f"for {name} under set-resources"
            )
        if asked > 1 and resources.get("tasks"):
            raise WorkflowError(
                f"cluster profile: {name} runs {asked} GPUs as one task (torchrun starts the ranks), but it "
                f"sets tasks={resources.get('tasks')}, which the slurm executor plugin turns into "
                f"--ntasks-per-gpu (a {asked}-GPU job would run as {asked} one-GPU tasks); remove tasks "
                f"for {name}"
            )


STATUS_SLEEP_TICK = 0.5  # seconds: how soon a sleeping status-check thread sees that Snakemake stops


def stop_status_checks_promptly() -> bool:
    """Make Snakemake under a cluster executor exit within a second of Ctrl-C (a workaround).

    Snakemake's remote executors (snakemake-interface-executor-plugins 9.4.0, `RemoteExecutor`)
    check their jobs' status in a thread that sleeps between checks. On Ctrl-C Snakemake cancels
    the jobs (the slurm plugin: one `scancel`, at once) and then joins that thread, which ends only
    when its sleep does. The slurm plugin (2.8.0) lengthens the sleep by 10 s after each check in
    which no job finished, up to 180 s: a run of long jobs took up to 3 minutes to exit after
    Ctrl-C (and a finished run, up to the first-check interval after its last job; upstream:
    snakemake/snakemake-executor-plugin-slurm#252). Here the sleep wakes every STATUS_SLEEP_TICK s and
    ends as soon as shutdown has begun; how often the status is checked does not change.
    Called when the Snakefile is read (before the executor exists). Returns whether it applies.
    """
    try:
        from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor
    except ImportError:
        return False
    if getattr(RemoteExecutor.sleep, "wakes_on_shutdown", False):
        return True
    if not isinstance(getattr(RemoteExecutor, "next_seconds_between_status_checks", None), property):
        return False  # another interface version: leave it as it is

    async def sleep(self) -> None:
        """RemoteExecutor.sleep (the next interval between status checks), ended by shutdown()."""
        end = time.monotonic() + self.next_seconds_between_status_checks
        while getattr(self, "wait", True) and (left := end - time.monotonic()) > 0:
            await asyncio.sleep(min(left, STATUS_SLEEP_TICK))

    sleep.wakes_on_shutdown = True
    RemoteExecutor.sleep = sleep
    return True


def check_hub_jobs(jobs: Iterable, checkpoints: Checkpoints) -> None:
    """Every hub revision a job to run loads exists (offline: is in the cache); the error names the
    model id, the revision and what to do. When a job loads one, every hub checkpoint of the study
    is locked (pipeline/models/integrity.py: revision -> commit, weights' sha256, identical weights
    an error naming both revisions). Not under --dry-run (onstart does not run there)."""
    names = {getattr(job.wildcards, "checkpoint", None) for job in jobs} - {None}
    specs = [checkpoints[n] for n in sorted(names) if n in checkpoints and checkpoints[n].source == "hub"]
    try:
        if specs and specs[0].lock:  # every hub checkpoint of the study, one refs request per repo
            lock_study([s for s in checkpoints.values() if s.source == "hub"], specs[0].lock)
        else:
            check_hub_checkpoints(specs)
    except HubRevisionError as err:
        raise WorkflowError(f"checkpoints.hub: {err}") from None


# --- the judge (alpaca_eval): its own resources, not its checkpoint's ------------------------------

JUDGE_RULE = "alpaca_eval_judge"


def judge_resources(r: JudgeResources) -> dict[str, Any]:
    """threads and resources of a judge job (alpaca_eval.resources): an endpoint judge needs no GPU,
    an hf_local 70B judge several (its layers spread over them); mem_mb and runtime grow with the attempt."""
    return {
        "threads": int(r.threads),
        "resources": {**fixed_resources(int(r.mem_mb), int(r.runtime)), "gpu": int(r.gpu)},
    }


def check_judge_jobs(jobs: Iterable, judge: Any) -> None:
    """An openai-backend judge's endpoint answers before any job runs (so no generation is wasted
    on a judge that cannot be reached); only when judge jobs are to run."""
    from pipeline.judge.backends import check_endpoint  # heavy (transformers): only when judging

    if judge.backend != "openai" or not any(job.rule.name == JUDGE_RULE for job in jobs):
        return
    try:
        check_endpoint(judge)
    except JudgeConfigError as err:
        raise WorkflowError(str(err)) from None


def job_resources(preset: str, stage: str, device: str, params: int | None = None) -> dict[str, int]:
    """Scheduler resources (mem_mb, runtime in minutes, gpu count) of a job on a preset.

    Sized from the parameter count so a SLURM profile can place jobs; generous for the
    paper's presets, small for `tiny` so a workstation runs many at once. `params` (a hub
    checkpoint's parameter count, `pipeline/models/hub.py`) sizes the job from it instead of a preset.
    """
    if params is not None:
        return hub_job_resources(params, stage, device)
    p = SIZE_PRESETS.get(preset)
    params = 0 if p is None else 12 * p.num_hidden_layers * p.hidden_size**2 + 2 * 50304 * p.hidden_size
    gpu = int(device != "cpu")
    mem_mb = 2000 + params * 16 // 1_000_000 * 4  # fp32 weights + Adam moments + activations
    runtime = {"pretrain": 60, "perturb": 30, "finetune": 30}.get(stage, 30)
    if params > 20_000_000:
        runtime *= 24
    return {"mem_mb": int(mem_mb), "runtime": int(runtime), "gpu": gpu}


# Host-memory bytes per parameter of a job on a loaded (hub) checkpoint. On CPU everything is in
# host memory in fp32: perturbation keeps the weights and a copy to restore (8 B), fine-tuning
# the weights, gradients and two AdamW moments (16 B); +25% for activations and the loader. On
# GPU the host stages the weights while loading and perturbation keeps its restore copy there
# (pipeline/sweeps/noise.py; bf16, 2 B): 5 B covers both. The GPU itself is asked for by count (one
# per job; its type via set-resources).
HOST_BYTES_PER_PARAM = {
    "cpu": {"perturb": 10, "finetune": 20, "pretrain": 20},
    "cuda": {"perturb": 5, "finetune": 5, "pretrain": 5},
}


def hub_job_resources(params: int, stage: str, device: str) -> dict[str, int]:
    """Resources of a job on a checkpoint of `params` parameters, e.g. with `device: cuda` OLMo-1B
    ~10 GB host memory and 1.5 h, the 7B models ~40 GB and 7-7.5 h. Runtime grows with the size:
    the stage's base minutes times one per 500M parameters (rounded up), at most 48x."""
    gpu = int(device != "cpu")
    per_param = HOST_BYTES_PER_PARAM["cpu" if device == "cpu" else "cuda"].get(stage, 20)
    mem_mb = 4000 + params * per_param // 1_000_000
    base = {"pretrain": 60, "perturb": 30, "finetune": 30}.get(stage, 30)
    runtime = base * min(48, max(1, -(-params // 500_000_000)))
    return {"mem_mb": int(mem_mb), "runtime": int(runtime), "gpu": gpu}
