"""The GPU kit's wheelhouse preflight (bench/wheelhouse.py) on tiny fake wheels, offline, and the two
pin lists it serves (envs/gpu-image.txt: the image's own packages; envs/gpu-wheels.txt: what travels)."""

from __future__ import annotations

import importlib.util
import re
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("wheelhouse", ROOT / "bench" / "wheelhouse.py")
wheelhouse = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wheelhouse)


def make_wheel(folder: Path, name: str, version: str, requires=(), tag="py3-none-any", extras=()) -> Path:
    """A minimal installable wheel: a module, NAME-VER.dist-info/{METADATA, WHEEL, RECORD}."""
    folder.mkdir(parents=True, exist_ok=True)
    mod = name.replace("-", "_")
    info = f"{mod}-{version}.dist-info"
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    meta += [f"Provides-Extra: {e}" for e in extras] + [f"Requires-Dist: {r}" for r in requires]
    files = {
        f"{mod}/__init__.py": f"VERSION = {version!r}\n",
        f"{info}/METADATA": "\n".join(meta) + "\n",
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tag}\n",
    }
    record = "".join(f"{path},,\n" for path in files) + f"{info}/RECORD,,\n"
    path = folder / f"{mod}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for arcname, text in files.items():
            zf.writestr(arcname, text)
        zf.writestr(f"{info}/RECORD", record)
    return path


def unpack(wheel_dir: Path, target: Path) -> Path:
    """What pip --target does with pure wheels, without pip (for the tests that need no install)."""
    for whl in wheel_dir.glob("*.whl"):
        with zipfile.ZipFile(whl) as zf:
            zf.extractall(target)
    return target


def test_check_tags_names_a_wheel_for_another_python_and_duplicate_versions(tmp_path):
    wheels = tmp_path / "whl"
    make_wheel(wheels, "good", "1.0")
    other = make_wheel(wheels, "native", "1.0", tag="cp39-cp39-manylinux_2_17_x86_64")
    make_wheel(wheels, "twice", "1.0")
    make_wheel(wheels, "twice", "2.0")
    problems = wheelhouse.check_tags(wheels)
    assert len(problems) == 2, problems
    assert problems[0].startswith(other.name) and "match no tag of this interpreter" in problems[0]
    assert problems[1].startswith("twice: 2 wheels") and "1.0" in problems[1] and "2.0" in problems[1]


def test_preflight_names_an_absent_requirement_before_anything_runs(tmp_path):
    wheels = tmp_path / "whl"
    make_wheel(wheels, "fake", "1.0", requires=["absent-name>=1", "packaging"])
    with pytest.raises(SystemExit) as err:
        wheelhouse.preflight(wheels, tmp_path / "site", ["fake"])
    assert err.value.problems == ["absent-name (required by fake)"]  # packaging: on sys.path, the image's
    assert "  absent-name (required by fake)" in str(err.value).splitlines()  # one line each


def test_preflight_stops_at_a_bad_wheel_before_installing_anything(tmp_path):
    wheels, site = tmp_path / "whl", tmp_path / "site"
    make_wheel(wheels, "fake", "1.0")
    make_wheel(wheels, "native", "1.0", tag="cp39-cp39-manylinux_2_17_x86_64")
    with pytest.raises(SystemExit, match="this Python cannot use") as err:
        wheelhouse.preflight(wheels, site, ["fake"])
    assert len(err.value.problems) == 1 and not site.exists()


def test_a_clean_wheelhouse_passes_and_is_installed_once(tmp_path):
    wheels, site = tmp_path / "whl", tmp_path / "site"
    make_wheel(wheels, "fake", "1.0", requires=["fakedep>=1.0,<2", "packaging"])
    make_wheel(wheels, "fakedep", "1.5")
    wheelhouse.preflight(wheels, site, ["fake"])
    assert (site / "fake" / "__init__.py").is_file() and (site / "fakedep-1.5.dist-info").is_dir()
    assert wheelhouse.install(wheels, site) is False  # the stamp: exactly these wheels, nothing to do


