"""The fused head's elementwise memory traffic and CPU time per step: this checkout's
`pipeline/models/losses.py` beside an older revision's (loaded from git), in one run.

Traffic is counted, not estimated: a TorchDispatchMode sees every aten op of one forward and
backward of the head and adds up the bytes each reads and writes of the (rows x vocab) tensors
(index ops such as gather and scatter touch one element per row and are left out), divided by
the number of logits. Two kernels:
- "cpu": float32 matmuls on the CPU (traced on real tensors);
- "bf16": the accelerators' kernel with bf16 matmuls (autocast's head on CUDA), traced on the meta
  device at OLMo-1B's head shape (no arithmetic: only the ops and their sizes).
The matmuls' own reads and writes of those tensors are shown apart. Time: the CPU kernel's
forward + backward, old and new alternately, median of `--repeats` (wall and the process's CPU time).

usage: python bench/bench_head_traffic.py [--old-rev e74d84e] [--rows 512] [--vocab 16384]
last line: `head traffic bytes/logit cpu <old> -> <new>, bf16 <old> -> <new>; cpu ms/step <old> -> <new> ...`
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MATMULS = {"mm", "addmm", "addmm_", "bmm", "matmul"}
INDEXED = {"gather", "scatter", "scatter_", "scatter_add", "scatter_add_", "index_select", "where"}
WRITE_ONLY = {"copy_", "fill_", "zero_"}
NO_TRAFFIC = {"empty", "empty_like", "empty_strided"}


class Traffic(TorchDispatchMode):
    """Bytes read and written of the (rows x vocab) tensors (at least `big` elements, no dimension
    of size `hidden`: not the weight), per op name, elementwise ops and matmuls apart; views,
    allocations and index ops are free."""

    def __init__(self, big: int, hidden: int):
        super().__init__()
        self.big, self.hidden = big, hidden
        self.ops: dict[str, int] = {}

    def counted(self, t: torch.Tensor) -> int:
        per_logit = t.numel() >= self.big and self.hidden not in t.shape
        return t.numel() * t.element_size() if per_logit else 0

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name, schema = func.overloadpacket.__name__, func._schema
        view = schema.returns and schema.returns[0].alias_info and not schema.returns[0].alias_info.is_write
        if name in INDEXED or name in NO_TRAFFIC or view:
            return out
        written = {
            id(a) for a, spec in zip(args, schema.arguments) if spec.alias_info and spec.alias_info.is_write
        }
        written |= {id(v) for v in kwargs.values() if isinstance(v, torch.Tensor)}  # out=
        write_only = name in WRITE_ONLY or "out" in kwargs
        tensors = [a for a in [*args, *kwargs.values()] if isinstance(a, torch.Tensor)]
        reads = [a for a in tensors if id(a) not in written or not write_only]
        outs = out if isinstance(out, (tuple, list)) else [out]
        total = sum(self.counted(t) for t in [*reads, *outs] if isinstance(t, torch.Tensor))
        if total:
            self.ops[name] = self.ops.get(name, 0) + total
        return out


def old_losses(rev: str) -> types.ModuleType:
    """pipeline/models/losses.py as of git revision `rev`, as a module."""
    source = subprocess.run(
        ["git", "show", f"{rev}:pipeline/models/losses.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    module = types.ModuleType("losses_old")
    exec(compile(source, f"{rev}:losses.py", "exec"), module.__dict__)
    return module


@contextlib.contextmanager
def no_autocast_on_meta():
    """torch.autocast cannot be entered for the meta device: a no-op for the meta trace."""
    real = torch.autocast
    torch.autocast = lambda *a, **k: contextlib.nullcontext()
    try:
        yield
    finally:
        torch.autocast = real


def head_step(loss_fn, hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk: int) -> None:
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    loss_fn(h, w, labels, chunk).backward()


def traced(loss_fn, n: int, hidden: int, vocab: int, chunk: int, device: str) -> tuple[float, float, dict]:
    gen = torch.Generator().manual_seed(0)
    if device == "meta":
        h, w = torch.empty(n, hidden, device="meta"), torch.empty(vocab, hidden, device="meta")
        y = torch.zeros(n, dtype=torch.long, device="meta")
    else:
        h, w = torch.randn(n, hidden, generator=gen), 0.05 * torch.randn(vocab, hidden, generator=gen)
        y = torch.randint(0, vocab, (n,), generator=gen)
    mode = Traffic(big=min(chunk, n) * vocab, hidden=hidden)
    with mode:
        head_step(loss_fn, h, w, y, chunk)
    per_logit = {name: b / (n * vocab) for name, b in mode.ops.items()}
    elementwise = sum(v for k, v in per_logit.items() if k not in MATMULS)
    return elementwise, sum(v for k, v in per_logit.items() if k in MATMULS), per_logit


def timed(
    fns: dict, n: int, hidden: int, vocab: int, chunk: int, repeats: int
) -> dict[str, tuple[float, float]]:
    """(wall, CPU) median ms per forward + backward of each contender, run alternately (a shared
    machine's load falls on both alike; the process's CPU time counts only its own work)."""
    gen = torch.Generator().manual_seed(0)
    h, w = torch.randn(n, hidden, generator=gen), 0.05 * torch.randn(vocab, hidden, generator=gen)
    y = torch.randint(0, vocab, (n,), generator=gen)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in fns}
    for r in range(repeats + 1):  # round 0 warms up
        for name, fn in fns.items():
            t0, c0 = time.perf_counter(), time.process_time()
            head_step(fn, h, w, y, chunk)
            if r:
                times[name].append((time.perf_counter() - t0, time.process_time() - c0))
    return {
        name: (statistics.median(t for t, _ in ts) * 1e3, statistics.median(c for _, c in ts) * 1e3)
        for name, ts in times.items()
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old-rev", default="e74d84e", help="the revision to compare with (before the change)")
    ap.add_argument("--rows", type=int, default=512)
    ap.add_argument("--hidden", type=int, default=384)  # olmo-30m
    ap.add_argument("--vocab", type=int, default=16384)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)  # as the pipeline's jobs run (pipeline.runtime.set_threads)
    from pipeline.models import losses as new

    old = old_losses(args.old_rev)
    cpu_chunk = new.default_chunk_rows(args.vocab, torch.device("cpu"))
    bf16 = torch.bfloat16

    def old_bf16(h, w, y, chunk):
        old._matmul_dtype = lambda device: bf16
        return old.fused_linear_cross_entropy(h, w, y, chunk)

    contenders = {
        "cpu": {
            "old": lambda h, w, y, c: old.fused_linear_cross_entropy(h, w, y, c),
            "new": lambda h, w, y, c: new.fused_linear_cross_entropy(h, w, y, c),
        },
        "bf16": {"old": old_bf16, "new": lambda h, w, y, c: new.fused_linear_cross_entropy(h, w, y, c, bf16)},
    }
    shapes = {
        "cpu": (args.rows, args.hidden, args.vocab, cpu_chunk, "cpu"),
        "bf16": (8192, 2048, 50304, 4096, "meta"),
    }
    print(f"torch {torch.__version__}, {args.threads} threads; old = {args.old_rev}, new = this checkout")
    found: dict[tuple[str, str], float] = {}
    for kernel, fns in contenders.items():
        n, hidden, vocab, chunk, device = shapes[kernel]
        rows = min(chunk, n)
        print(f"\n{kernel} kernel, {n} rows x vocab {vocab}, hidden {hidden}, {rows} rows/chunk ({device}):")
        for version, fn in fns.items():
            with no_autocast_on_meta() if device == "meta" else contextlib.nullcontext():
                ew, mm, ops = traced(fn, n, hidden, vocab, chunk, device)
            found[kernel, version] = ew
            passes = ", ".join(f"{name} {b:.0f}" for name, b in ops.items() if name not in MATMULS)
            print(f"  {version}: {ew:5.1f} B/logit elementwise ({passes}); matmuls {mm:.1f} B/logit")
    ms = timed(contenders["cpu"], args.rows, args.hidden, args.vocab, cpu_chunk, args.repeats)
    (wall_old, cpu_old), (wall_new, cpu_new) = ms["old"], ms["new"]
    print(
        f"\ncpu forward+backward of the head, {args.rows} x {args.vocab}, hidden {args.hidden}: "
        f"wall old {wall_old:.1f} ms, new {wall_new:.1f} ms ({wall_old / wall_new:.2f}x); "
        f"CPU time old {cpu_old:.1f} ms, new {cpu_new:.1f} ms ({cpu_old / cpu_new:.2f}x)"
    )
    print(
        f"head traffic bytes/logit cpu {found['cpu', 'old']:.0f} -> {found['cpu', 'new']:.0f}, "
        f"bf16 {found['bf16', 'old']:.0f} -> {found['bf16', 'new']:.0f}; "
        f"cpu ms/step {wall_old:.1f} -> {wall_new:.1f} (CPU time {cpu_old:.1f} -> {cpu_new:.1f})"
    )


if __name__ == "__main__":
    main()
