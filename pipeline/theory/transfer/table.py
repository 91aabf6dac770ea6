"""The transfer stage's own tidy table, results/<study>/theory/transfer.parquet: one row per number.

A row is one expected quantity (`metric`) of one method at one grid point, from one estimator:
`closed_form` (an expectation formula; `limit` says whether it is exact at this finite n, d or an
n, d → ∞ limit; `formula` cites it) or `simulation` (a mean over `instances` independent draws with
its standard error `risk_se`; `solver` says how each draw was solved: linear algebra, gradient
descent, or a theorem's per-draw limit point evaluated on the same draws). docs/theory.md lists the
experiments and metrics.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.io import atomic_path

TRANSFER_COLUMNS: dict[str, pa.DataType] = {
    "study": pa.string(),
    "paper": pa.string(),  # features_are_fate | linear_teachers | bridge (the one-layer vs deep result)
    "experiment": pa.string(),  # the figure-level experiment, e.g. faf_grid, lt_depth, overtraining
    "variant": pa.string(),  # a setting within it (covariance alignment, fine-tuning regime, ...) or null
    "method": pa.string(),  # scratch | linear_transfer | ridge_transfer | finetune | finetune_frozen_first
    "estimator": pa.string(),  # closed_form | simulation
    "limit": pa.string(),  # closed_form: exact (finite n, d) | asymptotic (n, d -> inf); simulation: null
    "formula": pa.string(),  # closed_form: the equation / theorem it evaluates
    "solver": pa.string(),  # simulation: linear_algebra | gradient_descent | limit_point
    "metric": pa.string(),  # risk | transferability | pretrain_loss | theorem_gap
    "depth": pa.int64(),  # network depth L (null: L -> infinity, or not a network)
    "d": pa.int64(),  # input dimension
    "n": pa.int64(),  # target samples (null: the population gradient)
    "theta": pa.float64(),  # source-target angle, radians
    "sigma": pa.float64(),  # label-noise std
    "ridge": pa.float64(),  # ridge lambda (null unless ridge transfer)
    "target_norm": pa.float64(),  # ||theta_T|| (linear teachers; 1 for unit teachers)
    "lr": pa.float64(),  # gradient-descent step size (null unless solver = gradient_descent)
    "steps": pa.int64(),  # gradient-descent steps taken to convergence
    "pretrain_time": pa.float64(),  # bridge: pre-training (gradient-flow) time of the start point
    "features": pa.int64(),  # bridge: features learned at that time (t_n -> n); null between
    "seed": pa.int64(),  # the seed whose draws a simulation used (bridge: the pre-training seed)
    "risk": pa.float64(),  # the value of `metric` (expected excess test risk for metric = risk)
    "risk_se": pa.float64(),  # standard error of a simulated mean; null for closed forms
    "instances": pa.int64(),  # draws a simulated mean averages; null for closed forms
}
SCHEMA = pa.schema([pa.field(k, v) for k, v in TRANSFER_COLUMNS.items()])


def block(n_rows: int | None = None, **cols: object) -> pd.DataFrame:
    """Rows from columns that are scalars or arrays broadcast together (missing columns are null)."""
    arrays = {k: np.asarray(v) for k, v in cols.items() if v is not None}
    shape = np.broadcast_shapes(*(a.shape for a in arrays.values()))
    size = int(np.prod(shape)) if n_rows is None else n_rows
    data = {k: np.broadcast_to(a, shape).reshape(size) for k, a in arrays.items()}
    return pd.DataFrame(data, columns=[c for c in TRANSFER_COLUMNS if c in data])


def mean_se(samples: np.ndarray, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error of the mean over `axis` (the draws)."""
    k = samples.shape[axis]
    return samples.mean(axis=axis), samples.std(axis=axis, ddof=1) / np.sqrt(k)


def transfer_frame(frames: Iterable[pd.DataFrame], study: str) -> pd.DataFrame:
    """Blocks -> one DataFrame with exactly TRANSFER_COLUMNS, typed (absent values null)."""
    df = pd.concat([f for f in frames if len(f)], ignore_index=True)
    df = df.reindex(columns=list(TRANSFER_COLUMNS)).assign(study=study)
    for col, typ in TRANSFER_COLUMNS.items():
        if pa.types.is_integer(typ):
            df[col] = df[col].astype("Int64")
        elif pa.types.is_floating(typ):
            df[col] = df[col].astype("float64")
        else:
            df[col] = df[col].astype("object").where(df[col].notna(), None)
    return pa.Table.from_pandas(df, schema=SCHEMA, preserve_index=False).to_pandas()


def write_transfer(path: str | Path, df: pd.DataFrame) -> None:
    """Write the table atomically (pipeline.io.atomic_path) with exactly its arrow schema (an all-null
    column keeps its type)."""
    table = pa.Table.from_pandas(
        df.reindex(columns=list(TRANSFER_COLUMNS)), schema=SCHEMA, preserve_index=False
    )
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
