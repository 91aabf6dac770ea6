"""Job runtime set-up shared by the rule scripts: logging, threads, device.

torch is imported where it is used: jobs that only log (theory, figures, metrics) start without it.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import torch


FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# what a job's child processes (the ranks of a sharded job) inherit to log like the job itself: the
# main log as a /proc path (torchrun closes inherited descriptors) and the job's label
TERMINAL_ENV, LABEL_ENV = "OVERTRAIN_TERMINAL", "OVERTRAIN_JOB_LABEL"
# the exit status of a job stopped by Ctrl-C (128 + SIGINT, what a shell reports), and its one line
INTERRUPTED_EXIT = 130
INTERRUPTED = "interrupted (Ctrl-C): rerun snakemake to resume"


class _OwnRecords(logging.Filter):
    """Records of the `pipeline` logger tree at INFO and up: what the main log shows of a job
    (except records logged with extra={"terminal": False})."""

    def filter(self, record: logging.LogRecord) -> bool:
        own = record.name == "pipeline" or record.name.startswith("pipeline.")
        return own and record.levelno >= logging.INFO and getattr(record, "terminal", True)


def _job_label(log_file: Path) -> str:
    """The job's name in the main log: its log path below `logs/`, without `.log`."""
    parts = log_file.with_suffix("").parts
    return "/".join(parts[len(parts) - parts[::-1].index("logs") :]) if "logs" in parts else log_file.stem


def setup_logging(log_file: str | Path | None = None, level: int = logging.INFO) -> None:
    """Send everything a job prints to its log file; the terminal gets only our own log records.

    Without a log file: log records (with timestamps) to stderr. With one, file descriptors 1 and 2
    are redirected to it, so library output (tqdm bars, transformers' "Loading weights", lm-eval's
    per-request bars, C-level prints) lands in the job's log, not in Snakemake's main output. Every
    log record goes to the file; records of the `pipeline` loggers at INFO and up also go to a copy
    of the original stderr, prefixed with the job's name, so the main log shows progress (rate, ETA).
    """
    if not log_file:
        handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
        logging.basicConfig(level=level, format=FORMAT, handlers=handlers, force=True)
        logging.captureWarnings(True)
        return
    global _early_log
    _early_log = None
    log_file = Path(log_file)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    terminal = open(  # open for the life of the process
        os.dup(2), "w", buffering=1, encoding=sys.stderr.encoding or "utf-8", errors="backslashreplace"
    )
    fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout.reconfigure(line_buffering=True)  # keep prints and records in order in the file
    if Path("/proc/self/fd").is_dir():  # Linux
        os.environ[TERMINAL_ENV] = f"/proc/{os.getpid()}/fd/{terminal.fileno()}"
    os.environ[LABEL_ENV] = _job_label(log_file)
    _log_to(terminal, _job_label(log_file), level)
    _handle_uncaught(interrupt_to_terminal=True)


# set by the SIGINT handler: exceptions raised after a Ctrl-C (a library's own error wrapping the
# KeyboardInterrupt, a rank's collective failing as its peer stops) are the interruption too
_interrupted = False
# a rule script's log file between its first import of `pipeline` and its setup_logging
_early_log: Path | None = None


def handle_rule_script_interrupts(log_file: str | Path) -> None:
    """A rule script's Ctrl-C while it still imports (torch, transformers: seconds), before its
    setup_logging: one line too, on stderr and appended to its log file. Called by
    pipeline/__init__.py in the process of Snakemake's `script:` directive."""
    global _early_log
    _early_log = Path(log_file)
    _handle_uncaught(interrupt_to_terminal=True)


def _on_sigint(signum, frame) -> None:
    """Python's own SIGINT handler (raise KeyboardInterrupt), noting that it ran."""
    global _interrupted
    _interrupted = True
    signal.default_int_handler(signum, frame)


def _handle_uncaught(interrupt_to_terminal: bool) -> None:
    """Uncaught exceptions through `_log_uncaught`; a Ctrl-C (SIGINT: Snakemake's process group
    gets it from the terminal) noted, unless SIGINT is ignored or someone else's handler has it."""
    sys.excepthook = _log_uncaught if interrupt_to_terminal else _log_uncaught_rank
    try:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _on_sigint)
    except ValueError:  # not the main thread: signals stay as they are
        pass


def _caused_by_interrupt(value: BaseException | None) -> bool:
    """A KeyboardInterrupt, or an exception raised while handling one."""
    seen = set()
    while value is not None and id(value) not in seen:
        if isinstance(value, KeyboardInterrupt):
            return True
        seen.add(id(value))
        value = value.__cause__ or value.__context__
    return False


