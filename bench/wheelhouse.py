"""The GPU kit's preflight: the wheels carried to the GPU machine (envs/gpu-wheels.txt, fetched into
.whl/ by `make gpu-wheels`) fit its Python, install into a --target folder, and with the image's
own packages close every requirement of our roots, all checked BEFORE anything else runs, so a
missing package is one clear list at the start instead of an ImportError an hour into a run.

Plain Python + `packaging` + importlib.metadata (no torch import), so it runs first on a bare image:

    python3 bench/wheelhouse.py --wheels .whl --target /tmp/site
    PYTHONPATH=/tmp/site:. python3 bench/gpu_check.py ...

Version conflicts: a distribution that does not satisfy a requirement's version spec is an ERROR
when it is one we carry (it lies in the target: the wheelhouse was resolved wrong, fix
envs/gpu-wheels.txt) or when the spec is one of our roots (we asked for it: `setuptools<81`), and a
WARNING when it is the image's own: the image is fixed, many such specs are cautious upper caps
(snakemake's `packaging<26`) that would stop a GPU run on a label, and the remedy, carrying that
version as a wheel to shadow the image's, is a decision for a person. A requirement with no
distribution at all is always an error: that one is a sure ImportError.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import Tag, sys_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

# What our jobs import on the GPU machine beyond the image (see envs/gpu-wheels.txt): Snakemake,
# lm-eval with its Hugging Face backend, datasets, alpaca-eval; jsonschema (pipeline/workflow/
# config.py) directly; setuptools<81 for alpaca-eval's
# `import pkg_resources`, which no package metadata declares.
DEFAULT_ROOTS = (
    "snakemake",
    "lm-eval[hf]",
    "datasets",
    "alpaca-eval",
    "jsonschema",
    "setuptools<81",
)
STAMP = ".wheelhouse-stamp"


class PreflightError(SystemExit):
    """Exits the kit with every problem found, one a line (SystemExit: no traceback)."""

    def __init__(self, title: str, problems: Iterable[str]):
        self.problems = list(problems)
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"wheelhouse preflight: {title} ({len(self.problems)}):\n{lines}")


def _wheels(wheel_dir: str | Path) -> list[Path]:
    return sorted(Path(wheel_dir).glob("*.whl"))


def check_tags(wheel_dir: str | Path, tags: Iterable[Tag] | None = None) -> list[str]:
    """Wheels in wheel_dir that this interpreter (or `tags`) cannot install, and names that come
    as several wheels (pip --no-deps would install both, one over the other)."""
    supported = set(sys_tags() if tags is None else tags)
    problems, by_name = [], defaultdict(list)
    for whl in _wheels(wheel_dir):
        try:
            name, version, _build, wheel_tags = parse_wheel_filename(whl.name)
        except InvalidWheelFilename as err:
            problems.append(f"{whl.name}: not a wheel file name ({err})")
            continue
        by_name[name].append(f"{version} ({whl.name})")
        if supported.isdisjoint(wheel_tags):
            here = next(iter(sys_tags())) if tags is None else "the given tags"
            problems.append(
                f"{whl.name}: its tags ({', '.join(sorted(map(str, wheel_tags))[:3])}) match no tag of "
                f"this interpreter (best: {here}); fetch it for this Python"
            )
    for name, versions in sorted(by_name.items()):
        if len(versions) > 1:
            problems.append(f"{name}: {len(versions)} wheels, keep one: {'; '.join(versions)}")
    return problems


def _stamp(wheels: list[Path]) -> str:
    lines = []
    for whl in wheels:
        digest = hashlib.sha256(whl.read_bytes()).hexdigest()
        lines.append(f"{whl.name} {digest}\n")
    return "".join(lines)


def install(wheel_dir: str | Path, target: str | Path, python: str = sys.executable) -> bool:
    """pip-installs every wheel of wheel_dir into target (--no-index --no-deps --target); False
    (and nothing done) when target already holds exactly these wheels, by its stamp file. A stale
    target is emptied first, so no package of an older wheelhouse lingers there; a target that
    exists, is not empty and has no stamp is refused rather than emptied."""
    wheels, target = _wheels(wheel_dir), Path(target)
    if not wheels:
        raise PreflightError("no wheels", [f"{wheel_dir} holds no *.whl (run `make gpu-wheels`)"])
    stamp = _stamp(wheels)
    stamp_file = target / STAMP
    if stamp_file.is_file() and stamp_file.read_text() == stamp:
        return False
    if target.exists() and any(target.iterdir()):
        if not stamp_file.is_file():
            raise PreflightError(
                "target in use", [f"{target} is not empty and was not made by {Path(__file__).name}"]
            )
        shutil.rmtree(target)
    target.mkdir(parents=True, exist_ok=True)
    cmd = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    cmd += ["--no-index", "--no-deps", "--target", str(target), *map(str, wheels)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise PreflightError("pip install failed", (done.stderr or done.stdout).strip().splitlines()[-20:])
    stamp_file.write_text(stamp)
    return True


def _distributions(target: str | Path) -> dict[str, metadata.Distribution]:
    """Canonical name -> the distribution an import would find: target first (it goes first on
    PYTHONPATH), then this interpreter's sys.path."""
    found: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions(path=[str(target), *sys.path]):
        name = dist.metadata["Name"]
        if name:
            found.setdefault(canonicalize_name(name), dist)
    return found


