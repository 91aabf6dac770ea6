"""Warm start of a local run's jobs: one server process imports the heavy libraries once, and each
rule script's process hands its job to a fork of it.

Why: a job of a small study is mostly start-up. Importing torch, transformers' model code (which
pulls in torch._dynamo, torch.distributed.tensor, sympy, scipy), pyarrow and pandas costs every
fine-tuning job about 4 s of CPU on the 2-core machine, more than half its 100 steps
(bench/bench_startup.py). A fork of a process that has already imported them starts in
milliseconds; the fork copies memory pages only where they are written.

How (Linux, Snakemake's local executor; `warm_start: false` turns it off):
- the Snakefile's onstart runs `start`: a server process (`serve`) imports PRELOAD, then listens on
  a Unix socket in a private temporary folder; its path goes to the jobs in WARM_ENV;
- a rule script imports `pipeline` first; pipeline/__init__.py calls `hand_off`, which sends the
  server its argv, sys.path, working directory, environment and standard descriptors, then waits;
- the server forks; the child takes the job's descriptors, folder, environment (without WARM_ENV,
  so it runs the job itself) and thread counts, and runs the same script file as `__main__`, with
  the pipeline's modules imported afresh (each job runs the code on disk, as a fresh process would);
- the job's process forwards SIGINT / SIGTERM / SIGHUP to the child's process group and exits with
  the child's status; when the job's process is gone (killed), the server kills the child's group.

Without a server (another host, a container, a different interpreter, a server still importing,
an environment that differs from the server's beyond what Snakemake sets per job, SLURM jobs),
`hand_off` returns and the job runs in its own process. Snakemake's `benchmark:` files record the
job's wall time as before, but its CPU time and memory are the waiting process's: the work runs in
the server's child (`warm_start: false` to measure those).
"""

from __future__ import annotations

import os
import pickle
import selectors
import signal
import socket
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from pipeline.runtime import INTERRUPTED_EXIT

if TYPE_CHECKING:
    import subprocess

WARM_ENV = "OVERTRAIN_WARM_SOCKET"
# the libraries the rule scripts import (torch and transformers' model code: every training,
# evaluation and curvature job; pyarrow, pandas, scipy, matplotlib, seaborn: tables and figures;
# lm-eval: the benchmark suite)
PRELOAD = (
    "torch",
    "transformers.modeling_utils",
    "transformers.models.olmo2.modeling_olmo2",
    "peft",
    "pyarrow.parquet",
    "pandas",
    "scipy.stats",
    "matplotlib.pyplot",
    "seaborn",
    "lm_eval.evaluator",
    "threadpoolctl",
)
# what Snakemake sets in each job's environment (snakemake/shell.py): the thread counts of the
# linear-algebra libraries, which the child applies (`_apply_threads`), and the temporary folder;
# what the shell that runs the job's command sets or unsets (bash drops PS1 and PS2 when not
# interactive)
PER_JOB_ENV = frozenset(
    {
        "OMP_NUM_THREADS",
        "GOTO_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "MKL_NUM_THREADS",
        "VECLIB_MAXIMUM_THREADS",
        "NUMEXPR_NUM_THREADS",
        "TMPDIR",
        "TMP",
        "TEMPDIR",
        "TEMP",
        "_",
        "SHLVL",
        "PWD",
        "OLDPWD",
        "PS1",
        "PS2",
        WARM_ENV,
    }
)
_HEADER = struct.Struct("!Q")  # the byte length of one pickled message
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def available() -> str | None:
    """Why warm start cannot run on this machine, or None: it forks, and passes descriptors over a
    Unix socket (Linux; macOS frameworks are not safe to fork once loaded)."""
    if not sys.platform.startswith("linux"):
        return f"needs Linux (this is {sys.platform})"
    if not hasattr(socket, "send_fds"):
        return "needs socket.send_fds (Python 3.9+)"
    return None


def _send(conn: socket.socket, message: object) -> None:
    data = pickle.dumps(message)
    conn.sendall(_HEADER.pack(len(data)) + data)


