"""The GPU kit (bench/gpu_check.py) on a CPU: every part runs and reports its figures (the GPU
figures themselves come only from a GPU machine: docs/benchmarks.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_gpu_kit_runs_end_to_end_on_a_cpu(tmp_path):
    out = tmp_path / "kit.json"
    args = ["--model", "tiny", "--device", "cpu", "--batch", "2", "--seq-len", "64", "--steps", "6"]
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_check.py"), *args, "--warmup", "2", "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["ours"]["tokens_per_s"] > 0 and report["trainer"]["tokens_per_s"] > 0
    assert report["speedup_vs_trainer"] == report["ours"]["tokens_per_s"] / report["trainer"]["tokens_per_s"]
    assert report["ours"]["planner_gib"] > 0 and report["perturb_eval"]["ppl_finite"]
    assert report["cuda_tests"]["status"].startswith(("passed", "skipped"))  # all skipped on a CPU
    assert "ours / Trainer" in done.stdout
