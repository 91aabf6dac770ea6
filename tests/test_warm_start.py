"""Warm start (pipeline/warm_start.py): a rule script's process hands its job to a fork of a
server that has imported the libraries; the job sees its own descriptors, folder, environment and
signals, and its process exits with the job's status. Without a server the job runs in its own
process. (The studies of the other workflow tests run warm; a rerun with warm_start false gives the
same numbers: test_workflow.py.)"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pipeline import warm_start

PRELOAD = ("fractions",)  # a module no job imports here: its presence shows the job ran in a fork

# a rule script as Snakemake's `script:` directive writes it: the preamble (the `snakemake` object,
# `__real_file__`), then the script, which imports `pipeline` first
JOB = textwrap.dedent(
    """
    import sys
    from snakemake.iocontainers import (
        InputFiles, Log, OutputFiles, Params, ResourceList, Snakemake, Wildcards
    )
    snakemake = Snakemake(InputFiles([]), OutputFiles([]), Params(), Wildcards(), 1, ResourceList(),
                          Log(fromdict={{"log": {log!r}}}), {{}}, "job", None, "/")
    __real_file__ = __file__; __file__ = "rules/scripts/job.py"
    warm = "fractions" in sys.modules
    import os, tempfile, time
    import pipeline
    print("job", os.getpid(), warm, os.getcwd(), tempfile.gettempdir(), flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    {body}
    """
)


def job_script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "job.py"
    path.write_text(JOB.format(log=str(tmp_path / "job.log"), body=body))
    return path


@pytest.fixture
def server(tmp_path):
    started = warm_start.start(tmp_path / "logs", PRELOAD)
    assert started is not None, warm_start.available()
    deadline = time.time() + 60
    while not started.socket.exists():  # ready once its imports are done
        assert time.time() < deadline, (started.log.read_text(), "no socket")
        time.sleep(0.05)
    yield started
    warm_start.stop(started)


def server_env(server: warm_start.Server) -> dict[str, str]:
    """The environment the server started with: a job's must be the same but for what Snakemake
    sets per job (warm_start.PER_JOB_ENV)."""
    text = Path(f"/proc/{server.process.pid}/environ").read_bytes().decode()
    return dict(item.split("=", 1) for item in text.split("\0") if "=" in item)


def run_job(script: Path, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script)], cwd=cwd, env=env, capture_output=True, text=True)


def fields(done: subprocess.CompletedProcess) -> list[str]:
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("job ")]
    return line.split(" ", 4)


@pytest.mark.parametrize(
    "body, status",
    [("", 0), ("sys.exit(3)", 3), ("raise ValueError('the job failed')", 1)],
)
def test_the_job_runs_in_a_fork_with_its_own_descriptors_folder_environment_and_status(
    server, tmp_path, body, status
):
    job_tmp = tmp_path / "job-tmp"  # Snakemake's per-job TMPDIR (`resources: tmpdir`)
    job_tmp.mkdir()
    env = server_env(server) | {warm_start.WARM_ENV: str(server.socket), "TMPDIR": str(job_tmp)}
    done = run_job(job_script(tmp_path, body), env, cwd=tmp_path)
    _, _pid, warm, cwd, tmp = fields(done)
    assert done.returncode == status, done.stderr
    assert warm == "True"  # the server's import was there before the job's
    assert cwd == str(tmp_path) and tmp == str(job_tmp)
    assert "to stderr" in done.stderr
    if status == 1:
        assert "ValueError: the job failed" in done.stderr
    assert warm_start.WARM_ENV in os.environ  # announced to the jobs of this process


def test_without_a_server_the_job_runs_in_its_own_process(tmp_path):
    script = job_script(tmp_path, "sys.exit(3)")
    for announced in ({}, {warm_start.WARM_ENV: str(tmp_path / "gone.sock")}):  # none, or stopped
        env = {k: v for k, v in os.environ.items() if k != warm_start.WARM_ENV} | announced
        done = run_job(script, env, cwd=tmp_path)
        assert done.returncode == 3, done.stderr
        assert fields(done)[2] == "False"


def test_a_job_whose_environment_differs_from_the_servers_runs_in_its_own_process(server, tmp_path):
    env = server_env(server) | {warm_start.WARM_ENV: str(server.socket), "HF_HOME": str(tmp_path)}
    done = run_job(job_script(tmp_path, "sys.exit(3)"), env, cwd=tmp_path)
    assert done.returncode == 3 and fields(done)[2] == "False", done.stderr  # read at import: not warm
    assert "environment differs from the server's in HF_HOME" in server.log.read_text()


def test_a_server_of_another_interpreter_leaves_the_job_to_its_own_process(server):
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(str(server.socket))
    socket.send_fds(conn, [b"j"], [0, 1, 2])
    warm_start._send(conn, {"interpreter": ("/other/python", "/other"), "script": "x.py"})
    reply = warm_start._recv(conn)
    assert "pid" not in reply and "another interpreter" in reply["refused"]


def test_ctrl_c_reaches_the_job_and_a_killed_job_process_takes_the_job_with_it(server, tmp_path):
    script = job_script(tmp_path, "time.sleep(60)")
    env = server_env(server) | {warm_start.WARM_ENV: str(server.socket)}
    for signum, status in ((signal.SIGINT, 130), (signal.SIGKILL, -signal.SIGKILL)):
        pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=env, **pipes)
        line = proc.stdout.readline()  # the job has started
        child = int(line.split()[1])
        assert child != proc.pid
        proc.send_signal(signum)
        assert proc.wait(timeout=30) == status
        deadline = time.time() + 10
        while Path(f"/proc/{child}").exists() and not _zombie(child):
            assert time.time() < deadline, f"job {child} still runs after its process got {signum}"
            time.sleep(0.05)
        if signum == signal.SIGINT:  # the job's own one line (pipeline/runtime.py), in its log too
            assert "interrupted (Ctrl-C)" in proc.stderr.read()
            assert "interrupted (Ctrl-C)" in (tmp_path / "job.log").read_text()


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_the_server_ends_with_its_snakemake_process_and_stop_leaves_nothing(tmp_path):
    driver = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from pipeline import warm_start
        server = warm_start.start(Path({str(tmp_path / "logs")!r}), ())
        while not server.socket.exists():
            time.sleep(0.05)
        print(server.process.pid, server.socket, flush=True)
        """
    )
    done = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True, timeout=60)
    pid, path = done.stdout.split()
    deadline = time.time() + 10
    while Path(f"/proc/{pid}").exists() and not _zombie(int(pid)):  # its parent has exited
        assert time.time() < deadline, "the server outlived its Snakemake process"
        time.sleep(0.1)
    assert not Path(path).exists()

    server = warm_start.start(tmp_path / "logs", ())
    warm_start.stop(server)
    assert not server.socket.parent.exists() and not server.log.exists()
    assert warm_start.WARM_ENV not in os.environ


