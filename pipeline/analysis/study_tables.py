"""A study's tables as the registered claims read them (pipeline/analysis/claims.py): from
results/<study>/, or from the copy `make docs` keeps in docs/reference/<study>/; a table or rows a
study lacks are `NoRows`, which a finding renders as not computed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pipeline import layout
from pipeline.analysis.evidence import NoRows

# The files of a study a claim may read (relative to results/<study>/; `make docs` copies them to
# docs/reference/<study>/).
TABLES = (
    "metrics.parquet",
    "data/token_coverage.parquet",
    layout.REFERENCE_PPL,
    "data/corpus_manifest.parquet",
    "analysis/pretrain_runs.parquet",
    "analysis/finetune_tuned.parquet",
    "theory/metrics.parquet",
    "theory/transfer.parquet",
    "data/vlm/data.json",
)


class StudyTables:
    """A study's tables, each read on first use from `root` (results/<study> or its reference copy)."""

    def __init__(self, root: str | Path, study: str):
        self.root, self.study = Path(root), study
        self._cache: dict[str, pd.DataFrame] = {}

    def table(self, rel: str) -> pd.DataFrame:
        if rel not in self._cache:
            path = self.root / rel
            if not path.is_file():
                raise NoRows(f"no rows for {rel} of study {self.study!r} (run it: docs/findings.md says how)")
            self._cache[rel] = pd.read_parquet(path)
        return self._cache[rel]

    def metrics(self, what: str, **equal: object) -> pd.DataFrame:
        """The metric rows whose columns equal `equal` (a tuple: any of), or NoRows naming `what`."""
        m = self.table("metrics.parquet")
        keep = np.ones(len(m), dtype=bool)
        for col, want in equal.items():
            keep &= m[col].isin(want).to_numpy() if isinstance(want, tuple) else (m[col] == want).to_numpy()
        rows = m[keep]
        if rows.empty:
            raise NoRows(f"no rows for {what} in study {self.study!r}")
        return rows
