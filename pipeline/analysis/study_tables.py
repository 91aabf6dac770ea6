"""A study's tables as the registered claims read them (pipeline/analysis/claims.py): from
results/<study>/, or from the copy `make docs` keeps in docs/reference/<study>/; a table or rows a
study lacks are `NoRows`, which a finding renders as not computed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pipeline import layout
from pipeline.analysis.verdicts import NoRows


class UndeclaredTable(RuntimeError):
    """A claim read a table its record does not declare (a bug in the registry, not missing data)."""


class StudyTables:
    """A study's tables, each read on first use from `root` (results/<study> or its reference copy)."""

    def __init__(
        self, root: str | Path, study: str, declared: tuple[str, ...] | None = None, reader: str = ""
    ):
        self.root, self.study = Path(root), study
        self.declared, self.reader = declared, reader
        self._cache: dict[str, pd.DataFrame] = {}

    def reading(self, declared: tuple[str, ...], reader: str) -> StudyTables:
        """The same tables for a claim that declares `declared`: reading any other is an error."""
        view = StudyTables(self.root, self.study, declared, reader)
        view._cache = self._cache
        return view

    def path(self, rel: str) -> Path:
        """A declared table's file, or NoRows where the study lacks it."""
        self._check(rel)
        path = self.root / rel
        if not path.is_file():
            raise NoRows(f"no rows for {rel} of study {self.study!r} (run it: docs/findings.md says how)")
        return path

    def _check(self, rel: str) -> None:
        if self.declared is not None and rel not in self.declared:
            raise UndeclaredTable(f"claim {self.reader!r} reads {rel}, which its record does not declare")

    def has(self, rel: str) -> bool:
        self._check(rel)
        return (self.root / rel).is_file()

    def table(self, rel: str) -> pd.DataFrame:
        self._check(rel)
        if rel not in self._cache:
            self._cache[rel] = pd.read_parquet(self.path(rel))
        return self._cache[rel]

    def metrics(self, what: str, table: str = layout.METRICS, **equal: object) -> pd.DataFrame:
        """The metric rows (of `table`: the study's runs, or the WSD stable twins' table) whose columns
        equal `equal` (a tuple: any of), or NoRows naming `what`."""
        m = self.table(table)
        keep = np.ones(len(m), dtype=bool)
        for col, want in equal.items():
            keep &= m[col].isin(want).to_numpy() if isinstance(want, tuple) else (m[col] == want).to_numpy()
        rows = m[keep]
        if rows.empty:
            raise NoRows(f"no rows for {what} in study {self.study!r}")
        return rows
