"""Where a bf16-mixed training step of the GPU kit's model spends its GPU time: the pipeline's loop
(fused head) beside the model's own forward with `labels` (what transformers.Trainer runs), the
top kernels of each by CUDA time (torch.profiler), after warm-up steps.

usage: python bench/profile_train_step.py [--model olmo-1b] [--batch 4] [--seq-len 2048]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_check import fresh_model, random_batches  # noqa: E402


def profile(step, steps: int, label: str, rows: int) -> None:
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    print(f"== {label}: {(time.perf_counter() - t0) / steps * 1e3:.1f} ms per step (profiled)")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="olmo-1b", choices=["olmo-1b", "tiny"])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rows", type=int, default=18)
    args = ap.parse_args()
    from pipeline.models.losses import fused_head

    device = torch.device("cuda")
    model = fresh_model(args.model, device)
    batch = {
        k: v.to(device)
        for k, v in random_batches(model.config.vocab_size, args.batch, args.seq_len)(0).items()
    }
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    head = fused_head(model)

    def ours() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = head.loss(batch["input_ids"], batch["labels"])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)

    def own() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=batch["input_ids"], labels=batch["input_ids"]).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)

    profile(ours, args.steps, "fused head (the pipeline's loop)", args.rows)
    profile(own, args.steps, "model(labels=...).loss (Trainer's step)", args.rows)


if __name__ == "__main__":
    main()