def _lies_in(dist: metadata.Distribution, folder: Path) -> bool:
    try:
        return Path(dist.locate_file("")).resolve() == folder.resolve()
    except (OSError, TypeError):
        return False


def missing_requirements(
    target: str | Path,
    roots: Iterable[str],
    *,
    environment: dict[str, str] | None = None,
    warnings: list[str] | None = None,
) -> list[str]:
    """Walks Requires-Dist from `roots` (requirement strings; extras followed where asked) over the
    distributions in target + sys.path, markers evaluated for this interpreter (or `environment`).
    Returns the errors: "name (required by X, Y)" for each requirement with no distribution, and
    "name==v does not satisfy X's spec ..." for a carried distribution (or a root) outside a spec.
    Conflicts with the image's own distributions go to `warnings` (module docstring: why)."""
    env = {**default_environment(), **(environment or {})}
    dists, target = _distributions(target), Path(target)
    missing: dict[str, list[str]] = defaultdict(list)
    errors, soft = [], []
    visited: set[tuple[str, str]] = set()
    queue = [(root, None) for root in roots]  # (requirement, required by: None for a root)
    while queue:
        text, parent = queue.pop(0)
        try:
            req = Requirement(text)
        except InvalidRequirement as err:
            errors.append(f"{parent or 'roots'}: unreadable requirement {text!r} ({err})")
            continue
        name = canonicalize_name(req.name)
        dist = dists.get(name)
        if dist is None:
            if (parent or "the kit's roots") not in missing[name]:
                missing[name].append(parent or "the kit's roots")
            continue
        version = dist.version
        if req.specifier and not req.specifier.contains(version, prereleases=True):
            whose = f"{parent}'s spec" if parent else "the root requirement"
            line = f"{name}=={version} does not satisfy {whose} {req}"
            if parent is None or _lies_in(dist, target):
                errors.append(line)
            else:
                soft.append(f"{line} (the image's own; carry {name} as a wheel to shadow it)")
        provided = {canonicalize_name(e) for e in dist.metadata.get_all("Provides-Extra") or []}
        label = dist.metadata["Name"]
        for extra in ["", *sorted(req.extras)]:
            if extra and canonicalize_name(extra) not in provided:
                soft.append(f"{label} has no extra [{extra}] ({parent or 'a root'} asks for it)")
                continue
            if (name, extra) in visited:
                continue
            visited.add((name, extra))
            by = f"{label}[{extra}]" if extra else label
            for dep in dist.requires or []:
                try:
                    dep_req = Requirement(dep)
                except InvalidRequirement:
                    soft.append(f"{by}: unreadable Requires-Dist {dep!r} (skipped)")
                    continue
                marker = dep_req.marker
                applies = marker is None or marker.evaluate({**env, "extra": extra})
                # an extra adds only what its marker names: the base requirements were walked already
                if applies and not (extra and (marker is None or marker.evaluate({**env, "extra": ""}))):
                    queue.append((dep, by))
    lines = [f"{name} (required by {', '.join(by)})" for name, by in sorted(missing.items())]
    if warnings is not None:
        warnings.extend(dict.fromkeys(soft))
    else:
        for line in dict.fromkeys(soft):
            print(f"wheelhouse preflight: warning: {line}", file=sys.stderr)
    return lines + list(dict.fromkeys(errors))


def preflight(
    wheel_dir: str | Path,
    target: str | Path,
    roots: Iterable[str] = DEFAULT_ROOTS,
    *,
    python: str = sys.executable,
) -> None:
    """Tags, then install, then the requirement closure of `roots` and of every carried wheel;
    raises PreflightError (a SystemExit) that lists every bad wheel or missing name, one a line.
    Warnings go to stderr."""
    bad = check_tags(wheel_dir)
    if bad:
        raise PreflightError(f"wheels in {wheel_dir} that this Python cannot use", bad)
    install(wheel_dir, target, python=python)
    warnings: list[str] = []
    # every carried wheel is a root too: a wheel whose own requirements are open fails here, not later
    carried = [parse_wheel_filename(w.name)[0] for w in _wheels(wheel_dir)]
    problems = missing_requirements(target, [*roots, *carried], warnings=warnings)
    for line in warnings:
        print(f"wheelhouse preflight: warning: {line}", file=sys.stderr)
    if problems:
        raise PreflightError(f"requirements that {wheel_dir} + this Python leave open", problems)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheels", default=".whl", help="the wheelhouse (default .whl)")
    ap.add_argument("--target", default="/tmp/site", help="pip --target folder (default /tmp/site)")
    ap.add_argument(
        "--root",
        action="append",
        dest="roots",
        help=f"a root requirement (repeatable; default: {' '.join(DEFAULT_ROOTS)})",
    )
    args = ap.parse_args(argv)
    roots = args.roots or list(DEFAULT_ROOTS)
    preflight(args.wheels, args.target, roots)
    print(
        f"wheelhouse preflight ok: {len(_wheels(args.wheels))} wheels from {args.wheels} in {args.target}; "
        f"{', '.join(roots)} complete. Run with PYTHONPATH={args.target}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
