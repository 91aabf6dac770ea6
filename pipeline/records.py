"""Typed records to and from JSON: a dataclass whose fields are other dataclasses (optional ones, and
unions of them told apart by their `kind` field) back from `dataclasses.asdict`. A job on N ranks
reads its record from a file (pipeline/train/finetune_job.py); this is the one place that rebuilds it."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any


def from_dict(cls: type, data: Any) -> Any:
    """`cls` rebuilt from `data` (the `asdict` of one, e.g. read back from JSON): nested dataclasses
    by their type hints, a tuple from a list."""
    if data is None or not isinstance(cls, type | types.UnionType) and typing.get_origin(cls) is None:
        return data
    options = _options(cls)
    records = [c for c in options if dataclasses.is_dataclass(c)]
    if records and isinstance(data, dict):
        chosen = _choose(records, data)
        hints = typing.get_type_hints(chosen)
        return chosen(**{k: from_dict(hints[k], v) for k, v in data.items()})
    if any(typing.get_origin(c) is tuple or c is tuple for c in options) and isinstance(data, list):
        return tuple(data)
    return data


def _options(cls: Any) -> tuple:
    """The types a hint allows: the members of a union (None aside), else the hint itself."""
    if typing.get_origin(cls) in (typing.Union, types.UnionType):
        return tuple(a for a in typing.get_args(cls) if a is not type(None))
    return (cls,)


def _choose(records: list[type], data: dict) -> type:
    """The record type of `data`: the only one, or the one whose `kind` default matches data's."""
    if len(records) == 1:
        return records[0]
    by_kind = {f.default: c for c in records for f in dataclasses.fields(c) if f.name == "kind"}
    if data.get("kind") not in by_kind:
        raise ValueError(f"a record of kind {data.get('kind')!r}: expected one of {sorted(by_kind)}")
    return by_kind[data["kind"]]
