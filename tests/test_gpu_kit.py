"""The GPU kit (bench/gpu_check.py) on a CPU, the way a GPU machine runs it: in a virtual
environment shaped like the GPU image (envs/gpu-image.txt: transformers 5.17.0, accelerate 1.15.0,
...; our torch 2.13.0 standing in for the image's 2.11), the wheelhouse (envs/gpu-wheels.txt, for
this Python) installed with `pip install --no-index --no-deps --target` and checked by the kit's
preflight, the smoke study's data prepared here (bench/gpu_kit_data.py). Every step must pass (the
CUDA tests skip), so the first lent GPU is not spent on a missing import. The GPU's own figures
come only from a GPU machine (docs/benchmarks.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_wheelhouse import make_wheel

ROOT = Path(__file__).resolve().parents[1]
KIT = ROOT / "bench" / "gpu_check.py"
CPU_ARGS = ["--device", "cpu", "--model", "tiny", "--batch", "2", "--seq-len", "64", "--steps", "6"]
CPU_ARGS += [
    "--warmup",
    "2",
    "--pretrain-batch",
    "2",
    "--pretrain-seq-len",
    "64",
    "--gen-batches",
    "1,4",
    "--gen-prompt",
    "16",
    "--gen-new-tokens",
    "16",
]
LIMIT_MIB = 64  # what one device run may carry


def bare_env() -> dict[str, str]:
    """The environment without this checkout's venv on the paths (the image venv must stand alone)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if ".venv" not in p)
    return env


@pytest.fixture(scope="module")
def image_python(tmp_path_factory) -> Path:
    """A venv with the image's packages only (and our CPU torch)."""
    venv = tmp_path_factory.mktemp("image") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run(
        [*pip, "torch==2.13.0", "-r", str(ROOT / "envs" / "gpu-image.txt")], check=True, env=bare_env()
    )
    return python


def test_the_kit_runs_end_to_end_in_an_image_shaped_environment(image_python, tmp_path):
    wheels, data, out = tmp_path / "whl", tmp_path / "gpu-kit", tmp_path / "out"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    subprocess.run(["bash", str(ROOT / "envs" / "fetch_gpu_wheels.sh"), version, str(wheels)], check=True)
    subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_kit_data.py"), "--out", str(data)], check=True)
    out.mkdir()
    done = subprocess.run(
        [str(image_python), str(KIT), *CPU_ARGS, "--cores", "2", "--wheels", str(wheels)]
        + ["--site", str(tmp_path / "site"), "--data", str(data), "--out", str(out / "gpu-check.json")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=bare_env(),
        timeout=1500,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((out / "gpu-check.json").read_text())
    assert report["transformers"] == "5.17.0"  # the image's, not our pin
    steps = report["steps"]
    assert list(steps) == [
        "cuda_tests",
        "training",
        "pretrain",
        "perturb_eval",
        "study",
        "torchrun",
        "generation",
        "vlm",
    ]
    assert steps["cuda_tests"]["status"] == "skip"  # no CUDA here: every CUDA test skips itself
    assert all(s["status"] == "pass" for name, s in steps.items() if name != "cuda_tests"), steps
    study = steps["study"]["figures"]
    assert study["eval_dtype"] == "float32" and study["finetune_precision"] == ["fp32"]
    assert study["judged_pairs"] > 0 and study["unparsable"] == 0
    assert {"pretrain", "evaluate", "finetune", "alpaca_eval", "curvature"} <= set(study["stages"])
    run = steps["torchrun"]["figures"]
    assert run["backend"] == "gloo" and run["max_rel_diff_rank_vs_single"] <= 1e-4
    assert run["max_rel_diff_resumed_vs_uninterrupted"] == 0.0  # a resume is exact on CPU
    assert set(steps["generation"]["figures"]["tokens_per_s"]) == {"1", "4"}
    vlm = steps["vlm"]["figures"]  # LLaVA's stage 2 by the pipeline's loop, a tiny tower on a CPU
    assert vlm["image_tokens"] == 16 and vlm["tower_params"] > 0 and vlm["step_s"] > 0
    assert "ours / Trainer" in done.stdout  # the summary table
    sys.path.insert(0, str(ROOT / "bench"))
    from gpu_kit_data import travelling_mib

    # the wheels for this Python stand in for the image's 3.12 ones (the same pins, ±0.1 MiB)
    assert travelling_mib(ROOT, [wheels, data]) <= LIMIT_MIB


@pytest.mark.parametrize(
    "wheel, named",
    [
        ({"name": "old-python-only", "tag": "cp39-cp39-manylinux_2_17_x86_64"}, "old_python_only-1.0-cp39"),
        ({"name": "needs-more", "requires": ["absent-dependency>=2"]}, "absent-dependency"),
    ],
)
def test_a_wheelhouse_that_does_not_match_stops_the_kit_before_any_step(tmp_path, wheel, named):
    wheels, out = tmp_path / "whl", tmp_path / "gpu-check.json"
    make_wheel(wheels, version="1.0", **wheel)
    done = subprocess.run(
        [sys.executable, str(KIT), *CPU_ARGS, "--wheels", str(wheels), "--site", str(tmp_path / "site")]
        + ["--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode != 0
    assert "stopped before any step" in done.stderr and named in done.stderr, done.stderr
    assert "[cuda_tests]" not in done.stdout and not out.exists()
