"""The package's subpackages are layers: a module imports only from its own subpackage, from lower
ones, and from the leaf modules at the package's top (pipeline/*.py, which import no subpackage).
Every import counts, at module level or inside a function. docs/architecture.md draws this order.

A project import inside a function is there only to keep a module light that must stay light: one
the workflow imports at parse time, or the launcher of a job on N ranks (it holds no model)."""

from __future__ import annotations

import ast
from pathlib import Path

from workflow_utils import imports_heavy, in_fresh_process, parse_time_imports

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pipeline"
# lowest first: data prepares tokens, models load and run them, evaluate scores models, the stages
# (sweeps, curvature, train, judge) use all three, multimodal (LLaVA's data and the VLM benchmarks)
# and tasks (the fine-tuning tasks, text and LLaVA, behind one interface) feed train, analysis and
# theory tabulate and draw, and the workflow (what the Snakefile imports) wires everything
LAYERS = (
    "data",
    "models",
    "evaluate",
    "sweeps",
    "curvature",
    "multimodal",
    "tasks",
    "train",
    "judge",
    "analysis",
    "theory",
    "workflow",
)


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import of `path`, relative imports resolved."""
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    [*package.split(".")[: len(package.split(".")) - node.level + 1], base]
                ).strip(".")
            out += [(node.lineno, f"{base}.{a.name}") for a in node.names]  # `from p import m`: p.m
    return out


def layer(module: str) -> int | None:
    """The layer of a pipeline module: its subpackage's index, -1 for a leaf module, None outside."""
    parts = module.split(".")
    if parts[0] != "pipeline" or len(parts) < 2:
        return None
    return LAYERS.index(parts[1]) if parts[1] in LAYERS else -1


def test_every_subpackage_has_a_layer():
    subpackages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert subpackages == set(LAYERS)


def test_no_module_imports_a_higher_layer():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        own = layer(".".join(path.relative_to(ROOT).with_suffix("").parts))
        for line, target in imported_modules(path):
            other = layer(target)
            if other is not None and own is not None and other > own and not (own == -1 and other == -1):
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
            elif own == -1 and other is not None and other >= 0:
                wrong.append(f"{path.relative_to(ROOT)}:{line} (a leaf module) imports {target}")
    assert not wrong, "imports against the layer order " + " < ".join(LAYERS) + ":\n" + "\n".join(wrong)


def test_the_architecture_doc_draws_the_layer_order():
    assert " → ".join(f"`{name}`" for name in LAYERS) in (ROOT / "docs" / "architecture.md").read_text()


LAUNCHERS = (  # imported by the parent of torchrun, which holds no model
    "pipeline.train.finetune_job",
    "pipeline.train.pretrain_job",
    "pipeline.train.launch",
)


def function_level_imports() -> list[tuple[str, int, str]]:
    """(module, line, imported pipeline module) of every project import inside a function."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                out += [
                    (module, sub.lineno, sub.module)
                    for sub in ast.walk(node)
                    if isinstance(sub, ast.ImportFrom) and (sub.module or "").startswith("pipeline")
                ]
    return out


def test_function_level_imports_keep_a_light_module_light():
    """Each project import inside a function sits in a module that must stay light (imported at parse
    time, or a launcher) and imports something heavy; any other belongs at the top of its module."""
    parse_time = set(ast.literal_eval(in_fresh_process(parse_time_imports(), "sorted(sys.modules)")))
    imports = function_level_imports()
    loads = {t: imports_heavy(t) for _, _, t in imports}
    wrong = []
    for module, line, target in imports:
        heavy = loads[target]
        if not heavy or (module not in parse_time and module not in LAUNCHERS):
            why = "imports nothing heavy" if not heavy else "is not kept light"
            wrong.append(
                f"{module}:{line} imports {target} in a function, but {module if heavy else target} {why}"
            )
    assert not wrong, "\n".join(wrong)
