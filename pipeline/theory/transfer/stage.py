"""The transfer stage: "Features are fate" (arXiv:2410.08194) and "Fine-tuning with linear teachers"
(arXiv:2107.01641) reproduced with exact finite-sample expectations checked by simulation, and the
one-layer vs deep bridge to the main paper's Section 4.

`run_transfer(theory_cfg, study)` checks `theory.transfer` and runs seven experiments, logging each
one's time, and returns the rows of results/<study>/theory/transfer.parquet (table.py):

* faf_grid, faf_ridge, faf_deep (faf_runs.py): scratch, linear transfer and depth-1 fine-tuning
  over (n, θ, σ) (their Figs 1, 3, 5); ridge transfer vs λ (Fig. 2, Thm 3.8); a depth-L network
  fine-tuned by gradient descent next to linear teachers' Thm 5.2 (their Thm 3.9 at depth 2);
* lt_alignment, lt_depth, lt_frozen (lt_runs.py): covariance alignment (Fig. 1), depth and the
  O(η) gap of GD to Thm 5.2 (Fig. 2a), frozen first layer (Fig. 3, Thm 5.5);
* overtraining (bridge.py): the pre-training loss after fine-tuning vs pre-training time,
  one layer (an exact, monotone mixture) vs the two-layer network (docs/theory.md).

Linear algebra runs with one BLAS thread: the work is thousands of small products, for which extra
threads only wait (and on a busy machine make the stage several times slower).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from threadpoolctl import threadpool_limits

from pipeline.theory.transfer.bridge import overtraining
from pipeline.theory.transfer.config import check_transfer
from pipeline.theory.transfer.faf_runs import faf_deep, faf_grid, faf_ridge
from pipeline.theory.transfer.lt_runs import lt_alignment, lt_depth, lt_frozen
from pipeline.theory.transfer.table import transfer_frame

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)


def run_transfer(theory: Mapping[str, Any], study: str) -> pd.DataFrame:
    """The whole transfer stage from the `theory` section (theory.transfer checked first); its rows."""
    check_transfer(theory["transfer"], theory)
    c = theory["transfer"]
    seed, gd = c["seed"], c["gd"]
    faf, lt = c["features_are_fate"], c["linear_teachers"]
    parts = (
        ("faf_grid", lambda: faf_grid(faf, seed)),
        ("faf_ridge", lambda: faf_ridge(faf["ridge"], faf["d"], faf["instances"], seed)),
        ("faf_deep", lambda: faf_deep(faf["deep"], faf["d"], gd, seed)),
        ("lt_alignment", lambda: lt_alignment(lt["alignment"], seed)),
        ("lt_depth", lambda: lt_depth(lt["depth"], gd, seed)),
        ("lt_frozen", lambda: lt_frozen(lt["frozen"], gd, seed)),
        ("overtraining", lambda: overtraining(theory, c["overtraining"], gd, seed)),
    )
    t_all, frames = time.perf_counter(), []
    for name, run in parts:
        t0 = time.perf_counter()
        with threadpool_limits(limits=1, user_api="blas"):
            rows = run()
        frames += rows
        n_rows = sum(len(r) for r in rows)
        log.info("transfer: %s done in %.1fs (%d rows)", name, time.perf_counter() - t0, n_rows)
    df = transfer_frame(frames, study)
    log.info("transfer: stage done in %.1fs, %d rows", time.perf_counter() - t_all, len(df))
    return df