def test_the_job_ends_as_an_interpreter_does_threads_joined_and_files_closed(server, tmp_path):
    body = textwrap.dedent(
        """
        import threading
        def late():
            time.sleep(0.3)
            open("thread.txt", "w").write("written")
        threading.Thread(target=late).start()
        unclosed = open("unclosed.txt", "w")
        unclosed.write("flushed")
        """
    )
    env = server_env(server) | {warm_start.WARM_ENV: str(server.socket)}
    done = run_job(job_script(tmp_path, body), env, cwd=tmp_path)
    assert done.returncode == 0 and fields(done)[2] == "True", done.stderr
    assert (tmp_path / "thread.txt").read_text() == "written"
    assert (tmp_path / "unclosed.txt").read_text() == "flushed"


def test_the_fork_runs_at_the_jobs_thread_count_not_the_servers(tmp_path):
    """Snakemake sets OMP_NUM_THREADS (and the BLAS counts) to the rule's threads in each job's
    environment; the server read its own when it loaded numpy's BLAS: the fork applies the job's."""
    server = warm_start.start(tmp_path / "logs", ("fractions", "numpy", "threadpoolctl"))
    try:
        while not server.socket.exists():
            time.sleep(0.05)
        body = textwrap.dedent(
            """
            from threadpoolctl import threadpool_info
            print("blas", sorted({pool["num_threads"] for pool in threadpool_info()}), flush=True)
            """
        )
        env = server_env(server) | {warm_start.WARM_ENV: str(server.socket), "OMP_NUM_THREADS": "1"}
        env |= {"OPENBLAS_NUM_THREADS": "1"}
        done = run_job(job_script(tmp_path, body), env, cwd=tmp_path)
        assert done.returncode == 0 and fields(done)[2] == "True", done.stderr
        assert "blas [1]" in done.stdout, done.stdout
    finally:
        warm_start.stop(server)
