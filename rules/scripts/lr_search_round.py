"""Rule lr_search_round (a checkpoint): one round of the adaptive learning-rate search scores the
runs the last round asked for and writes the next round's learning rates (docs/lr-search.md)."""

import json
from pathlib import Path

import pandas as pd

from pipeline.io import write_json
from pipeline.runtime import setup_logging
from pipeline.sweeps import lr_search
from pipeline.sweeps.search_rounds import play_round

setup_logging(snakemake.log[0])
p, wc = snakemake.params.search, snakemake.wildcards
search = lr_search.LRSearch(**p["search"])
previous = json.loads(Path(snakemake.input.previous[0]).read_text()) if snakemake.input.previous else None
runs = pd.concat([pd.read_parquet(f) for f in snakemake.input.runs], ignore_index=True)
state = play_round(search, previous, runs, p["split"], p["metric"])
setting = {
    "checkpoint": wc.checkpoint,
    "task": wc.task,
    "modification": wc.method,
    "lambda_reg": float(wc.lam),
}
write_json(snakemake.output[0], {"setting": setting} | lr_search.state_record(search, state))
