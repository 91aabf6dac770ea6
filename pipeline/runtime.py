"""Job runtime set-up shared by the rule scripts: logging, threads, device."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import torch


def setup_logging(log_file: str | Path | None = None, level: int = logging.INFO) -> None:
    """Log lines (with timestamps) to the rule's log file, or to stderr."""
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        handlers = [logging.FileHandler(log_file, mode="w")]
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", handlers=handlers, force=True)
    logging.captureWarnings(True)
    if log_file:  # the traceback of a failing job in its log too (Snakemake points users there)
        def log_uncaught(kind, value, tb):
            logging.getLogger("pipeline").critical("uncaught exception", exc_info=(kind, value, tb))
            sys.__excepthook__(kind, value, tb)

        sys.excepthook = log_uncaught


def set_threads(threads: int | None) -> int:
    """Set torch's intra-op threads to the rule's `threads`, capped by a SLURM allocation.

    Also flushes denormals on CPU: tiny models' softmax tails otherwise run several times
    slower (bench/bench_train_eval.py).
    """
    torch.set_flush_denormal(True)
    n = threads or 1
    slurm_cpus = os.environ.get("SLURM_CPUS_PER_TASK")
    if slurm_cpus:
        n = min(n, int(slurm_cpus))
    torch.set_num_threads(max(1, n))
    log = logging.getLogger(__name__)
    log.info("torch threads: %d (rule threads %s, SLURM_CPUS_PER_TASK %s)", torch.get_num_threads(), threads, slurm_cpus or "unset")
    return torch.get_num_threads()


def pick_device(requested: str = "auto") -> str:
    """'auto' -> cuda when available, else cpu; an explicit 'cuda' without a GPU is an error."""
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("device: 'cuda' was requested but no CUDA device is visible to this job")
    return requested
