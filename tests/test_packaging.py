"""The package as users install it (`pip install .`, not editable) and the code's lint gates."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUFF = [sys.executable, "-m", "ruff"]
LINTED = ["pipeline", "rules", "bench", "tests"]


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600, env=env)


def test_non_editable_install_dry_runs_the_workflow(tmp_path):
    """A wheel built from the checkout, installed into a fresh venv (its dependencies seen through
    a .pth file, no editable finder), runs a dry run of a copy of the workflow without pipeline/."""
    source = tmp_path / "source"  # a copy: setuptools builds in-tree (build/, *.egg-info)
    shutil.copytree(ROOT / "pipeline", source / "pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(ROOT / "pyproject.toml", source / "pyproject.toml")
    wheels = tmp_path / "wheels"
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    build = _run([*pip_wheel, "-w", str(wheels), str(source)], cwd=tmp_path)
    assert build.returncode == 0, build.stderr
    venv = tmp_path / "venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path).returncode == 0
    python = venv / "bin" / "python"
    site = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp_path
        ).stdout.strip()
    )
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            *map(str, wheels.glob("*.whl")),
        ],
        cwd=tmp_path,
    )
    assert install.returncode == 0, install.stderr

    workflow = tmp_path / "workflow"
    workflow.mkdir()
    for name in ("Snakefile", "config.yaml", "rules", "config", "report", "envs"):
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copyfile
        copy(ROOT / name, workflow / name)
    (workflow / "data").mkdir()
    (workflow / "data" / "packages").symlink_to(ROOT / "data" / "packages")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = _run(
        [str(python), "-c", "import pipeline.evaluate.benchmarks as b; print(b.TASKS_DIR)"],
        cwd=workflow,
        env=env,
    )
    tasks_dir = Path(where.stdout.strip())
    assert tasks_dir.is_relative_to(site), where.stdout + where.stderr
    assert (tasks_dir / "ot_arc_easy.yaml").is_file() and (
        tasks_dir / "mmlu" / "_default_template_yaml"
    ).is_file()
    dry = _run([str(python), "-m", "snakemake", "-n", "--cores", "2"], cwd=workflow, env=env)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "rule finetune_grid:" in dry.stdout + dry.stderr  # the default study's grid jobs


def test_ruff_lint_is_clean():
    res = _run([*RUFF, "check", *LINTED], cwd=ROOT)
    assert res.returncode == 0, res.stdout[-5000:]


def test_ruff_format_is_clean():
    res = _run([*RUFF, "format", "--check", *LINTED], cwd=ROOT)
    assert res.returncode == 0, res.stdout[-5000:]
