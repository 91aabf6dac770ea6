"""The adaptive learning-rate search against the full grid, on the default study's checkpoints and tasks.

The full grid: the default grid (3e-3 ... 0.3, half a decade apart) with two log-spaced rates
added between neighbours (13 rates, ~1/6 decade apart) x the default seeds (0, 1), every run through the
workflow's own fine-tuning rule (runs the default study already has are reused). The search:
`{grid: <those 13>, points: 3}`, the same `advance` the workflow's rounds call, replayed on seed 0's
scores; seed 1 then runs at its choice. Printed per (checkpoint, task): the grid's argmax (2-seed
mean), the search's choice, whether they agree, and the runs each needs.

A different choice counts as agreeing within seed noise when it is the argmax's lattice neighbour
and their 2-seed means differ by less than the larger seed sd of the two.

    python bench/bench_lr_search.py [--cores 2]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import yaml

from pipeline import layout
from pipeline.layout import format_hparam
from pipeline.models.checkpoints import study_checkpoints
from pipeline.sweeps import lr_search
from pipeline.sweeps.selection import selection_scores

ROOT = Path(__file__).resolve().parents[1]


def full_grid(default: list[float], between: int = 2) -> list[float]:
    """The default grid with `between` log-spaced rates added between each neighbouring pair."""
    added = [
        a * (b / a) ** (k / (between + 1))
        for a, b in zip(default, default[1:])
        for k in range(1, between + 1)
    ]
    return sorted(float(format_hparam(x)) for x in list(default) + added)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cores", default="2")
    args = ap.parse_args()
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    ft, seeds = cfg["finetune"], cfg["finetune"]["seeds"]
    grid = full_grid(ft["learning_rates"])
    names = [s.name for s in study_checkpoints(cfg)]
    settings = [(c, t) for c in names for t in ft["tasks"]]
    parts = [
        layout.study_path(
            cfg["study"], layout.FINETUNE_PART, checkpoint=c, task=t, lr=format_hparam(lr), lam="0", seed=s
        )
        for c, t in settings
        for lr in grid
        for s in seeds
    ]
    missing = [p for p in parts if not Path(ROOT, p).is_file()]
    n = f"{len(grid)} rates x {len(seeds)} seeds x {len(settings)} (checkpoint, task)"
    print(f"full grid: {n} = {len(parts)} runs")
    print(f"rates: {grid}")
    print(f"{len(parts) - len(missing)} exist (the default study's), running {len(missing)} ...", flush=True)
    t0 = time.perf_counter()
    if missing:
        cmd = [sys.executable, "-m", "snakemake", "--cores", args.cores, "--quiet", "rules", "--", *missing]
        subprocess.run(cmd, cwd=ROOT, check=True)
    print(f"ran them in {time.perf_counter() - t0:.0f} s\n")

    runs = pd.concat([pd.read_parquet(Path(ROOT, p)) for p in parts], ignore_index=True)
    scores = selection_scores(runs[runs["modification"] == "sft"])
    search = lr_search.from_config({"grid": grid, "points": 3})
    rows = []
    for (checkpoint, task), g in scores.groupby(["checkpoint", "task"], sort=False):
        stats = g.groupby("learning_rate")["score"].agg(["mean", "std"])
        argmax = stats["mean"].idxmin()
        seed0 = g[g["seed"] == seeds[0]].set_index("learning_rate")["score"]
        state = lr_search.replay(search, lambda lr: seed0[lr])
        chosen = search.lattice[state.best]
        neighbour = abs(grid.index(chosen) - grid.index(argmax)) == 1
        gap = abs(stats.loc[chosen, "mean"] - stats.loc[argmax, "mean"])
        noise = max(stats.loc[chosen, "std"], stats.loc[argmax, "std"])
        agree = (
            "equal"
            if chosen == argmax
            else ("neighbour, within seed noise" if neighbour and gap < noise else "differs")
        )
        rows.append(
            {
                "checkpoint": checkpoint,
                "task": task,
                "grid argmax": argmax,
                "search": chosen,
                "agreement": agree,
                "gap": gap,
                "seed sd": noise,
                "bracketed": lr_search.bracketed(search, state),
                "search runs": len(state.scores) + len(seeds) - 1,
                "grid runs": len(grid) * len(seeds),
                "rounds": state.round + 1 + (len(seeds) > 1),
            }
        )
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    runs_search, runs_grid = table["search runs"].sum(), table["grid runs"].sum()
    bound = search.runs_bound + len(seeds) - 1
    print(
        f"\nsearch: {runs_search} runs vs {runs_grid} for the full grid ({runs_search / runs_grid:.0%}); "
        f"at most {(table['search runs'] / table['grid runs']).max():.0%} per (checkpoint, task); "
        f"its bound: {bound} runs ({bound / (len(grid) * len(seeds)):.0%})"
    )
    print("agreement: " + ", ".join(f"{k} {v}" for k, v in table["agreement"].value_counts().items()))


if __name__ == "__main__":
    main()
