"""pipeline.runtime.setup_logging: library output goes to the job's log file, ours also to the terminal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pipeline.runtime import INTERRUPTED, INTERRUPTED_EXIT, LABEL_ENV, TERMINAL_ENV

ROOT = Path(__file__).resolve().parents[1]

JOB = textwrap.dedent(
    """
    import logging, os, sys
    from tqdm import tqdm
    from pipeline.runtime import setup_logging

    setup_logging(sys.argv[1])
    for _ in tqdm(range(3), desc="Loading weights"):
        pass
    print("a library print")
    sys.stderr.write("a library warning on stderr\\n")
    os.write(2, b"C-level write to fd 2\\n")
    logging.getLogger("transformers").warning("a library log record")
    logging.getLogger("pipeline.x").debug("a debug record")
    logging.getLogger("pipeline.x").info("step 1/2 | 10 tok/s, ETA 3s")
    if len(sys.argv) > 2:
        raise RuntimeError("the job failed")
    """
)


def _run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, Path]:
    log = tmp_path / "results" / "logs" / "stage" / "job.log"
    proc = subprocess.run(
        [sys.executable, "-c", JOB, str(log), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    return proc, log


def test_terminal_gets_only_own_records_and_the_file_everything(tmp_path):
    proc, log = _run(tmp_path)
    assert proc.returncode == 0, proc.stderr
    terminal = proc.stdout + proc.stderr
    lines = terminal.splitlines()
    assert len(lines) == 1 and lines[0].endswith("[stage/job] step 1/2 | 10 tok/s, ETA 3s"), terminal
    text = log.read_text()
    for expected in (
        "Loading weights: 100%",
        "a library print",
        "a library warning on stderr",
        "C-level write to fd 2",
        "WARNING transformers: a library log record",
        "INFO pipeline.x: step 1/2 | 10 tok/s, ETA 3s",
    ):
        assert expected in text, (expected, text)
    assert "a debug record" not in text


def test_uncaught_exception_in_both(tmp_path):
    proc, log = _run(tmp_path, "fail")
    assert proc.returncode != 0
    terminal = proc.stdout + proc.stderr
    assert "uncaught exception" in terminal and "RuntimeError: the job failed" in terminal
    assert "Loading weights" not in terminal
    text = log.read_text()
    assert text.count("RuntimeError: the job failed") == 1, text


# A job at work when Ctrl-C comes: a terminal sends SIGINT to Snakemake's process group, jobs
# included. It is writing an output atomically (the temporary name must not survive). Modes: "job";
# "wrapped": a library turns the KeyboardInterrupt into its own error; "rank": a rank of a sharded
# job; "importing": a rule script before its setup_logging (still importing torch and the like).
WORKING = textwrap.dedent(
    """
    import sys
    if sys.argv[2] == "importing":  # what Snakemake's script preamble defines
        class Snakemake:
            log = [sys.argv[1]]
        snakemake, __real_file__ = Snakemake(), __file__
    import logging, os
    from pipeline.io import atomic_path
    from pipeline.runtime import setup_logging, setup_rank_logging

    if sys.argv[2] == "rank":
        setup_rank_logging(1)
    elif sys.argv[2] != "importing":
        setup_logging(sys.argv[1])
    if sys.argv[2] == "importing":
        open(sys.argv[1], "w").write("working\\n")
    else:
        logging.getLogger("pipeline.x").warning("working")
    with atomic_path(os.path.join(os.path.dirname(sys.argv[1]), "out.txt")) as tmp:
        tmp.write_text("partial")
        try:
            while True:
                sum(range(10_000))
        except KeyboardInterrupt as e:
            if sys.argv[2] == "wrapped":
                raise RuntimeError("a library's error") from e
            raise
    """
)


def _interrupt(tmp_path: Path, mode: str, **env: str) -> tuple[int, float, str, Path]:
    """Start the job, SIGINT its process group once it works: (exit status, seconds from the
    signal to the exit, what it wrote to stdout/stderr, its log file)."""
    log = tmp_path / "results" / "logs" / "stage" / "job.log"
    log.parent.mkdir(parents=True)
    script = tmp_path / "job.py"
    script.write_text(WORKING)
    with log.open("w") as rank_stderr:  # a rank's stderr is its job's log file
        proc = subprocess.Popen(
            [sys.executable, str(script), str(log), mode],
            stdout=subprocess.PIPE,
            stderr=rank_stderr if mode == "rank" else subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            env=os.environ | {"PYTHONPATH": str(ROOT)} | env,
            start_new_session=True,  # its own process group, like Snakemake's under a terminal
            # SIGINT at its default even when the tests run in the background (`pytest &` ignores it)
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        try:
            t0 = time.monotonic()
            while "working" not in log.read_text():
                assert proc.poll() is None and time.monotonic() - t0 < 60, proc.communicate()
                time.sleep(0.05)
            time.sleep(0.2)
            t0 = time.monotonic()
            os.killpg(proc.pid, signal.SIGINT)
            out, err = proc.communicate(timeout=30)
            seconds = time.monotonic() - t0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return proc.returncode, seconds, out + (err or ""), log


@pytest.mark.parametrize("mode", ["job", "wrapped", "importing"])
def test_an_interrupted_job_says_so_in_one_line(tmp_path, mode):
    """No traceback: one line in the main log and in the job's, exit status 130 within a second or
    two, no output and no temporary file left."""
    status, seconds, terminal, log = _interrupt(tmp_path, mode)
    assert status == INTERRUPTED_EXIT and seconds < 5, (status, seconds, terminal)
    lines = [line for line in terminal.splitlines() if not line.endswith("[stage/job] working")]
    assert len(lines) == 1 and lines[0].endswith(f"[stage/job] {INTERRUPTED}"), terminal
    text = log.read_text()
    assert text.count(INTERRUPTED) == 1 and f"WARNING pipeline: {INTERRUPTED}" in text, text
    assert "Traceback" not in terminal + text and "KeyboardInterrupt" not in terminal + text, text
    assert [p.name for p in log.parent.iterdir()] == ["job.log"]


def test_an_interrupted_rank_says_so_in_the_job_log_only(tmp_path):
    """A rank (torchrun's, pipeline/train/launch.py) logs its interruption to the job's log file
    only: the job itself, torchrun's parent, says it in the main log."""
    main_log = tmp_path / "main.log"
    main_log.touch()
    status, seconds, out, log = _interrupt(
        tmp_path, "rank", **{TERMINAL_ENV: str(main_log), LABEL_ENV: "stage/job"}
    )
    assert status == INTERRUPTED_EXIT and seconds < 5, (status, seconds, out)
    lines = main_log.read_text().splitlines()
    assert len(lines) == 1 and lines[0].endswith("[stage/job] [rank 1] working"), lines
    text = log.read_text()
    assert text.rstrip().endswith(f"WARNING pipeline: {INTERRUPTED}") and text.count(INTERRUPTED) == 1, text
    assert "Traceback" not in text, text
