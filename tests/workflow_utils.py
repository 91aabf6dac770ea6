"""Helpers to run the real Snakefile on variants of the smoke config."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "tests" / "smoke" / "config.yaml"
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def smoke_config(**overrides) -> dict:
    """The smoke config with dotted-key overrides, e.g. {"perturb.gammas": [2, 3]}."""
    cfg = yaml.safe_load(SMOKE.read_text())
    for dotted, value in overrides.items():
        node = cfg
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return cfg


def write_config(tmp_path: Path, cfg: dict, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def snakemake(configfile: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*SNAKEMAKE, "--configfile", str(configfile), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def planned_jobs(configfile: Path) -> dict[str, int]:
    """rule -> number of jobs a dry run would execute."""
    res = snakemake(configfile, "-n", "--cores", "2", "--quiet", "rules")
    assert res.returncode == 0, res.stdout + res.stderr
    jobs = {}
    for line in (res.stdout + res.stderr).splitlines():
        m = re.fullmatch(r"\s*(\w+)\s+(\d+)\s*", line)
        if m and m.group(1) != "total":
            jobs[m.group(1)] = int(m.group(2))
    return jobs