def _recv_exact(conn: socket.socket, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = conn.recv(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _recv(conn: socket.socket) -> object | None:
    """One message, or None when the peer has closed the connection."""
    header = _recv_exact(conn, _HEADER.size)
    if header is None:
        return None
    data = _recv_exact(conn, _HEADER.unpack(header)[0])
    return None if data is None else pickle.loads(data)


def _interpreter() -> tuple[str, str, int, str]:
    """What a job's process must share with the server for the fork to stand in for it: the
    interpreter, its environment, its version, and the mount namespace (not a container's)."""
    namespace = os.readlink("/proc/self/ns/mnt") if os.path.exists("/proc/self/ns/mnt") else ""
    return os.path.realpath(sys.executable), os.path.realpath(sys.prefix), sys.hexversion, namespace


# --- the job's side ------------------------------------------------------------------------------


def hand_off(main: ModuleType) -> None:
    """Run this rule script in a fork of the warm server, wait for it, exit with its status.

    Returns (the job runs here) when no server is announced in WARM_ENV or it does not take the
    job. `main` is the script's `__main__` module (Snakemake's preamble sets `__real_file__`, the
    script file it runs). Signals that arrive meanwhile go to the job: forwarded once it runs,
    raised here again if it runs here.
    """
    path = os.environ.get(WARM_ENV)
    script = getattr(main, "__real_file__", None)
    if not path or not script:
        return
    child: list[int] = []  # the job's process group, once the server has forked it
    pending: list[int] = []
    original = {s: signal.getsignal(s) for s in _SIGNALS}
    for signum in _SIGNALS:
        signal.signal(signum, lambda s, _frame: _forward(child[0], s) if child else pending.append(s))
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        request = {
            "interpreter": _interpreter(),
            "script": os.path.abspath(script),
            "argv": sys.argv,
            "path": sys.path,
            "cwd": os.getcwd(),
            "env": dict(os.environ),
            "umask": _umask(),
        }
        socket.send_fds(conn, [b"j"], [0, 1, 2])
        _send(conn, request)
        reply = _recv(conn)
    except OSError:  # no server on this host (stopped, another machine, a container)
        reply = None
    if not isinstance(reply, dict) or "pid" not in reply:  # refused: the job runs here
        conn.close()
        for signum, handler in original.items():
            signal.signal(signum, handler)
        for signum in pending:
            os.kill(os.getpid(), signum)
        return
    child.append(reply["pid"])
    for signum in pending:
        _forward(child[0], signum)
    status = _recv(conn)
    if not isinstance(status, dict):
        sys.stderr.write(f"warm start: the server ended before job process {child[0]} reported its exit\n")
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status["exit"])


def _forward(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# --- the server's side ---------------------------------------------------------------------------


def serve(path: Path, parent: int, preload: tuple[str, ...] = PRELOAD) -> None:
    """Import `preload`, listen on `path`, fork a child for each job, report each child's exit.

    One Python thread only (a fork copies just the calling thread; the libraries' own native pools,
    OpenBLAS's and jemalloc's, have fork handlers). Ends when `parent` (the Snakemake process) is
    gone or on SIGTERM.
    """
    import gc
    import importlib

    before = {k: v for k, v in os.environ.items() if k not in PER_JOB_ENV}  # what the jobs' must match
    for name in preload:
        try:
            importlib.import_module(name)
        except ImportError as error:  # not installed here: the jobs that use it import it themselves
            print(f"warm start: {name} not preloaded ({error})", flush=True)
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].switch_backend("Agg")  # no display in a job
    gc.freeze()  # the imported objects stay out of the forks' collections: their pages stay shared
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    server = os.getpid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ready = path.with_name(path.name + ".tmp")
    listener.bind(str(ready))
    listener.listen(64)
    os.replace(ready, path)  # jobs connect only once everything is imported
    wake, woken = socket.socketpair()  # a finished child wakes the loop at once (SIGCHLD)
    woken.setblocking(False)
    signal.set_wakeup_fd(woken.fileno())
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake, selectors.EVENT_READ)
    selector.register(woken, selectors.EVENT_READ)  # never readable: listed so that a child closes it
    children: dict[int, socket.socket] = {}  # pid -> the connection of its job's process
    # what the imports set (torch: TORCHINDUCTOR_CACHE_DIR, ...): a job's own imports would set it too
    added = {k: v for k, v in os.environ.items() if k not in PER_JOB_ENV and before.get(k) != v}
    try:
        while not stopping and os.getppid() == parent:  # parent gone: Snakemake was killed
            for key, _events in selector.select(timeout=0.5):
                if key.fileobj is wake:
                    wake.recv(4096)
                elif key.fileobj is listener:
                    _accept(listener, selector, children, before, added)
                elif key.data is not None:  # a job's process has closed its end: killed, or has its status
                    _forward(key.data, signal.SIGKILL)
                    selector.unregister(key.fileobj)
            _reap(children, selector)
    finally:
        if os.getpid() == server:
            signal.set_wakeup_fd(-1)  # a late SIGCHLD must not write to a closed socket
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            path.unlink(missing_ok=True)
            listener.close()


