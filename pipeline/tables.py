"""The study's tidy metrics table: one schema for every stage, plus provenance.

One row is one number: (checkpoint, budget, modification, its hyperparameters, seed,
evaluation data, split, metric) -> value. Stages build rows with `metric_row` and
write them with `write_metrics`; `aggregate_metrics` concatenates a study's parts and
stamps provenance. docs/metrics-schema.md documents every column.
"""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from pipeline.io import write_parquet

if TYPE_CHECKING:
    import pandas as pd

# Column -> arrow type. Hyperparameter columns are null where they do not apply.
METRIC_COLUMNS: dict[str, pa.DataType] = {
    "study": pa.string(),
    "checkpoint": pa.string(),  # unique name of the base model, e.g. "tiny-1000000-s0"
    "source": pa.string(),  # sweep | local | hub | theory
    "model": pa.string(),  # size preset / model family, e.g. "tiny", "allenai/OLMo-1B-hf"
    "budget": pa.float64(),  # pre-training budget in `budget_unit`
    "budget_unit": pa.string(),  # tokens | feature_index (theory track)
    "pretrain_seed": pa.int64(),  # the pre-training run's seed (null: local, or a hub one without seeds)
    "schedule_phase": pa.string(),  # decayed | stable: the LR annealed at the checkpoint? (null: unknown)
    "repo": pa.string(),  # hub: the model repository the weights came from (null off the hub)
    "revision": pa.string(),  # hub: the revision the study names
    "commit": pa.string(),  # hub: the commit that revision was locked to at start-up
    "modification": pa.string(),  # none | gaussian | sft | ...
    "gamma": pa.float64(),  # Gaussian perturbation scale (relative to init std)
    "task": pa.string(),  # fine-tuning task
    "learning_rate": pa.float64(),
    "lambda_reg": pa.float64(),  # proximal regulariser strength
    "seed": pa.int64(),  # seed of the modification (null for none)
    "extra": pa.string(),  # JSON object with any further hyperparameters
    "eval_data": pa.string(),  # pretrain | task name | theory
    "split": pa.string(),  # validation | test | population
    "metric": pa.string(),  # ppl | bpb | loss | accuracy | ...
    "value": pa.float64(),
    "diverged": pa.bool_(),
}
PROVENANCE_COLUMNS: dict[str, pa.DataType] = {
    "config_hash": pa.string(),
    "git_commit": pa.string(),
    "packages": pa.string(),
}
SCHEMA = pa.schema([pa.field(k, v) for k, v in {**METRIC_COLUMNS, **PROVENANCE_COLUMNS}.items()])

PROVENANCE_PACKAGES = (
    "torch",
    "transformers",
    "tokenizers",
    "datasets",
    "lm-eval",
    "numpy",
    "pandas",
    "pyarrow",
    "snakemake",
)


def metric_row(**fields: Any) -> dict[str, Any]:
    """One tidy row; unknown keys are an error, missing hyperparameters are null."""
    unknown = set(fields) - set(METRIC_COLUMNS)
    if unknown:
        raise KeyError(
            f"unknown metric columns {sorted(unknown)}; expected a subset of {list(METRIC_COLUMNS)}"
        )
    row = {k: None for k in METRIC_COLUMNS}
    row["diverged"] = False
    row.update(fields)
    if isinstance(row["extra"], Mapping):
        row["extra"] = json.dumps(row["extra"], sort_keys=True)
    value = row["value"]
    if value is not None and not math.isfinite(float(value)):
        row["diverged"] = True
    return row


def metrics_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Rows -> DataFrame with exactly the metric columns, typed."""
    import pandas as pd  # here: a job imports this module for `metric_row` long before it writes

    df = pd.DataFrame(list(rows), columns=list(METRIC_COLUMNS))
    table = pa.Table.from_pandas(
        df, schema=pa.schema([pa.field(k, v) for k, v in METRIC_COLUMNS.items()]), preserve_index=False
    )
    return table.to_pandas()


def write_metrics(path: str | Path, rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Write one stage's rows to Parquet atomically and return them."""
    df = metrics_frame(rows)
    write_parquet(path, df)
    return df


def aggregate_metrics(parts: Iterable[str | Path], provenance: Mapping[str, str]) -> pd.DataFrame:
    """Concatenate per-job metric files and stamp provenance columns (a column a part written
    before it existed is null there, e.g. a hub row's `commit`)."""
    import pandas as pd

    frames = [pd.read_parquet(p) for p in parts]
    df = pd.concat(frames, ignore_index=True) if frames else metrics_frame([])
    df = df.reindex(columns=list(METRIC_COLUMNS))
    for col in PROVENANCE_COLUMNS:
        df[col] = provenance[col]
    table = pa.Table.from_pandas(df[list(SCHEMA.names)], schema=SCHEMA, preserve_index=False)
    return table.to_pandas()


def config_hash(config: Mapping[str, Any]) -> str:
    """Stable short hash of a (JSON-serialisable) config."""
    blob = json.dumps(config, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def git_commit(repo: str | Path = ".") -> str:
    """Current commit of the workflow repository, with '-dirty' if it has changes."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=repo,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def package_versions(names: Iterable[str] = PROVENANCE_PACKAGES) -> str:
    """JSON object of installed versions of the packages that determine the numbers."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return json.dumps(versions, sort_keys=True)


def provenance(config: Mapping[str, Any], repo: str | Path = ".") -> dict[str, str]:
    return {
        "config_hash": config_hash(config),
        "git_commit": git_commit(repo),
        "packages": package_versions(),
    }
