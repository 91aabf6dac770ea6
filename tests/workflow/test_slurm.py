"""Cluster execution: the smoke study through profiles/slurm on a real one-node SLURM cluster.

The module starts munged (as the munge user), slurmctld and slurmd (as root) in a temporary
directory with their own config (SLURM_CONF), key, ports and state; it stops every daemon and
cancels every job it started in a finalizer, also when a test fails. Needs root and the Debian
packages of envs/apt-packages.txt (`make apt-packages`, run by `make test`); without them the
module is skipped - except in CI (CI=true), where that is an error.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from workflow_utils import (
    ROOT,
    SMOKE_STUDY,
    SNAKEMAKE,
    ctrl_c,
    kill_group,
    local_smoke_study,
    smoke_config,
    snakemake,
    start_in_terminal,
    workflow_env,
    write_config,
)

from pipeline import layout
from pipeline.tables import METRIC_COLUMNS

PROFILE = ROOT / "profiles" / "slurm"
BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol", "srun", "sinfo")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
MARKER = "OVERTRAIN_TEST_CLUSTER"  # in the environment of every process this module starts
STUDY = "ci-slurm"
# two of the smoke study's three budgets: every rule and group still runs (8 fewer sbatch jobs), and
# each checkpoint's rows are the local smoke study's (nothing a checkpoint computes reads the others)
CLUSTER_BUDGETS = [16384, 262144]


def _missing() -> list[str]:
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if os.geteuid() != 0:
        missing.append("root (slurmd runs jobs as their user and must be root)")
    try:
        pwd.getpwnam("munge")
    except KeyError:
        missing.append("the munge user (Debian package munge)")
    return missing


if _missing() and not IN_CI:
    pytest.skip(
        f"no local SLURM ({', '.join(_missing())}); `make apt-packages` as root installs it",
        allow_module_level=True,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A one-node SLURM cluster (slurmctld + slurmd + munged) living in one directory."""

    def __init__(self, root: Path):
        self.root = root
        self.conf = root / "slurm.conf"
        self.procs: list[subprocess.Popen] = []
        self.partition = "ci"

    @property
    def env(self) -> dict[str, str]:
        """Environment for client commands and for Snakemake: this cluster's config, and an
        `srun` wrapper first on PATH (the slurm-jobstep executor drops every SLURM_* variable,
        SLURM_CONF included, before its nested srun - see profiles/README.md)."""
        return workflow_env(
            SLURM_CONF=str(self.conf),
            PATH=f"{self.root / 'bin'}{os.pathsep}{os.environ['PATH']}",
            **{MARKER: str(self.root)},
        )

    def run(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=60, check=check)

    def start(self) -> None:
        missing = _missing()
        if missing:
            raise RuntimeError(
                f"CI=true but SLURM cannot run here, missing: {', '.join(missing)}; "
                "run `make apt-packages` as root"
            )
        self.root.chmod(0o755)
        (self.root / "owner.pid").write_text(str(os.getpid()))
        munge = self.root / "munge"
        munge.mkdir(mode=0o755)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        shutil.chown(munge, "munge", "munge")
        shutil.chown(key, "munge", "munge")
        key.chmod(0o400)
        for d in ("state", "spool", "bin"):
            (self.root / d).mkdir()
        srun = self.root / "bin" / "srun"
        srun.write_text(f'#!/bin/sh\nSLURM_CONF={self.conf} exec {shutil.which("srun")} "$@"\n')
        srun.chmod(0o755)
        # the node as slurmd sees this machine (CPUs, sockets, cores, threads), 90% of its memory
        probe = subprocess.run(
            ["slurmd", "-C"], capture_output=True, text=True, check=True
        ).stdout.splitlines()[0]
        keep = (
            "NodeName",
            "CPUs",
            "Boards",
            "SocketsPerBoard",
            "CoresPerSocket",
            "ThreadsPerCore",
            "RealMemory",
        )
        hw = {k: v for k, v in (kv.split("=", 1) for kv in probe.split() if "=" in kv) if k in keep}
        host = hw.pop("NodeName")
        hw["RealMemory"] = str(int(int(hw["RealMemory"]) * 0.9))
        node = " ".join(f"{k}={v}" for k, v in hw.items())
        self.conf.write_text(
            "\n".join(
                [
                    "ClusterName=overtrainci",
                    f"SlurmctldHost={host}(127.0.0.1)",  # no name resolution needed
                    f"SlurmctldPort={_free_port()}",
                    f"SlurmdPort={_free_port()}",
                    "AuthType=auth/munge",
                    "CredType=cred/munge",
                    f"AuthInfo=socket={munge / 'munge.sock'}",
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    f"StateSaveLocation={self.root / 'state'}",
                    f"SlurmdSpoolDir={self.root / 'spool'}",
                    f"SlurmctldPidFile={self.root / 'slurmctld.pid'}",
                    f"SlurmdPidFile={self.root / 'slurmd.pid'}",
                    f"SlurmctldLogFile={self.root / 'slurmctld.log'}",
                    f"SlurmdLogFile={self.root / 'slurmd.log'}",
                    "SelectType=select/cons_tres",
                    "SelectTypeParameters=CR_Core_Memory",
                    # by process group: a job's process whose parent (the batch shell) died first is
                    # still the job's (proctrack/linuxproc loses it; a cancelled job left one behind)
                    "ProctrackType=proctrack/pgid",
                    "KillWait=5",  # a cancelled job's processes get SIGKILL 5 s after SIGTERM (default 30)
                    "TaskPlugin=task/none",
                    "JobAcctGatherType=jobacct_gather/none",
                    "AccountingStorageType=accounting_storage/none",
                    "JobCompType=jobcomp/none",
                    "MpiDefault=none",
                    "ReturnToService=2",
                    "MinJobAge=600",  # squeue keeps finished jobs for the executor's status checks
                    "SchedulerParameters=sched_interval=2",
                    f"NodeName={host} NodeAddr=127.0.0.1 {node} State=UNKNOWN",
                    f"PartitionName={self.partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
                    "",
                ]
            )
        )
        env = {**self.env, "SLURM_CONF": str(self.conf)}
        logs = self.root / "daemons.out"
        with logs.open("ab") as out:
            self._spawn(
                [
                    "munged",
                    "--foreground",
                    f"--key-file={key}",
                    f"--socket={munge / 'munge.sock'}",
                    f"--pid-file={munge / 'munged.pid'}",
                    f"--log-file={munge / 'munged.log'}",
                    f"--seed-file={munge / 'munged.seed'}",
                ],
                env,
                out,
                user="munge",
            )
            self._wait(lambda: (munge / "munge.sock").exists(), "munged socket")
            self._spawn(["slurmctld", "-D", "-f", str(self.conf)], env, out)
            self._spawn(["slurmd", "-D", "-f", str(self.conf)], env, out)
        self._wait(
            lambda: self.run("sinfo", "-h", "-o", "%T", check=False).stdout.strip() == "idle",
            "node idle (sinfo)",
        )

    def _spawn(self, cmd: list[str], env: dict[str, str], out, user: str | None = None) -> None:
        kw = {"user": user, "group": user, "extra_groups": []} if user else {}
        self.procs.append(
            subprocess.Popen(
                cmd, env=env, stdout=out, stderr=out, stdin=subprocess.DEVNULL, cwd=self.root, **kw
            )
        )

    def _wait(self, ok, what: str, timeout: float = 30) -> None:
        t0 = time.monotonic()
        while not ok():
            dead = [p.args[0] for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() - t0 > timeout:
                log = "".join(f.read_text()[-1500:] for f in sorted(self.root.glob("*.log")) if f.is_file())
                raise RuntimeError(
                    f"test cluster: no {what} after {time.monotonic() - t0:.0f} s (exited: {dead})\n{log}"
                )
            time.sleep(0.2)

    def active_jobs(self, name: str | None = None) -> list[str]:
        args = ["squeue", "-h", "-o", "%i %T", "-t", "PENDING,RUNNING,COMPLETING,CONFIGURING,SUSPENDED"] + (
            ["--name", name] if name else []
        )
        res = self.run(*args, check=False)
        return res.stdout.splitlines() if res.returncode == 0 else []

    def jobs(self, name: str) -> list[dict[str, str]]:
        """Every job of one Snakemake run (its job name is the run id), finished ones included."""
        out = self.run("squeue", "-h", "--states=all", "--name", name, "-o", "%i|%T|%k|%C").stdout
        return [dict(zip(("id", "state", "comment", "cpus"), line.split("|"))) for line in out.splitlines()]

    def stop(self) -> list[str]:
        """Cancel every job, stop the daemons, then kill anything left that carries the marker.
        Returns what had to be killed in the last step (should be nothing)."""
        if any(p.poll() is None for p in self.procs[1:]):
            self.run("scancel", "--user", pwd.getpwuid(os.geteuid()).pw_name, check=False)
            t0 = time.monotonic()
            while self.active_jobs() and time.monotonic() - t0 < 30:
                time.sleep(0.5)
        for p in reversed(self.procs):  # slurmd, slurmctld, munged
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=5)
        leftovers = []
        for pid in _marked_pids(str(self.root)):
            try:
                leftovers.append(
                    Path(f"/proc/{pid}/cmdline")
                    .read_bytes()
                    .replace(b"\0", b" ")
                    .decode(errors="replace")
                    .strip()
                )
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, FileNotFoundError):
                pass
        return leftovers