def _accept(listener: socket.socket, selector, children: dict, env: dict, added: dict) -> None:
    """Take one job: fork its child, or tell its process to run it itself."""
    conn, _ = listener.accept()
    fds: list[int] = []
    pid = None
    try:
        conn.settimeout(30)
        _, fds, _, _ = socket.recv_fds(conn, 1, 3)
        request = _recv(conn)
        refusal = _refusal(request, fds, env, added)
        if refusal is not None:
            print(f"warm start: a job runs in its own process: {refusal}", flush=True)
            _send(conn, {"refused": refusal})
            conn.close()
            return
        request["env"] = added | {k: v for k, v in request["env"].items() if k != WARM_ENV}
        pid = _fork_job(conn, selector, fds, request)
        _send(conn, {"pid": pid})
        children[pid] = conn
        selector.register(conn, selectors.EVENT_READ, pid)
    except Exception as error:  # this job runs in its own process (or is stopped); the server goes on
        print(f"warm start: a job runs in its own process: {error!r}", flush=True)
        if pid is not None:
            _forward(pid, signal.SIGKILL)
        conn.close()
    finally:
        for fd in fds:
            os.close(fd)


def _refusal(request: object, fds: list[int], env: dict[str, str], added: dict[str, str]) -> str | None:
    """Why the server cannot stand in for this job's process, or None. Its environment must be the
    server's (`env`, before its imports; a library may read a variable at import), except for what
    Snakemake sets per job and what the imports set (`added`, which the job may lack or share)."""
    if not isinstance(request, dict) or len(fds) != 3:
        return "an incomplete request"
    if tuple(request["interpreter"]) != _interpreter():
        return f"another interpreter or container ({request['interpreter'][0]})"
    job_env = {k: v for k, v in request["env"].items() if k not in PER_JOB_ENV}
    server_env = env | added
    differ = sorted(
        k
        for k in server_env.keys() | job_env.keys()
        if job_env.get(k) != server_env.get(k) and not (k in added and k not in job_env)
    )
    if differ:
        return f"its environment differs from the server's in {', '.join(differ[:5])}"
    return None


def _fork_job(conn: socket.socket, selector, fds: list[int], request: dict) -> int:
    """Fork the job's child (its own process group); the job's signals wait until it has its handlers."""
    sys.stdout.flush()
    sys.stderr.flush()
    signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    try:
        pid = os.fork()
        if pid == 0:
            _run_child(conn, selector, fds, request)  # never returns
        try:
            os.setpgid(pid, pid)  # also here: the job's process may signal the group at once
        except OSError:  # the child has set it already
            pass
        return pid
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)


