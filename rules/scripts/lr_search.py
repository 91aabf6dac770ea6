"""Rule lr_search: every search's path (one row per evaluated learning rate) and its cost against
the full grid: runs, rounds and the latency the rounds add."""

import json
import logging
from pathlib import Path

from pipeline.io import write_parquet
from pipeline.layout import FINETUNE_BENCHMARK, format_hparam, study_path
from pipeline.runtime import setup_logging
from pipeline.sweeps import lr_search
from pipeline.sweeps.search_rounds import benchmark_seconds, cost_table, path_table

setup_logging(snakemake.log[0])
p = snakemake.params
records = [json.loads(Path(f).read_text()) for f in snakemake.input]
search = lr_search.LRSearch(**p.search["search"])


def runtime_of(setting: dict, lr: float, seed: int) -> float:
    """A run's seconds, from its benchmark file."""
    fields = {"checkpoint": setting["checkpoint"], "task": setting["task"], "method": setting["modification"]}
    fields["seed"] = seed
    lam = format_hparam(setting["lambda_reg"])
    return benchmark_seconds(
        study_path(snakemake.config["study"], FINETUNE_BENCHMARK, **fields, lr=format_hparam(lr), lam=lam)
    )


cost = cost_table(records, search.grid_size, list(p.seeds), runtime_of)
write_parquet(snakemake.output.path, path_table(records))
write_parquet(snakemake.output.cost, cost)
logging.info("searches:\n%s", cost.to_string(index=False))
logging.info(
    "%d fine-tuning runs vs %d for the full grid (%.0f%%); at most %d rounds, adding %.0f s of latency",
    cost["runs"].sum(),
    cost["grid_runs"].sum(),
    100 * cost["runs"].sum() / cost["grid_runs"].sum(),
    cost["rounds"].max(),
    cost["added_latency_s"].max(),
)
for _, row in cost[~cost["bracketed"]].iterrows():
    logging.warning(
        "%s %s λ %g: the optimum is not bracketed; the best rate %g is the edge the search could reach "
        "(finetune.learning_rates: move the bracket, raise max_widenings, or widen the grid)",
        row["checkpoint"],
        row["task"],
        row["lambda_reg"],
        row["chosen"],
    )