def _marked() -> dict[int, str]:
    """pid -> cluster directory of every process (other than this one) whose environment has
    MARKER: started by this module, in this session or an earlier one."""
    prefix = f"{MARKER}=".encode()
    found = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                env = (proc / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            for var in env:
                if var.startswith(prefix):
                    found[int(proc.name)] = var[len(prefix) :].decode(errors="replace")
    return found


def _marked_pids(value: str) -> list[int]:
    return [pid for pid, root in _marked().items() if root == value]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _reap_stale_clusters() -> None:
    """Kill what an earlier test session left running (killed before its finalizer ran): test
    cluster processes whose owning pytest process (owner.pid in their directory) is gone."""
    for pid, root in _marked().items():
        owner = Path(root, "owner.pid")
        if not (owner.is_file() and _alive(int(owner.read_text()))):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(request):
    # not under pytest's 0700 tmp dir: munged runs as the munge user and must reach its socket
    _reap_stale_clusters()
    c = Cluster(Path(tempfile.mkdtemp(prefix="overtrain-slurm-")))
    request.addfinalizer(lambda: _stop_and_check(c))
    c.start()
    return c


def _stop_and_check(c: Cluster) -> None:
    leftovers = c.stop()
    running = [p.args[0] for p in c.procs if p.poll() is None]
    if not running:
        shutil.rmtree(c.root, ignore_errors=True)
    assert not running and not leftovers, (
        f"test cluster processes survived the shutdown: {running + leftovers}"
    )


def run_id(output: str) -> str:
    m = re.search(r"SLURM run ID: (\S+)", output)
    assert m, output[-3000:]
    return m.group(1)


def cluster_args(c: Cluster, tmp: Path) -> list[str]:
    """The profile as a user runs it, with this cluster's partition in place of the placeholders
    (a command-line --default-resources replaces the profile's list, dropping slurm_account:
    this cluster has no accounting), a 1 s first status check and 1 s between checks (the
    default 10 s delays every dependency level of the DAG by up to 10 s)."""
    return [
        "--workflow-profile", str(PROFILE),
        "--default-resources", f"slurm_partition={c.partition}",
        "--slurm-init-seconds-before-status-checks", "1",
        "--seconds-between-status-checks", "1",
        "--slurm-logdir", str(tmp / "slurm_logs"),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def cluster_run(cluster, tmp_path_factory):
    """The smoke study through the profile. pretrain/evaluate ask for 2 threads but get 1 CPU
    (cpus_per_task), so torch must follow SLURM_CPUS_PER_TASK, not the rule's threads."""
    tmp = tmp_path_factory.mktemp("cluster-run")
    shutil.rmtree(ROOT / "results" / STUDY, ignore_errors=True)
    cfg = write_config(tmp, smoke_config(study=STUDY, **{"pretrain.budgets": CLUSTER_BUDGETS}))
    threads = [
        "--set-threads",
        "pretrain=2",
        "evaluate=2",
        "--set-resources",
        "pretrain:cpus_per_task=1",
        "evaluate:cpus_per_task=1",
    ]
    args = cluster_args(cluster, tmp) + threads
    t0 = time.monotonic()
    res = snakemake(cfg, *args, env=cluster.env, timeout=900)  # 400-550 s on 2 busy cores
    seconds = time.monotonic() - t0
    print(f"smoke study on the test cluster: {seconds:.0f} s")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-6000:]
    yield ROOT / "results" / STUDY, run_id(res.stdout + res.stderr), res.stdout + res.stderr
    shutil.rmtree(ROOT / "results" / STUDY, ignore_errors=True)


def test_cluster_results_equal_a_local_run(cluster_run, tmp_path_factory):
    out, _, _ = cluster_run
    _, _, local_metrics = local_smoke_study(tmp_path_factory.mktemp("local"), SMOKE_STUDY)
    cols = [c for c in METRIC_COLUMNS if c not in ("study", "config_hash")]  # the budgets differ
    keys = [c for c in cols if c not in ("value", "diverged")]
    a = (
        pd.read_parquet(out / "metrics.parquet")[cols]
        .sort_values(keys, na_position="first")
        .reset_index(drop=True)
    )
    b = pd.read_parquet(local_metrics)
    b = (
        b[b["budget"].isin(CLUSTER_BUDGETS)][cols]
        .sort_values(keys, na_position="first")
        .reset_index(drop=True)
    )
    assert set(a["budget"]) == set(CLUSTER_BUDGETS) and len(a) == len(b) > 0
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    for name in ("progressive_sensitivity.png", "inflection_point.png", "pretrain_loss.png"):
        assert (out / "figures" / name).stat().st_size > 10_000


def test_torch_threads_follow_the_allocation(cluster_run):
    out, _, _ = cluster_run
    logs = sorted((out / "logs").glob("[pe]*/*.log"))
    assert len(logs) == 2 * len(CLUSTER_BUDGETS)  # pretrain + evaluate per budget
    for log in logs:
        assert "torch threads: 1 (rule threads 2, SLURM_CPUS_PER_TASK 1)" in log.read_text(), log


def test_groups_and_no_orphaned_jobs(cluster, cluster_run):
    _, rid, _ = cluster_run
    jobs = cluster.jobs(rid)
    assert jobs and all(j["state"] == "COMPLETED" for j in jobs), jobs
    comments = sorted(j["comment"] for j in jobs)
    # corpus, tokenizer, tokenize_train in one sbatch job; analyses and figures in another (metrics,
    # which depends on every other job, is not grouped: see profiles/slurm/config.yaml; nor is
    # findings, which reads the theory stage's tables too: grouped, it would tie theory to metrics)
    assert comments.count("rule_data_corpus_tokenize_train_tokenizer") == 1, comments
    assert "rule_aggregate_analysis_figures_finetune_analysis_finetune_figures" in comments, comments
    ungrouped = [c for c in comments if not c.startswith(("rule_data_", "rule_aggregate_"))]
    ungrouped_rules = (
        "rule_pretrain_",
        "rule_evaluate_",
        "rule_finetune_",
        "rule_curvature",
        "rule_ntk_",
        "rule_linearization_figures",
        "rule_metrics",
        "rule_findings",
        "rule_token_coverage",  # seconds; grouped, it would tie the data group to the task tables
        "rule_reference_ppl",  # seconds, after the training tokens (as token_coverage)
    )
    assert not [c for c in ungrouped if not c.startswith(ungrouped_rules)]
    assert not cluster.active_jobs(rid)


def test_a_two_rank_finetuning_job_equals_the_one_rank_job(cluster, cluster_run, tmp_path):
    """finetune.ranks 2: one sbatch job with 2 CPUs in which torchrun starts 2 gloo ranks (FSDP2);
    its metrics equal the 1-process job's of the smoke study within 1e-4 relative."""
    out, _, _ = cluster_run
    study = ROOT / "results" / f"{STUDY}-ranks"
    shutil.rmtree(study, ignore_errors=True)
    shutil.copytree(out, study)  # its checkpoints and task tables; mtimes kept, so nothing else reruns
    run = dict(checkpoint="tiny-262144-s0", task="mr", method="sft", lr="0.003", lam="0", seed=0)
    part = Path(layout.FINETUNE_PART.format(**run))
    # a sharded job holds no whole model for the curvature line: refused with ranks > 1 (the
    # linearization gap gathers θ_ft and θ_pre whole and is compared like every other row)
    overrides = {
        "finetune.ranks": 2,
        "finetune.threads": 2,
        "curvature.enabled": False,
    }
    cfg = write_config(tmp_path, smoke_config(study=f"{STUDY}-ranks", **overrides))
    target = str(study.relative_to(ROOT) / part)
    try:
        # `--`: --forcerun (and --configfile) take any number of values
        res = snakemake(
            cfg,
            *cluster_args(cluster, tmp_path),
            "--forcerun",
            target,
            "--",
            target,
            env=cluster.env,
            timeout=300,
        )
        text = res.stdout + res.stderr
        assert res.returncode == 0, text[-6000:]
        jobs = cluster.jobs(run_id(text))
        assert [(j["comment"][:13], j["cpus"]) for j in jobs] == [("rule_finetune", "2")], jobs
        log = (study / "logs" / part.with_suffix(".log")).read_text()
        assert "starting 2 ranks" in log and "torch.distributed.run" in log, log[-3000:]
        one, two = (pd.read_parquet(d / part) for d in (out, study))
        keys = ["eval_data", "split", "metric"]
        merged = one.merge(two, on=keys, suffixes=("_1", "_2"))
        assert len(merged) == len(one) == len(two) > 0
        np.testing.assert_allclose(merged["value_2"], merged["value_1"], rtol=1e-4)
    finally:
        shutil.rmtree(study, ignore_errors=True)


def test_placeholders_stop_the_run_before_any_submission(cluster, tmp_path):
    cfg = write_config(tmp_path, smoke_config(study="ci-slurm-placeholder"))
    res = snakemake(cfg, "--workflow-profile", str(PROFILE), env=cluster.env, timeout=120)
    text = res.stdout + res.stderr
    assert res.returncode != 0
    assert "slurm_account='<ACCOUNT>'" in text and "profiles/slurm/config.yaml" in text, text[-3000:]
    assert not cluster.jobs(run_id(text))
    # a cluster without accounts: the account line deleted, the partition still a placeholder
    profile = yaml.safe_load((PROFILE / "config.yaml").read_text())
    del profile["default-resources"]["slurm_account"]
    (tmp_path / "profile").mkdir()
    (tmp_path / "profile" / "config.yaml").write_text(yaml.safe_dump(profile))
    res = snakemake(cfg, "--workflow-profile", str(tmp_path / "profile"), env=cluster.env, timeout=120)
    text = res.stdout + res.stderr
    assert res.returncode != 0 and "slurm_partition='<PARTITION>'" in text, text[-3000:]
    assert not cluster.jobs(run_id(text))


def test_too_many_gpus_is_an_error(cluster, tmp_path):
    cfg = write_config(tmp_path, smoke_config(study="ci-slurm-gpus"))
    res = snakemake(
        cfg,
        *cluster_args(cluster, tmp_path),
        "--set-resources",
        "pretrain:gpu=2",
        env=cluster.env,
        timeout=120,
    )
    text = res.stdout + res.stderr
    assert res.returncode != 0 and "pretrain asks for 2 GPUs" in text and "model preset 'tiny'" in text, text[
        -3000:
    ]
    assert not cluster.jobs(run_id(text))


def _cmdline(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().split()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        return f"ppid {stat[3]} pgid {stat[4]} state {stat[2]}: {cmd.strip()}"
    except OSError:
        return "(gone)"


def _job_processes(c: Cluster) -> list[int]:
    """Processes of the cluster's jobs (they carry MARKER): neither a daemon nor slurmctld's helper."""
    daemons = {p.pid for p in c.procs}
    found = []
    for pid in _marked_pids(str(c.root)):
        try:
            helper = b"slurmscriptd" in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if pid not in daemons and not helper:
            found.append(pid)
    return found


def test_interrupted_run_exits_promptly_and_leaves_no_jobs(cluster, tmp_path):
    """Ctrl-C on a cluster run: Snakemake cancels its jobs (the plugin scancels them) and exits
    within seconds. The first status check comes 120 s after the submissions: without
    pipeline.workflow.cluster.stop_status_checks_promptly Snakemake would exit only when that
    sleep ends (~2 minutes; in a long run the plugin's sleep grows to 180 s)."""
    study = "ci-slurm-interrupt"
    shutil.rmtree(ROOT / "results" / study, ignore_errors=True)  # from scratch: the data jobs run first
    cfg = write_config(tmp_path, smoke_config(study=study))
    args = [*cluster_args(cluster, tmp_path), "--slurm-init-seconds-before-status-checks", "120"]
    cmd = [*SNAKEMAKE, "--configfile", str(cfg), *args]
    log = tmp_path / "snakemake.log"
    with log.open("w") as out:
        proc = start_in_terminal(cmd, cluster.env, out)  # Ctrl-C reaches Snakemake's process group
        try:
            t0 = time.monotonic()
            while "has been submitted with SLURM jobid" not in log.read_text():
                assert proc.poll() is None and time.monotonic() - t0 < 90, log.read_text()[-3000:]
                time.sleep(0.5)
            rid = run_id(log.read_text())
            # Ctrl-C while a job runs (what a user does), not in the instant of its submission
            while not any(j["state"] == "RUNNING" for j in cluster.jobs(rid)):
                assert proc.poll() is None and time.monotonic() - t0 < 90, log.read_text()[-3000:]
                time.sleep(0.5)
            time.sleep(2)
            assert cluster.active_jobs(rid)
            try:
                seconds = ctrl_c(proc, within=90)
            except subprocess.TimeoutExpired:
                pytest.fail("Snakemake did not exit within 90 s of Ctrl-C:\n" + log.read_text()[-3000:])
        finally:
            kill_group(proc)
    text = log.read_text()
    print(f"Snakemake exited {seconds:.1f} s after Ctrl-C")
    assert seconds < 15, f"Snakemake took {seconds:.0f} s to exit after Ctrl-C:\n{text[-3000:]}"
    assert "Terminating processes on user request" in text and "Traceback" not in text, text[-3000:]
    t0 = time.monotonic()  # cancelled jobs end in a second or two (SIGTERM, then slurmd's SIGKILL)
    while (cluster.active_jobs(rid) or _job_processes(cluster)) and time.monotonic() - t0 < 30:
        time.sleep(0.5)
    left = {pid: _cmdline(pid) for pid in _job_processes(cluster)}
    assert not cluster.active_jobs(rid) and not left, (left, text[-3000:])
    assert {j["state"] for j in cluster.jobs(rid)} <= {"CANCELLED", "COMPLETED"}
    shutil.rmtree(ROOT / "results" / study, ignore_errors=True)
