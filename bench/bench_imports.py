"""Import time of a fine-tuning job's modules, and of transformers' schedules that
pipeline/train/schedules.py replaces: each a fresh interpreter, best of `--repeats`, side by side.

    python bench/bench_imports.py
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

CONTENDERS = {
    "torch": "import torch",
    "transformers.optimization (schedules)": "import torch; import transformers.optimization",
    "pipeline.train.schedules": "import torch; import pipeline.train.schedules",
    "fine-tuning job (pipeline.train.finetune_job)": "import pipeline.train.finetune_job",
}


def seconds(code: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    for name, code in CONTENDERS.items():
        best = min(seconds(code) for _ in range(args.repeats))
        print(f"{name:48s} {best:6.2f} s")


if __name__ == "__main__":
    main()
