"""The fine-tuning task registry (pipeline.data.tasks.TASKS) against what is kept by hand elsewhere:
the config schema's task enums and descriptions, and the task list in config.yaml's comment."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from pipeline.data import tasks as T
from pipeline.data.packages import PINS
from pipeline.data.task_items import KINDS, SPLITS
from pipeline.multimodal.config import VLM_TASKS

ROOT = Path(__file__).resolve().parents[2]


def _schema() -> dict:
    """The schema as written (config/schema.yaml and its section files), markers unfilled."""
    from pipeline.workflow.schema import load_schema

    return load_schema(ROOT / "config" / "schema.yaml", registries=False)


def _enums(node, path: str = "") -> Iterator[tuple[str, list]]:
    """(key path, enum) of every enum in a JSON schema."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "enum" and isinstance(v, list):
                yield path, v
            else:
                yield from _enums(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _enums(v, f"{path}[{i}]")


def test_every_task_is_one_complete_entry():
    assert T.TASK_NAMES == tuple(T.TASKS) and all(name == t.name for name, t in T.TASKS.items())
    for t in T.TASKS.values():
        assert t.kind in KINDS, t.name
        assert set(t.hub_splits) == set(SPLITS) and t.hub_path, t.name
        assert (t.hub_row is None) == (t.text_field is not None) == (t.kind == "lm" and not t.hub_fields), (
            t.name
        )
        assert set(t.embedded_files) <= set(PINS), t.name  # pinned package files only
        assert t.embedded is not None or (t.kind == "chat" and not t.embedded_files), t.name
    assert T.EMBEDDED_TASKS == tuple(n for n, t in T.TASKS.items() if t.embedded is not None)
    # every LM and classification task ships its data; of the chat tasks only mbpp (offline stand-in)
    assert [n for n in T.TASK_NAMES if n not in T.EMBEDDED_TASKS] == ["hh", "tulu", "alpaca"]


def test_pins_are_the_ones_fetched():
    """packages.PINS names the files `make setup` fetches with the pins of envs/data-requirements.txt."""
    requirements = (ROOT / "envs" / "data-requirements.txt").read_text()
    for file, pin in PINS.items():
        assert pin.split()[0] in requirements, pin
        name, version = pin.split()[0].split("==")
        assert file.lower().replace("_", "-").startswith(f"{name.lower()}-{version}"), (file, pin)


def test_schema_takes_its_task_names_from_the_registry():
    """config/schema.yaml keeps no task list: finetune.tasks, finetune.task_data's keys and
    tokenizer.extra_texts carry `x-registry` markers, filled from the registry when the schema loads."""
    from pipeline.workflow.schema import load_schema

    raw = _schema()
    assert not [path for path, enum in _enums(raw) if "gsm8k" in enum or "arc_easy" in enum]
    found = {
        path: enum for path, enum in _enums(load_schema(ROOT / "config" / "schema.yaml")) if "gsm8k" in enum
    }
    assert len(found) == 3, sorted(found)
    for path, enum in found.items():
        if ".tokenizer." in path:
            assert enum == ["python_stdlib", *T.EMBEDDED_TASKS], path
        elif path.endswith(".tasks.items"):  # fine-tuning tasks: LLaVA's stage 2 too
            assert enum == [*T.TASK_NAMES, *VLM_TASKS], path
        else:
            assert enum == list(T.TASK_NAMES), path


def test_config_comment_lists_the_embedded_tasks():
    """config.yaml's comment on finetune.tasks: the tasks whose data ship in packages, by kind."""
    line = next(
        x for x in (ROOT / "config.yaml").read_text().splitlines() if re.match(r"\s+tasks: .*\(LM\)", x)
    )
    comment = line.split("#", 1)[1]
    listed = {
        kind.lower(): re.findall(r"\w+", names) for names, kind in re.findall(r"([\w ,]+) \((\w+)\)", comment)
    }
    for kind in ("lm", "classification", "chat"):
        assert listed[kind] == [n for n in T.EMBEDDED_TASKS if T.TASKS[n].kind == kind], (kind, comment)


def test_the_task_data_dataclass_owns_the_defaults():
    """finetune.task_data.<task>: the schema types each key of TaskData and defaults none of them."""
    from dataclasses import fields

    entry = _schema()["properties"]["finetune"]["properties"]["task_data"]["additionalProperties"]
    assert set(entry["properties"]) == {f.name for f in fields(T.TaskData)}
    assert not [k for k, v in entry["properties"].items() if "default" in v]
