"""pipeline.runtime.setup_logging: library output goes to the job's log file, ours also to the terminal."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

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
