"""Compare two studies' metrics.parquet bit for bit (value columns), provenance columns aside.

For refactors that must not change behaviour: run the same config at two commits and compare.

    python bench/compare_metrics.py OLD/metrics.parquet NEW/metrics.parquet
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import pandas as pd

PROVENANCE = ("config_hash", "git_commit", "packages")


def _sorted(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    return df.sort_values(keys, na_position="first", kind="stable").reset_index(drop=True)


def compare(old: pd.DataFrame, new: pd.DataFrame) -> dict[str, object]:
    """Row sets, then every non-provenance column: exact equality (NaN equals NaN)."""
    columns = [c for c in old.columns if c not in PROVENANCE]
    keys = [c for c in columns if c not in ("value", "diverged", "extra")]
    old, new = _sorted(old[columns], keys), _sorted(new[columns], keys)
    report: dict[str, object] = {"rows": (len(old), len(new)), "columns": columns}
    if len(old) != len(new) or list(new.columns) != columns:
        report["identical"] = False
        return report
    values_equal = np.array_equal(old["value"].to_numpy(), new["value"].to_numpy(), equal_nan=True)
    report["value_bits_equal"] = values_equal and bool(
        (old["value"].to_numpy().view(np.int64) == new["value"].to_numpy().view(np.int64)).all()
    )
    for col in columns:
        if col == "value":
            continue
        same = old[col].equals(new[col])
        report[f"{col}_equal"] = same
        if not same and col == "extra":
            diff = [
                (json.loads(a), json.loads(b))
                for a, b in zip(old[col], new[col])
                if a != b and isinstance(a, str) and isinstance(b, str)
            ]
            a, b = diff[0]
            report["extra_first_difference"] = {
                k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)
            }
    report["identical"] = all(v for k, v in report.items() if k.endswith("_equal"))
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    args = parser.parse_args()
    report = compare(pd.read_parquet(args.old), pd.read_parquet(args.new))
    for key, value in report.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
