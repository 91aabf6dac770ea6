"""Wall time of the whole theory stage (pipeline.theory.stage.run_theory) on the default config.

Target: <= 60 s on 2 CPU cores. Usage: .venv/bin/python bench/bench_theory.py [--repeats N] [--config PATH]
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import time
from pathlib import Path

import yaml

from pipeline.theory.stage import run_theory

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument(
        "--config", default=ROOT / "config.yaml", type=Path, help="YAML file with a `theory:` section"
    )
    ap.add_argument("--repeats", default=3, type=int)
    ap.add_argument("--verbose", action="store_true", help="show the stage's progress log")
    args = ap.parse_args()
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(asctime)s %(message)s"
    )
    cfg = yaml.safe_load(args.config.read_text())["theory"]
    times, rows = [], 0
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        rows = len(run_theory(cfg, study="bench"))
        times.append(time.perf_counter() - t0)
    print(
        f"theory stage: d = {cfg['d']}, {len(cfg['spectra'])} spectra, {len(cfg['seeds'])} seeds, "
        f"{len(cfg['perturbation']['gammas'])} gammas, {len(cfg['finetune']['lambdas'])} lambdas "
        f"-> {rows} rows"
    )
    print(
        f"wall time over {args.repeats} runs: best {min(times):.2f} s, mean {sum(times) / len(times):.2f} s "
        f"(target <= 60 s) on {platform.processor() or platform.machine()}, {os.cpu_count()} cpus"
    )


if __name__ == "__main__":
    main()
