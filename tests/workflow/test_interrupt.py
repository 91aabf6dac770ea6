"""Ctrl-C on a local run: the running job says so in one line (no traceback), Snakemake exits in
seconds, and the rerun resumes the job from its last state file.

(Ctrl-C on a cluster run: tests/workflow/test_slurm.py; a job's handling of SIGINT on its own,
ranks included: tests/test_runtime.py.)
"""

from __future__ import annotations

import re
import shutil
import time

from workflow_utils import (
    ROOT,
    SNAKEMAKE,
    ctrl_c,
    kill_group,
    smoke_config,
    snakemake,
    start_in_terminal,
    workflow_env,
    write_config,
)

from pipeline import layout
from pipeline.runtime import INTERRUPTED

STUDY = "ci-interrupt"
PAST_STEP_100 = re.compile(r"\[pretrain/tiny-262144-s0\] step (1[5-9]|[2-4]\d)\d/512")  # logged every 50


def test_ctrl_c_stops_a_local_run_in_one_line_per_job_and_the_rerun_resumes(tmp_path):
    out = ROOT / "results" / STUDY
    shutil.rmtree(out, ignore_errors=True)
    # one pre-training run (and the data jobs before it); its state is saved every 100 steps
    cfg = write_config(tmp_path, smoke_config(study=STUDY, **{"pretrain.checkpoint_every": 100}))
    run = out / layout.PRETRAIN_RUN.format(model="tiny", budget=262144, pretrain_seed=0)
    target = str(run.relative_to(ROOT))
    terminal = tmp_path / "terminal.txt"
    try:
        with terminal.open("w") as sink:
            command = [*SNAKEMAKE, "--configfile", str(cfg), "--cores", "2", target]
            proc = start_in_terminal(command, workflow_env(), sink)
            try:
                t0 = time.monotonic()
                while not PAST_STEP_100.search(terminal.read_text()):  # the state of step 100 saved
                    assert proc.poll() is None and time.monotonic() - t0 < 300, terminal.read_text()[-3000:]
                    time.sleep(0.1)
                seconds = ctrl_c(proc, within=60)
            finally:
                kill_group(proc)
        text = terminal.read_text()
        print(f"Snakemake exited {seconds:.1f} s after Ctrl-C")
        assert proc.returncode != 0 and seconds < 20, (seconds, text[-3000:])
        assert "Traceback" not in text and "KeyboardInterrupt" not in text, text[-5000:]
        assert text.count(f"[pretrain/tiny-262144-s0] {INTERRUPTED}") == 1, text[-3000:]
        log = (out / "logs" / "pretrain" / "tiny-262144-s0.log").read_text()
        assert f"WARNING pipeline: {INTERRUPTED}" in log and "Traceback" not in log, log[-3000:]
        assert not run.exists() and not list(run.parent.glob(".tmp-*")), list(run.parent.iterdir())

        res = snakemake(cfg, "--cores", "2", target, timeout=300)
        text = res.stdout + res.stderr
        assert res.returncode == 0, text[-3000:]
        m = re.search(r"\[pretrain/tiny-262144-s0\] resumed from \S+ at step (\d+)/512", text)
        assert m and int(m.group(1)) >= 100, text[-3000:]
        assert (run / "config.json").is_file()
    finally:
        shutil.rmtree(out, ignore_errors=True)