def test_a_version_conflict_is_an_error_in_what_we_carry_and_a_warning_in_the_image(tmp_path):
    wheels = tmp_path / "whl"
    make_wheel(wheels, "fake", "1.0", requires=["fakedep>=2", "packaging<1"])
    make_wheel(wheels, "fakedep", "1.0")
    warnings: list[str] = []
    errors = wheelhouse.missing_requirements(unpack(wheels, tmp_path / "site"), ["fake"], warnings=warnings)
    assert errors == ["fakedep==1.0 does not satisfy fake's spec fakedep>=2"]
    assert len(warnings) == 1 and warnings[0].startswith("packaging==") and "the image's own" in warnings[0]
    # a root's own spec is ours: an error wherever the distribution lies
    errors = wheelhouse.missing_requirements(tmp_path / "site", ["packaging<1"], warnings=[])
    assert len(errors) == 1 and "does not satisfy the root requirement packaging<1" in errors[0]


def test_extras_and_markers_are_followed_only_where_they_apply(tmp_path):
    wheels = tmp_path / "whl"
    requires = [
        'only-with-extra; extra == "hf"',
        'only-on-old-python; python_version < "3.0"',
        "shared-dep",
    ]
    make_wheel(wheels, "fake", "1.0", requires=requires, extras=["hf"])
    make_wheel(wheels, "shared-dep", "0.1")
    site = unpack(wheels, tmp_path / "site")
    assert wheelhouse.missing_requirements(site, ["fake"], warnings=[]) == []
    errors = wheelhouse.missing_requirements(site, ["fake[hf]"], warnings=[])
    assert errors == ["only-with-extra (required by fake[hf])"]
    # the same walk for another interpreter's markers
    errors = wheelhouse.missing_requirements(
        site, ["fake"], environment={"python_version": "2.7", "python_full_version": "2.7.18"}, warnings=[]
    )
    assert errors == ["only-on-old-python (required by fake)"]
    (site / "shared_dep-0.1.dist-info" / "METADATA").unlink()  # now gone: named once, by the base
    errors = wheelhouse.missing_requirements(site, ["fake[hf]"], warnings=[])
    assert errors == ["only-with-extra (required by fake[hf])", "shared-dep (required by fake)"]


def test_install_refuses_a_folder_it_did_not_make(tmp_path):
    wheels, site = tmp_path / "whl", tmp_path / "site"
    make_wheel(wheels, "fake", "1.0")
    site.mkdir()
    (site / "precious.txt").write_text("keep")
    with pytest.raises(SystemExit, match="not made by"):
        wheelhouse.install(wheels, site)
    assert (site / "precious.txt").read_text() == "keep"


def _pins(path: Path) -> dict[str, list[Requirement]]:
    pins: dict[str, list[Requirement]] = {}
    for line in path.read_text().splitlines():
        spec = line.split("#", 1)[0].strip()
        if spec:
            req = Requirement(spec)
            pins.setdefault(canonicalize_name(req.name), []).append(req)
    return pins


def test_gpu_wheels_pins_exactly_and_pins_nothing_the_image_has():
    image = _pins(ROOT / "envs" / "gpu-image.txt")
    wheels = _pins(ROOT / "envs" / "gpu-wheels.txt")
    assert image and wheels
    for reqs in [*image.values(), *wheels.values()]:
        for req in reqs:
            assert re.fullmatch(r"==[^,*]+", str(req.specifier)), f"{req} is not an exact pin"
    assert not set(image) & set(wheels), f"pinned in both: {sorted(set(image) & set(wheels))}"
    for name in wheels:
        assert len(wheels[name]) == 1, f"{name} pinned twice in gpu-wheels.txt"
    # torch is the image's own (2.11.0+cu130); the CI venv stands our CPU 2.13.0 in for it
    assert "torch" not in image and "torch" not in wheels
    # the kit's roots all travel or are the image's (setuptools: carried to shadow the image's)
    for root in wheelhouse.DEFAULT_ROOTS:
        assert canonicalize_name(Requirement(root).name) in set(image) | set(wheels), root


def test_the_image_pins_resolve_one_version_for_this_python():
    """numpy pins differ by Python (2.5 has no 3.11 wheels): exactly one applies here."""
    for name, reqs in _pins(ROOT / "envs" / "gpu-image.txt").items():
        live = [r for r in reqs if r.marker is None or r.marker.evaluate()]
        assert len(live) == 1, f"{name}: {len(live)} pins apply to Python {sys.version_info[:2]}"
