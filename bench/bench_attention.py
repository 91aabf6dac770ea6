"""Small-head causal attention (pipeline/models/attention.py) vs torch's SDPA on CPU, by head dimension.

Prints milliseconds per call (forward in inference mode, and forward + backward) of both for
shapes of the pipeline's models, their ratio, and the largest difference of the outputs and input
gradients; this is what sets `SMALL_HEAD_DIM`, the head dimension up to which the pipeline uses it.

usage: python bench/bench_attention.py [--threads 2] [--repeats 30]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from pipeline.models.attention import small_head_attention

# (batch, heads, seq, head_dim): training and evaluation batches of the tiny preset, then wider heads
SHAPES = [
    (16, 4, 128, 8),
    (64, 4, 128, 8),
    (16, 2, 128, 16),
    (16, 8, 128, 16),
    (16, 4, 128, 32),
    (16, 4, 128, 64),
    (4, 4, 512, 8),
]


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)


def small(q, k, v):
    return small_head_attention(q, k, v, None, q.size(-1) ** -0.5)


def best_ms(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    torch.manual_seed(0)
    print(f"{args.threads} threads, median of {args.repeats}; ms per call")
    print(
        f"{'B,H,T,D':>16} | {'fwd sdpa':>8} {'small':>7} {'ratio':>6} | "
        f"{'fwd+bwd sdpa':>12} {'small':>7} {'ratio':>6} | max |diff| out, grads"
    )
    for b, h, t, d in SHAPES:
        q, k, v = (torch.randn(b, h, t, d, requires_grad=True) for _ in range(3))
        g = torch.randn(b, t, h, d)

        def fwd(f):
            with torch.inference_mode():
                f(q, k, v)

        def fwd_bwd(f):
            for x in (q, k, v):
                x.grad = None
            f(q, k, v).backward(g)
            return [x.grad.clone() for x in (q, k, v)]

        f_sdpa, f_small = best_ms(lambda: fwd(sdpa), args.repeats), best_ms(lambda: fwd(small), args.repeats)
        b_sdpa, b_small = (
            best_ms(lambda: fwd_bwd(sdpa), args.repeats),
            best_ms(lambda: fwd_bwd(small), args.repeats),
        )
        with torch.no_grad():
            d_out = (sdpa(q, k, v) - small(q, k, v)).abs().max().item()
        d_grad = max((a - c).abs().max().item() for a, c in zip(fwd_bwd(sdpa), fwd_bwd(small)))
        shape = f"{b},{h},{t},{d}"
        print(
            f"{shape:>16} | {f_sdpa:8.2f} {f_small:7.2f} {f_sdpa / f_small:5.2f}x | "
            f"{b_sdpa:12.2f} {b_small:7.2f} {b_sdpa / b_small:5.2f}x | "
            f"{d_out:.1e}, {d_grad:.1e}"
        )


if __name__ == "__main__":
    main()
