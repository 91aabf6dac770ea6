"""The role of each field of a config dataclass, in one vocabulary (`dataclasses.field(metadata=...)`
through `meta`). A leaf module: it imports nothing from pipeline.

- NUMBERS: changes the numbers. Part of the run's identity (a rule's `params:`, so a change reruns
  exactly the jobs that read it; the judge's cache key), and recorded with the results. The role of
  a field without metadata.
- RECORDED: written with the results (rows, logs), but changes no number: not in the identity.
- NEITHER: how a run executes (cadence, threads, speed, a label, an endpoint): neither.

`meta(NUMBERS, recorded=False)` is a field in the identity that rows do not record (e.g. the
micro-batch: how a batch is computed). Tags are other per-field facts a module keys on, e.g. which
jobs read the field (`meta(base_eval=True)`), read back with `tagged`.

`meta(NUMBERS, when_set=True)`: a field added after studies existed, whose default reproduces them.
It joins the identity only when set away from its default, so results made before it existed stay
valid (their jobs do not rerun, their resume states still load).
"""

from __future__ import annotations

from dataclasses import Field, fields
from typing import Any

NUMBERS, RECORDED, NEITHER = "numbers", "recorded", "neither"
ROLES = (NUMBERS, RECORDED, NEITHER)


def meta(role: str = NUMBERS, *, recorded: bool | None = None, **tags: Any) -> dict[str, Any]:
    """The metadata of a field with this role (recorded: override whether rows record it) and tags."""
    if role not in ROLES:
        raise ValueError(f"field role {role!r}: expected one of {ROLES}")
    out: dict[str, Any] = {"role": role, **tags}
    if recorded is not None:
        out["recorded"] = recorded
    return out


def role(f: Field) -> str:
    return f.metadata.get("role", NUMBERS)


def changes_numbers(f: Field) -> bool:
    """Part of the run's identity: a change reruns the jobs that read the field."""
    return role(f) == NUMBERS


def is_recorded(f: Field) -> bool:
    """Written with the results: NUMBERS and RECORDED fields, unless `recorded=False`."""
    return f.metadata.get("recorded", role(f) != NEITHER)


def tagged(f: Field, tag: str, default: Any = False) -> Any:
    return f.metadata.get(tag, default)


def in_identity(f: Field, value: Any) -> bool:
    """Whether `value` of field `f` is part of a run's identity: NUMBERS fields, a `when_set` one
    only away from its default."""
    return changes_numbers(f) and not (tagged(f, "when_set") and value == f.default)


def field_named(cls: type, name: str) -> Field:
    return next(f for f in fields(cls) if f.name == name)


def names(cls: type, role_: str) -> tuple[str, ...]:
    """The fields of `cls` with role `role_`, in order."""
    return tuple(f.name for f in fields(cls) if role(f) == role_)
