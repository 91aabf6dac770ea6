"""Job runtime set-up shared by the rule scripts: logging, threads, device."""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import torch


def setup_logging(log_file: str | Path | None = None, level: int = logging.INFO) -> None:
    """Log lines (with timestamps) to the rule's log file, or to stderr."""
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        handlers = [logging.FileHandler(log_file, mode="w")]
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", handlers=handlers, force=True
    )
    logging.captureWarnings(True)
    if log_file:  # the traceback of a failing job in its log too (Snakemake points users there)

        def log_uncaught(kind, value, tb):
            logging.getLogger("pipeline").critical("uncaught exception", exc_info=(kind, value, tb))
            sys.__excepthook__(kind, value, tb)

        sys.excepthook = log_uncaught


# glibc mallopt parameters
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory(mmap_threshold: int = 32 << 20, trim_threshold: int = 128 << 20) -> bool:
    """Make glibc's malloc reuse freed tensor memory instead of returning it to the kernel.

    Why: by default a freed block of more than a few MB goes back to the kernel, and the next
    tensor of that size costs a page fault per 4 KiB page. A forward pass of the tiny model on a
    64x128 batch took ~5,800 page faults; with blocks up to `mmap_threshold` (32 MiB, glibc's
    maximum) kept in the heap and up to `trim_threshold` of free heap top kept, none, and the
    pass is ~25% faster on one thread (bench/bench_train_eval.py). True if applied (glibc only).
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(
            libc.mallopt(_M_TRIM_THRESHOLD, trim_threshold)
        )
    except (OSError, AttributeError):
        return False


def set_threads(threads: int | None) -> int:
    """Set torch's intra-op threads to the rule's `threads`, capped by a SLURM allocation.

    Also flushes denormals on CPU (tiny models' softmax tails otherwise run several times
    slower) and keeps freed memory in the process (`keep_freed_memory`); bench/bench_train_eval.py.
    """
    torch.set_flush_denormal(True)
    keep_freed_memory()
    n = threads or 1
    slurm_cpus = os.environ.get("SLURM_CPUS_PER_TASK")
    if slurm_cpus:
        n = min(n, int(slurm_cpus))
    torch.set_num_threads(max(1, n))
    log = logging.getLogger(__name__)
    log.info(
        "torch threads: %d (rule threads %s, SLURM_CPUS_PER_TASK %s)",
        torch.get_num_threads(),
        threads,
        slurm_cpus or "unset",
    )
    return torch.get_num_threads()


T = TypeVar("T")
R = TypeVar("R")


def map_cpu_threads(fn: Callable[[T], R], items: Sequence[T], device: torch.device | str) -> list[R]:
    """[fn(x) for x in items], on CPU by torch.get_num_threads() Python threads of one torch thread each.

    Why: torch ops on a small model are too small for intra-op threads to pay off (two 1-thread
    workers evaluate ~15% faster than one 2-thread loop, bench/bench_train_eval.py), and ops
    release the GIL. `fn` must not change shared state. Results keep the order of `items`, so
    callers sum them in a fixed order. On other devices, or with one thread: a plain loop.
    """
    workers = min(torch.get_num_threads(), len(items))
    if torch.device(device).type != "cpu" or workers <= 1:
        return [fn(x) for x in items]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # per op; restored below
    try:
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(fn, items))
    finally:
        torch.set_num_threads(threads)


def pick_device(requested: str = "auto") -> str:
    """'auto' -> cuda when available, else cpu; an explicit 'cuda' without a GPU is an error."""
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("device: 'cuda' was requested but no CUDA device is visible to this job")
    return requested
