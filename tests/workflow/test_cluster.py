"""Job resources and the start-up checks of a cluster run, without a cluster: plain stand-ins
for Snakemake's jobs (rule name, wildcards, resources)."""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace

import pytest
from snakemake.exceptions import WorkflowError

from pipeline.models.checkpoints import CheckpointSpec, hub_checkpoints
from pipeline.workflow.cluster import (
    check_cluster_jobs,
    check_hub_jobs,
    fixed_resources,
    gpu_count,
    max_gpus,
    preset_resources,
    requested_gpus,
    stop_status_checks_promptly,
)

SWEEP = CheckpointSpec("tiny-1000", "sweep", "tiny", 1000, path="results/s/pretrain/tiny/1000")
HUB = hub_checkpoints(None, ["step1000-tokens4B"], preset="olmo-1b")[0]
CHECKPOINTS = {SWEEP.name: SWEEP, HUB.name: HUB}


class Wildcards(dict):
    """Snakemake's wildcards: attributes and keys()."""

    def __getattr__(self, name: str) -> str:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def job(rule: str, resources: dict | None = None, **wildcards: str) -> SimpleNamespace:
    return SimpleNamespace(
        rule=SimpleNamespace(name=rule), wildcards=Wildcards(wildcards), resources=resources or {}
    )


@pytest.mark.parametrize(
    "resources, gpus",
    [
        ({}, 0),
        ({"gpu": 0}, 0),
        ({"gpu": 2}, 2),
        ({"gpu": "a100:2"}, 2),
        ({"gpu": "a100"}, 1),
        ({"gres": "gpu:3"}, 3),
        ({"gres": "gpu:a100:2"}, 2),
        ({"gres": "gpu"}, 1),
        ({"gres": "tmpfs:10G"}, 0),
        ({"gpu": 1, "gres": "gpu:2"}, 2),
    ],
)
def test_requested_gpus(resources, gpus):
    assert requested_gpus(resources) == gpus


def test_max_gpus_follows_the_preset_and_the_device():
    """One device per job on any model (presets.job_resources), none with device cpu."""
    for preset, params in (("tiny", None), ("olmo-90m", None), (HUB.model, HUB.params)):
        assert max_gpus(preset, "cpu", params) == 0
        assert max_gpus(preset, "cuda", params) == max_gpus(preset, "auto", params) == 1


def test_gpu_request_of_a_model_job():
    assert [gpu_count(d) for d in ("cpu", "auto", "cuda")] == [0, 0, 1]
    assert preset_resources("pretrain", "cuda", CHECKPOINTS)["gpu"] == 1


def test_a_sharded_job_asks_for_one_gpu_per_rank_and_host_memory_for_each():
    one, two = (preset_resources("finetune", "cuda", CHECKPOINTS, ranks=n) for n in (1, 2))
    assert (one["gpu"], one["ranks"], two["gpu"], two["ranks"]) == (1, 1, 2, 2)
    wc = Wildcards(checkpoint=HUB.name)
    assert two["mem_mb"](wc, 1) == 2 * one["mem_mb"](wc, 1)
    cpu = preset_resources("finetune", "cpu", CHECKPOINTS, ranks=2)
    assert (cpu["gpu"], cpu["ranks"]) == (0, 2)  # gloo processes
    two_ranks = job("finetune", {"gpu": 2, "ranks": 2}, checkpoint=HUB.name)
    check_cluster_jobs([two_ranks], "slurm", "cuda", CHECKPOINTS)
    # the executor plugin maps `tasks` of a GPU job to --ntasks-per-gpu: 2 one-GPU tasks
    # (snakemake-executor-plugin-slurm issues #316, #459)
    as_tasks = job("finetune", {"gpu": 2, "ranks": 2, "tasks": 1}, checkpoint=HUB.name)
    with pytest.raises(WorkflowError, match="--ntasks-per-gpu .* remove tasks for finetune"):
        check_cluster_jobs([as_tasks], "slurm", "cuda", CHECKPOINTS)
    with pytest.raises(WorkflowError, match="asks for 4 GPUs .* 2 rank"):
        check_cluster_jobs(
            [job("finetune", {"gpu": 4, "ranks": 2}, checkpoint=HUB.name)], "slurm", "cuda", CHECKPOINTS
        )


