"""Helpers to run the real Snakefile on variants of the smoke config."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "tests" / "smoke" / "config.yaml"
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


HEAVY = ("torch", "pandas", "numpy", "scipy", "matplotlib")  # no parse of the workflow may load them


def parse_time_imports() -> list[str]:
    """The modules the Snakefile and rules/*.smk import, and the whole workflow layer: what every
    parse of the workflow (each dry run, each cluster job) imports."""
    sources = [ROOT / "Snakefile", *sorted((ROOT / "rules").glob("*.smk"))]
    found = {m for f in sources for m in re.findall(r"^(?:from|import) ([\w.]+)", f.read_text(), re.M)}
    found |= {
        f"pipeline.{m.strip()}"
        for f in sources
        for names in re.findall(r"^from pipeline import ([\w, ]+)$", f.read_text(), re.M)
        for m in names.split(",")
    }
    workflow = {f"pipeline.workflow.{p.stem}" for p in (ROOT / "pipeline" / "workflow").glob("[!_]*.py")}
    return sorted(found | workflow)


def in_fresh_process(modules: list[str], expression: str) -> str:
    """`expression` printed by a fresh interpreter after importing `modules` (with `sys` at hand)."""
    return run_python("\n".join(["import sys", *(f"import {m}" for m in modules), f"print({expression})"]))


def run_python(code: str) -> str:
    """What a fresh interpreter running `code` in the repository root prints (stripped)."""
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout.strip()


IMPORTS_HEAVY = """
import importlib, os, sys
class Stop:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {heavy}:
            print(name, flush=True)
            os._exit(0)
sys.meta_path.insert(0, Stop())
importlib.import_module({module!r})
"""


def imports_heavy(module: str) -> bool:
    """Whether importing `module` in a fresh interpreter imports one of HEAVY: the interpreter stops at
    the first such import (a heavy module is not loaded to find that out: ~0.2 s, not ~3 s)."""
    return bool(run_python(IMPORTS_HEAVY.format(heavy=set(HEAVY), module=module)))


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


def workflow_config(*overlays: dict | Path) -> dict:
    """The config a run sees: config.yaml, updated key by key with each overlay (a dict or a YAML
    file) as Snakemake does with --configfile (before validation and defaults)."""
    from snakemake.utils import update_config

    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    for overlay in overlays:
        update_config(cfg, overlay if isinstance(overlay, dict) else yaml.safe_load(overlay.read_text()))
    return cfg


def reordered(node):
    """`node` with every mapping's keys in reverse order (a reordered but equal config)."""
    if isinstance(node, dict):
        return {k: reordered(v) for k, v in reversed(node.items())}
    return [reordered(v) for v in node] if isinstance(node, list) else node


def write_config(tmp_path: Path, cfg: dict, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def workflow_env(**extra: str) -> dict[str, str]:
    """The environment of a Snakemake run: rule scripts import `pipeline` from this checkout
    (PYTHONPATH first; an editable install of the package may point at another checkout)."""
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def snakemake(
    configfile: Path, *args: str, timeout: int = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*SNAKEMAKE, "--configfile", str(configfile), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or workflow_env(),
    )


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


SMOKE_STUDY = "ci-smoke"
_local_smoke: dict[str, tuple[Path, Path, Path]] = {}


def local_smoke_study(workdir: Path, study: str = SMOKE_STUDY) -> tuple[Path, Path, Path]:
    """Run the smoke study locally (`--cores 2`) from scratch, once per test session, and return
    (results dir, config file, copy of its metrics.parquet taken right after the run).

    Test modules share the run (the cluster and report tests compare with it / report on it);
    the copy stays the fresh run's numbers even after later tests add γ values to the study.
    """
    if study not in _local_smoke:
        out = ROOT / "results" / study
        shutil.rmtree(out, ignore_errors=True)
        cfg_path = write_config(workdir, smoke_config(study=study))
        res = snakemake(cfg_path, "--cores", "2")
        assert res.returncode == 0, res.stderr[-5000:]
        snapshot = workdir / "metrics.fresh.parquet"
        shutil.copyfile(out / "metrics.parquet", snapshot)
        _local_smoke[study] = (out, cfg_path, snapshot)
    return _local_smoke[study]


def start_in_terminal(command: list[str], env: dict[str, str], sink) -> subprocess.Popen:
    """`command` as a terminal's foreground job: its own process group (Ctrl-C signals the whole
    group, jobs included) with SIGINT at its default (a test run in the background of a
    non-interactive shell, `cmd &`, inherits SIGINT ignored, and Snakemake would ignore it)."""
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=sink,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def ctrl_c(proc: subprocess.Popen, within: float) -> float:
    """Ctrl-C to `proc`'s process group (start_in_terminal); seconds until it exits (at most
    `within`, else subprocess.TimeoutExpired)."""
    t0 = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(timeout=within)
    return time.monotonic() - t0


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL to `proc`'s process group if it still runs (a test's clean-up)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def owned_by_dataclass(cls: type, props: dict) -> list[str]:
    """How a section's schema (`props`: its properties) breaks the rule of config/schema.yaml for
    the dataclass `cls` that owns its defaults: every field is a key of the schema, the schema has no
    `default:` for it, and the field's default is a value the key's schema (type, enum, range) accepts.
    Empty: they agree."""
    import dataclasses

    import jsonschema

    def plain(value):
        if dataclasses.is_dataclass(value):
            return plain(dataclasses.asdict(value))
        if isinstance(value, tuple | list):
            return [plain(v) for v in value]
        return {k: plain(v) for k, v in value.items()} if isinstance(value, dict) else value

    problems = []
    for f in dataclasses.fields(cls):
        if f.name not in props:
            problems.append(f"{cls.__name__}.{f.name}: not a key of the schema")
            continue
        if "default" in props[f.name]:
            problems.append(f"{f.name}: the schema has a default ({cls.__name__} owns it)")
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            value = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            for err in jsonschema.Draft202012Validator(props[f.name]).iter_errors(plain(value)):
                problems.append(f"{cls.__name__}.{f.name} = {value!r}: the schema rejects it ({err.message})")
    return problems