def _log_uncaught(kind, value, tb, interrupt_to_terminal: bool = True) -> None:
    """The traceback of a failing job, once in its log and once in the main log.

    An interrupted job (Ctrl-C) logs one line instead (INTERRUPTED) and exits at once with status
    130. By then the KeyboardInterrupt has unwound every `with` and `finally` (temporary outputs
    removed; resume state as last saved); the explicit exit skips only the interpreter's clean-up,
    after which Python's own exit status depends on what was imported (status 1 instead of
    SIGINT once transformers' models are loaded). Before setup_logging (a rule script still
    importing): Python's own report of an error; the interruption's line written directly.
    """
    if not (_interrupted or _caused_by_interrupt(value)):
        if _early_log is not None:
            sys.__excepthook__(kind, value, tb)
        else:
            logging.getLogger("pipeline").critical("uncaught exception", exc_info=(kind, value, tb))
        return
    if _early_log is not None:
        sys.stderr.write(f"{time.strftime('%H:%M:%S')} [{_job_label(_early_log)}] {INTERRUPTED}\n")
        try:
            _early_log.parent.mkdir(parents=True, exist_ok=True)
            with _early_log.open("a") as f:
                f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} WARNING pipeline: {INTERRUPTED}\n")
        except OSError:
            pass
    else:
        logging.getLogger("pipeline").warning(INTERRUPTED, extra={"terminal": interrupt_to_terminal})
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(INTERRUPTED_EXIT)


def _log_uncaught_rank(kind, value, tb) -> None:
    """A rank's `_log_uncaught`: its interruption only in the job's log (the job, torchrun's parent,
    says it in the main log)."""
    _log_uncaught(kind, value, tb, interrupt_to_terminal=False)


def _log_to(terminal, label: str, level: int, prefix: str = "") -> None:
    """Records to stderr (the job's log file); our own INFO records also to `terminal` (the main log)."""
    to_file = logging.StreamHandler(sys.stderr)  # the log file, shared with tqdm's writes
    to_file.setFormatter(logging.Formatter(prefix + FORMAT))
    to_terminal = logging.StreamHandler(terminal)
    to_terminal.addFilter(_OwnRecords())
    label = label.replace("%", "%%")
    to_terminal.setFormatter(logging.Formatter(f"%(asctime)s [{label}] {prefix}%(message)s", "%H:%M:%S"))
    logging.basicConfig(level=level, handlers=[to_file], force=True)
    logging.getLogger().addHandler(to_terminal)
    logging.captureWarnings(True)


def setup_rank_logging(rank: int) -> None:
    """Logging of one rank of a sharded job (started by pipeline/train/launch.py): like the job's
    (`setup_logging`, whose log file and main-log copy it inherits); rank 0 logs at INFO, the other
    ranks warnings and errors only, prefixed with their rank."""
    level = logging.INFO if rank == 0 else logging.WARNING
    try:
        terminal = open(  # noqa: SIM115 (for the life of the process)
            os.environ[TERMINAL_ENV], "a", buffering=1, encoding="utf-8", errors="backslashreplace"
        )
    except (KeyError, OSError):  # not started by a job's script, or no /proc: the log file only
        logging.basicConfig(level=level, format=f"[rank {rank}] {FORMAT}", force=True)
    else:
        prefix = "" if rank == 0 else f"[rank {rank}] "
        _log_to(terminal, os.environ.get(LABEL_ENV, "job"), level, prefix=prefix)
    _handle_uncaught(interrupt_to_terminal=False)


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
    import torch

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


def set_tokenizer_threads(threads: int) -> None:
    """The Rust tokenizers' thread pool (rayon) at the rule's `threads`, not every core: read at the
    pool's first use, so call this before the first batch is encoded."""
    os.environ["RAYON_NUM_THREADS"] = str(max(1, threads))


T = TypeVar("T")
R = TypeVar("R")


def map_cpu_threads(fn: Callable[[T], R], items: Sequence[T], device: torch.device | str) -> list[R]:
    """[fn(x) for x in items], on CPU by torch.get_num_threads() Python threads of one torch thread each.

    Why: torch ops on a small model are too small for intra-op threads to pay off (two 1-thread
    workers evaluate ~15% faster than one 2-thread loop, bench/bench_train_eval.py), and ops
    release the GIL. `fn` must not change shared state. Results keep the order of `items`, so
    callers sum them in a fixed order. On other devices, or with one thread: a plain loop.
    """
    import torch

    workers = min(torch.get_num_threads(), len(items))
    if torch.device(device).type != "cpu" or workers <= 1:
        return [fn(x) for x in items]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # per op; restored below
    pool = ThreadPoolExecutor(workers)
    try:
        return list(pool.map(fn, items))
    finally:
        # on an error or a Ctrl-C, the items not started are dropped, not run to the end
        pool.shutdown(cancel_futures=True)
        torch.set_num_threads(threads)


def pick_device(requested: str = "auto") -> str:
    """'auto' -> cuda when available, else cpu; an explicit 'cuda' without a GPU is an error."""
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("device: 'cuda' was requested but no CUDA device is visible to this job")
    return requested
