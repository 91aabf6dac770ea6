"""A job on N ranks: `torchrun --standalone --nproc-per-node N` started inside the job.

On SLURM the job is one task holding N GPUs (profiles/slurm; not N tasks of one GPU each: the
executor plugin turns a GPU job's `tasks` into `--ntasks-per-gpu` and would start the whole job
script once per task, snakemake-executor-plugin-slurm issues #316, #459); on a CPU, N gloo
processes share the job's threads. The job's arguments travel as a JSON file; each rank runs the
module's `main`, and rank 0 alone writes the outputs. `--max-restarts 0`: a rank that dies ends
the others (torchrun stops the group) and the job fails with its exit status, never hangs.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from pipeline.io import atomic_path
from pipeline.runtime import pick_device, set_threads, setup_rank_logging

log = logging.getLogger(__name__)


def torchrun_command(ranks: int, *program: str) -> list[str]:
    """The command that runs `program` (`-m module args...` or `script args...`) on `ranks` local
    processes."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",  # a private rendezvous on a free local port: jobs on one node do not collide
        f"--nproc-per-node={ranks}",
        "--max-restarts=0",
        *program,
    ]


def run_on_ranks(module: str, job_json: str, ranks: int, job_file: str | Path, threads: int) -> None:
    """Run `module` on `ranks` processes with `job_json` written to `job_file` as its argument;
    each process runs `threads` CPU threads. Raises if any rank fails."""
    with atomic_path(job_file) as tmp:
        Path(tmp).write_text(job_json)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    command = torchrun_command(ranks, "-m", module, str(job_file))
    log.info("starting %d ranks: %s", ranks, " ".join(command))
    done = subprocess.run(command, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"the {ranks}-rank job ({module}) failed with exit status {done.returncode}; each rank's "
            "messages are above in this log (a rank's failure stops the others)"
        )


def launch_job(module: str, job: Any, job_file: str | Path) -> None:
    """A job record (with `ranks`, `threads`, `to_json`) on its ranks: `module`'s `main` on each,
    with its share of the job's threads."""
    per_rank = replace(job, threads=max(1, job.threads // job.ranks))
    run_on_ranks(module, per_rank.to_json(), job.ranks, job_file, per_rank.threads)


def run_rank(job: Any, execute: Callable[[Any, Any], object], timeout_s: float) -> None:
    """One rank of a job torchrun started: join the process group, log as this rank, run
    `execute(job on this rank's device, Sharded(ranks))`, leave the group."""
    import torch.distributed as dist

    from pipeline.train.distributed import init_ranks
    from pipeline.train.placement import Sharded

    ranks, device = init_ranks(pick_device(job.device), timeout_s)
    setup_rank_logging(ranks.rank)
    set_threads(job.threads)
    try:
        execute(replace(job, device=device), Sharded(ranks))
        ranks.barrier()  # every rank done before any tears its connections down (CI lost a rank at exit)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
