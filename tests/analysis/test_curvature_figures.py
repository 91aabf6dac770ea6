"""The curvature line figures stay page-wide however many pre-training seeds a sweep has."""

import pandas as pd

from pipeline.analysis.curvature_figures import _checkpoints


def test_one_column_per_budget_from_its_first_pretraining_seed():
    lines = pd.DataFrame(
        {
            "checkpoint": ["t-2-s1", "t-2-s0", "t-1-s0", "t-1-s2", "t-4-s3"],
            "budget": [2.0, 2.0, 1.0, 1.0, 4.0],
        }
    )
    assert _checkpoints(lines) == [("t-1-s0", 1.0), ("t-2-s0", 2.0), ("t-4-s3", 4.0)]
