"""Wall time of a Snakemake dry run of a paper-scale grid.

3 sizes (olmo-15m/30m/90m) x 6 budgets (4B..128B tokens, Appendix C.1) x 10 gammas x 3 seeds:
18 pre-training jobs and 18 evaluate jobs (each evaluates its checkpoint's 31 cells), and the
fine-tuning sweep: 10 tasks (the 7 embedded ones and the 3 instruction-tuning datasets, read from
the hub) x Table 4's 27 learning rates x 3 seeds x lambdas, one job each (14,580 jobs per lambda),
plus aggregation; then the same DAG through the cluster profile
(profiles/slurm, device cuda: GPU resources, job groups, attempt-scaled resources are evaluated).
usage: python bench/bench_dryrun.py [--lambdas 0 0.1]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


TASKS = ["code", "gsm8k", "siqa", "boolq", "rte", "sst2", "mr", "hh", "tulu", "alpaca"]
HUB_ONLY = (
    "hh",
    "tulu",
    "alpaca",
)  # no embedded copy: the dry run names their hub ids (nothing is downloaded)


def paper_scale_config(lambdas: list[float] = (0.0,), tasks: list[str] = TASKS) -> dict:
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    cfg["study"] = "bench-paper-scale"
    cfg["pretrain"].update(
        presets=["olmo-15m", "olmo-30m", "olmo-90m"],
        budgets=[int(b * 1e9) for b in (4, 8, 16, 32, 64, 128)],
        seq_len=1024,
        batch_size=256,
        lr=3e-4,
    )
    cfg["perturb"].update(gammas=[0.25, 0.5, 1, 1.5, 2, 3, 4, 5, 6, 8], seeds=[0, 1, 2])
    cfg["tokenizer"].update(vocab_size=50304)
    cfg["finetune"]["task_data"] = {t: {"source": "hub"} for t in tasks if t in HUB_ONLY}
    cfg["finetune"].update(
        tasks=list(tasks),
        learning_rates="paper",
        seeds=[0, 1, 2],
        seeds_at="all",
        grid_per_job=False,  # one job per run, as on GPUs (device cuda: auto's choice too)
        lambdas=list(lambdas),
        batch_size=64,
        max_steps=None,
        seq_len=1024,
    )
    return cfg


def dry_run(config: Path, *extra: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-n",
        "--cores",
        "all",
        "--configfile",
        str(config),
        "--quiet",
        "rules",
        *extra,
    ]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if res.returncode != 0:
        sys.exit(res.stdout[-2000:] + res.stderr[-3000:])
    return seconds, res.stdout.strip()


def search_dry_run(lambdas: list[float], tasks: list[str]) -> None:
    """The paper-scale study with the search instead of the grid: the dry run states the search's
    upper bound of jobs against the grid's and plans its first round."""
    cfg = paper_scale_config(lambdas, tasks)
    cfg["finetune"].update(learning_rates={"search": {"grid": "paper", "points": 4}}, seeds_at=None)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(yaml.safe_dump(cfg))
        cmd = [sys.executable, "-m", "snakemake", "-n", "--cores", "all", "--configfile", str(path)]
        res = subprocess.run([*cmd, "--quiet", "rules"], cwd=ROOT, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(res.stdout[-2000:] + res.stderr[-3000:])
    out = res.stdout + res.stderr
    print("\n".join(line for line in out.splitlines() if line.startswith("finetune.learning_rates.search")))
    print("first round of the search:")
    print(res.stdout.strip())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--lambdas",
        type=float,
        nargs="+",
        default=[0.0],
        help="proximal strengths (each adds 14,580 fine-tuning jobs)",
    )
    ap.add_argument(
        "--tasks", nargs="+", default=TASKS, help="fine-tuning tasks (each adds 1,458 jobs per lambda)"
    )
    ap.add_argument(
        "--search",
        action="store_true",
        help="also the adaptive search over Table 4's grid (4 coarse points): its bound and its first round",
    )
    args = ap.parse_args()
    if args.search:
        search_dry_run(args.lambdas, args.tasks)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(yaml.safe_dump(paper_scale_config(args.lambdas, args.tasks)))
        seconds, jobs = dry_run(path)
        profile_seconds, _ = dry_run(
            path, "--workflow-profile", str(ROOT / "profiles" / "slurm"), "--config", "device=cuda"
        )
    print(jobs)
    print(f"dry run of the paper-scale grid: {seconds:.1f} s")
    print(f"dry run of the paper-scale grid through profiles/slurm (device cuda): {profile_seconds:.1f} s")


if __name__ == "__main__":
    main()
