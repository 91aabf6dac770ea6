"""References a clone can follow, in pipeline/, rules/, docs/, bench/, config/, profiles/, envs/,
README.md, Makefile, Snakefile and config.yaml (config/schema* excepted):

- Paths. A token that starts with a top-level name (`docs/scaling.md`, `tests/x.py::test_y`,
  `rules/data.smk:12`, `Snakefile`) is read from the repository root; a `../` path and a markdown
  link's target are read from the citing file's folder. Each names a file or folder of the
  repository (tracked, or new and not git-ignored), stays inside it, and a `::name` suffix names a
  test of that file. Not checked: templates (`<study>`, `{study}`, `*`, `$(PY)`, `...`), and what
  the workflow makes: results/, data/ (nothing there is tracked; `study_path("data/x")` is a
  study's folder).
- Modules. `pipeline.a.b` written outside Python code is a module or package, or `b` is defined
  at the top of the module `pipeline.a`.
- Issue tags. "issue 12" / "issue #12" cites this project's tracker, which a clone cannot read,
  unless its line also says whose tracker it is: a URL, a `repo#N` / `owner/repo#N`, or the word
  "plugin" (snakemake-executor-plugin-slurm's issues).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("pipeline/", "rules/", "docs/", "bench/", "config/", "profiles/", "envs/")
SCANNED_FILES = ("README.md", "Makefile", "Snakefile", "config.yaml")
TEXT = {".py", ".smk", ".md", ".yaml", ".yml", ".rst", ".sh", ".txt", ""}

TOP_DIRS = "pipeline|rules|tests|docs|bench|config|profiles|envs|report|\\.ci"
TOP_FILES = "Snakefile|Makefile|config\\.yaml|README\\.md|pyproject\\.toml"
PATH = re.compile(rf"(?<![\w./~$-])(?:(?:{TOP_DIRS})/|(?:{TOP_FILES})\b|\.\./)[^\s`'\",;\]]*")
LINK = re.compile(r"\]\(([^)\s:]+)\)")  # a markdown link without a scheme
TEMPLATE = re.compile(r"[<>{}*$%\[]|\.\.\.")
MODULE = re.compile(r"(?<![\w./-])pipeline(?:\.\w+)+")
ISSUE = re.compile(r"\bissues? +#?\d+", re.IGNORECASE)
PUBLIC = re.compile(r"://|\w#\d+|\bplugin\b", re.IGNORECASE)

LISTED = subprocess.run(
    ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
    cwd=ROOT,
    capture_output=True,
    text=True,
    check=True,
).stdout.splitlines()
FILES = sorted(f for f in set(LISTED) if (ROOT / f).is_file())
EXISTING = set(FILES) | {str(parent) for f in FILES for parent in Path(f).parents}


def scanned_lines() -> list[tuple[str, int, str]]:
    """(file, line number, line) of every scanned text file."""
    lines = []
    for f in FILES:
        if (f.startswith(SCANNED) or f in SCANNED_FILES) and Path(f).suffix in TEXT:
            if not f.startswith(("config/schema.", "config/schema/")):
                text = (ROOT / f).read_text(encoding="utf-8")
                lines += [(f, n, line) for n, line in enumerate(text.splitlines(), 1)]
    return lines


def cited_paths(f: str, line: str) -> set[tuple[str, str]]:
    """(as written, repository-relative path) of each path the line names."""
    folder = (ROOT / f).parent
    found = [(m.group(), folder if m.group().startswith("../") else ROOT) for m in PATH.finditer(line)]
    if f.endswith(".md"):
        found += [(m.group(1), folder) for m in LINK.finditer(line)]
    paths = set()
    for written, base in found:
        written = written.rstrip(".:()")
        path = re.sub(r"(:\d+(-\d+)?|#[\w-]*)$", "", written.split("::")[0])
        if path and not TEMPLATE.search(path):
            paths.add((written, os.path.relpath(os.path.normpath(base / path), ROOT)))
    return paths


def test_every_path_named_exists_in_the_repository():
    cited = [
        (f, n, written, path) for f, n, line in scanned_lines() for written, path in cited_paths(f, line)
    ]
    bad = []
    for f, n, written, path in cited:
        test = written.split("::")[1] if "::" in written else None
        if path.startswith(".."):
            bad.append(f"{f}:{n}: {written} (leaves the repository)")
        elif path not in EXISTING:
            bad.append(f"{f}:{n}: {written} (no such file)")
        elif test and f"def {test}(" not in (ROOT / path).read_text(encoding="utf-8"):
            bad.append(f"{f}:{n}: {written} (no such test)")
    assert len(cited) > 100, "the pattern should find the paths the docs name"
    assert not bad, f"{len(bad)} of {len(cited)} paths named cannot be followed:\n" + "\n".join(bad)


def module_exists(dotted: str) -> bool:
    """`pipeline.a.b` is a module or a package, or `b` is defined at the top of `pipeline.a`."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:i])
        module = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if module.is_file():
            if i == len(parts):
                return True
            name = parts[i]
            defined = rf"^(?:async def|def|class) {name}\b|^{name}\s*[:=]|^(?:from|import) .*\b{name}\b"
            return re.search(defined, module.read_text(encoding="utf-8"), re.MULTILINE) is not None
    return False


def test_every_pipeline_module_named_outside_the_code_exists():
    bad = [
        f"{f}:{n}: {m.group()}"
        for f, n, line in scanned_lines()
        if not f.endswith(".py")
        for m in MODULE.finditer(line)
        if not module_exists(m.group())
    ]
    assert not bad, "modules named that do not exist:\n" + "\n".join(bad)


def test_no_tag_cites_the_private_tracker():
    bad = [
        f"{f}:{n}: {m.group()}"
        for f, n, line in scanned_lines()
        if not PUBLIC.search(line)
        for m in ISSUE.finditer(line)
    ]
    assert not bad, (
        "tags of the project's own tracker (write the fact, or name the doc section it led to):\n"
        + "\n".join(bad)
    )