def _reap(children: dict[int, socket.socket], selector) -> None:
    """Send each finished child's exit status to its job's process (which keeps the first status
    it gets: the child's own, else this one, e.g. for a child killed by a signal)."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is None:
            continue
        code = os.waitstatus_to_exitcode(status)
        try:
            _send(conn, {"exit": code if code >= 0 else 128 - code})
        except OSError:
            pass
        if conn.fileno() in selector.get_map():
            selector.unregister(conn)
        conn.close()


def _run_child(conn: socket.socket, selector, fds: list[int], request: dict):
    """In the forked child: become the job's process (descriptors, folder, environment, argv,
    thread counts), run its script as `__main__`, and exit as the interpreter would: non-daemon
    threads joined, exit functions run, the script's globals cleared (closing its files)."""
    import atexit
    import builtins
    import gc
    import threading
    import types

    code, main = 1, types.ModuleType("__main__")
    try:
        os.setpgid(0, 0)  # the job's signals reach this group, and a kill takes its subprocesses
        signal.set_wakeup_fd(-1)
        for signum in (*_SIGNALS, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)
        for key in list(selector.get_map().values()):  # the server's sockets, other jobs' connections
            key.fileobj.close()
        selector.close()
        for name in [m for m in sys.modules if m == "pipeline" or m.startswith("pipeline.")]:
            del sys.modules[name]  # the job imports the code on disk (and runs pipeline/__init__.py's hooks)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            os.close(fd)
        if os.isatty(1) and hasattr(sys.stdout, "reconfigure"):
            sys.stdout.reconfigure(line_buffering=True)  # as Python sets up a terminal's stdout
        os.chdir(request["cwd"])
        os.umask(request["umask"])
        os.environ.clear()
        os.environ.update(request["env"])
        _apply_threads(os.environ.get("OMP_NUM_THREADS"))
        if "tempfile" in sys.modules:
            sys.modules["tempfile"].tempdir = None  # read TMPDIR again: the job's, if it has one
        sys.argv = list(request["argv"])
        sys.path[:] = list(request["path"])
        script = request["script"]
        main.__dict__.update(__file__=script, __builtins__=builtins, __cached__=None)
        sys.modules["__main__"] = main
        exec(compile(Path(script).read_bytes(), script, "exec"), main.__dict__)
        code = 0
    except SystemExit as stop:  # as the interpreter reads sys.exit's argument
        if stop.code is None or isinstance(stop.code, int):
            code = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException:
        sys.excepthook(*sys.exc_info())  # the job's own hook (pipeline/runtime.py) where it set one
        code = INTERRUPTED_EXIT if isinstance(sys.exc_info()[1], KeyboardInterrupt) else 1
    finally:
        code &= 0xFF  # what the operating system keeps of an exit status
        try:
            threading._shutdown()  # as the interpreter's own exit: threads, then exit functions
        except BaseException:
            pass
        try:
            atexit._run_exitfuncs()
            main.__dict__.clear()
            gc.collect()
            sys.stdout.flush()
            sys.stderr.flush()
            _send(conn, {"exit": code})  # the job's process has its status even if the server is gone
        finally:
            os._exit(code)


def _apply_threads(threads: str | None) -> None:
    """The job's thread count (Snakemake's OMP_NUM_THREADS for the rule's `threads`) in the
    libraries the server loaded before it was known: BLAS and OpenMP pools, torch's intra-op pool."""
    if not threads or not threads.isdigit():
        return
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=int(threads))
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(threads))


# --- the Snakefile's side ------------------------------------------------------------------------


@dataclass(frozen=True)
class Server:
    """A running warm server: its process, socket and log file."""

    process: subprocess.Popen
    socket: Path
    log: Path


def start(log_dir: Path, preload: tuple[str, ...] = PRELOAD) -> Server | None:
    """Start a warm server importing `preload` for this Snakemake process (its parent) and announce
    it to the jobs (WARM_ENV); None where warm start cannot run here. Its own output goes to
    `log_dir`/warm-start-<pid>.log (removed at `stop` if empty)."""
    import subprocess
    import tempfile

    if available() is not None:
        return None
    path = Path(tempfile.mkdtemp(prefix="overtrain-warm-")) / "jobs.sock"  # a private folder (0700)
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"warm-start-{os.getpid()}.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", __name__, str(path), str(os.getpid()), *preload],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C reaches the jobs through their own processes only
            env={k: v for k, v in os.environ.items() if k != WARM_ENV},
        )
    os.environ[WARM_ENV] = str(path)
    return Server(process, path, log)


def stop(server: Server | None) -> None:
    """Stop the server `start` returned; remove its socket folder, and its log if empty."""
    import subprocess

    if server is None:
        return
    os.environ.pop(WARM_ENV, None)
    server.process.terminate()
    try:
        server.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()
    server.socket.unlink(missing_ok=True)
    try:
        server.socket.parent.rmdir()
        if server.log.stat().st_size == 0:
            server.log.unlink()
    except OSError:
        pass


if __name__ == "__main__":
    serve(Path(sys.argv[1]), int(sys.argv[2]), tuple(sys.argv[3:]))