def test_resources_grow_with_the_attempt():
    res = preset_resources("finetune", "cpu", CHECKPOINTS)
    for wc in (Wildcards(model="tiny", budget="1000"), Wildcards(checkpoint=SWEEP.name)):
        assert res["mem_mb"](wc, 3) == 3 * res["mem_mb"](wc, 1) > 0
        assert res["runtime"](wc, 2) == 2 * res["runtime"](wc, 1) > 0
    # a hub checkpoint is sized from its parameter count: more memory than the tiny preset
    assert res["mem_mb"](Wildcards(checkpoint=HUB.name), 1) > res["mem_mb"](
        Wildcards(checkpoint=SWEEP.name), 1
    )
    fixed = fixed_resources(2000, 10)
    assert (fixed["mem_mb"](None, 2), fixed["runtime"](None, 3)) == (4000, 30)


def test_cluster_checks_run_only_under_slurm():
    jobs = [job("pretrain", {"gpu": 8, "slurm_account": "<ACCOUNT>"}, model="tiny", budget="1000")]
    check_cluster_jobs(jobs, None, "cuda", CHECKPOINTS)
    check_cluster_jobs(jobs, "local", "cuda", CHECKPOINTS)


@pytest.mark.parametrize(
    "bad, needle",
    [
        (job("corpus", {"slurm_account": "<ACCOUNT>"}), "slurm_account='<ACCOUNT>' (job corpus)"),
        (job("corpus", {"slurm_partition": "<PARTITION>"}), "set slurm_partition under default-resources"),
        (job("pretrain", {"gpu": 2}, model="tiny", budget="1000"), "pretrain asks for 2 GPUs"),
        (job("perturb", {"gres": "gpu:2"}, checkpoint=HUB.name), f"model preset {HUB.model!r}"),
        (job("metrics", {"gpu": 1}), "this step (it runs no model) can use at most 0"),
    ],
)
def test_cluster_check_errors_name_the_job_and_key(bad, needle):
    with pytest.raises(WorkflowError, match="cluster profile") as err:
        check_cluster_jobs([bad], "slurm", "cuda", CHECKPOINTS)
    assert needle in str(err.value)


def test_cluster_check_passes_a_valid_run():
    jobs = [
        job("pretrain", {"gpu": 1, "slurm_partition": "gpu"}, model="olmo-30m", budget="1000"),
        job("finetune", {"gres": "gpu:a100:1"}, checkpoint=HUB.name),
        job("metrics", {}),
    ]
    check_cluster_jobs(jobs, "slurm", "cuda", CHECKPOINTS)
    with pytest.raises(WorkflowError, match="can use at most 0"):  # device cpu: no GPU for any job
        check_cluster_jobs(jobs[:1], "slurm", "cpu", CHECKPOINTS)


def test_hub_check_covers_only_hub_checkpoints_of_jobs_to_run(monkeypatch):
    seen = []
    monkeypatch.setattr("pipeline.workflow.cluster.check_hub_checkpoints", lambda specs: seen.append(specs))
    check_hub_jobs([job("perturb", checkpoint=SWEEP.name), job("metrics")], CHECKPOINTS)
    check_hub_jobs([job("perturb", checkpoint=HUB.name), job("lm_eval", checkpoint=HUB.name)], CHECKPOINTS)
    assert seen == [[], [HUB]]


def test_a_status_check_sleep_ends_when_snakemake_stops():
    """Under a cluster executor Snakemake's exit (Ctrl-C, or the end of the run) waits for its
    status-check thread; its sleep between checks now ends within STATUS_SLEEP_TICK of shutdown
    (tests/workflow/test_slurm.py checks the whole Ctrl-C on a real cluster)."""
    from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor

    assert stop_status_checks_promptly() and stop_status_checks_promptly()  # applied once
    executor = SimpleNamespace(wait=True, next_seconds_between_status_checks=0.3)
    t0 = time.monotonic()
    asyncio.run(RemoteExecutor.sleep(executor))  # the full interval while Snakemake runs
    assert 0.3 <= time.monotonic() - t0 < 2
    executor.next_seconds_between_status_checks = 180  # the slurm plugin's longest
    threading.Timer(0.2, lambda: setattr(executor, "wait", False)).start()  # what shutdown() sets
    t0 = time.monotonic()
    asyncio.run(RemoteExecutor.sleep(executor))
    assert time.monotonic() - t0 < 2
