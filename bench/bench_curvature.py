"""What the curvature stage (Appendix D) costs per job, at candidate settings, side by side.

For one pre-trained checkpoint of a study it times, in one process (the machine is noisy), the
work rule `curvature` does after start-up (held-out windows, sharpness, Gaussian lines) and the
line a fine-tuning job adds along θ_ft − θ_pre (θ_ft here: θ_pre plus a small random step, which
costs the same as a real fine-tuning direction), for each setting; then the quadratic's worst
relative error at the smallest λ and the sharpness figures, so a cheaper setting is seen to keep them.

usage: python bench/bench_curvature.py results/default/pretrain/tiny/8000000 \
           results/default/data/corpus.parquet [--setting max_tokens=512 ...] [--repeats 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import statistics
import time

import torch

from pipeline.curvature.config import CurvatureConfig
from pipeline.curvature.stage import checkpoint_curvature, finetune_line
from pipeline.curvature.summary import smallest_lambda_error
from pipeline.models.checkpoints import CheckpointSpec
from pipeline.models.loading import load_checkpoint

EVAL = {"split": "validation", "seq_len": None}


def parse_setting(text: str) -> dict:
    """'max_tokens=512,finetune_lambdas_small=-0.01:0:0.01' -> CurvatureConfig overrides."""
    out: dict = {}
    for item in filter(None, text.split(",")):
        key, value = item.split("=")
        if ":" in value:
            out[key] = tuple(float(v) for v in value.split(":"))
        else:
            out[key] = int(value) if value.isdigit() else value
    return out


def time_setting(path: str, corpus: str, cfg: CurvatureConfig, repeats: int) -> dict:
    """Seconds of the checkpoint job's work and of one fine-tuning line, plus the accuracy figures."""
    spec = CheckpointSpec(name="bench", source="local", model="bench", tokens=1, path=path)
    job, line = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        lines, sharp = checkpoint_curvature(spec, path, corpus, EVAL, cfg, "bench")
        job.append(time.perf_counter() - t0)
        model, tokenizer, *_ = load_checkpoint(spec, path, "cpu", dtype=torch.float32)
        reference = {n: p.detach().clone() for n, p in model.named_parameters()}
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1e-2 * torch.randn(p.shape, generator=gen))
        fields = dict(
            study="bench",
            checkpoint="bench",
            model="bench",
            budget=1,
            seed=0,
            task="t",
            learning_rate=0.0,
            lambda_reg=0.0,
        )
        t0 = time.perf_counter()
        ft_rows = finetune_line(model, tokenizer, reference, corpus, EVAL, cfg, fields, "bench")
        line.append(time.perf_counter() - t0)
    metrics = {r["metric"]: r["value"] for r in sharp}
    seeds = cfg.seeds or ()
    return {
        "checkpoint job s": statistics.median(job),
        "fine-tuning line s": statistics.median(line),
        "gaussian rel. err": max(smallest_lambda_error([r for r in lines if r["seed"] == s]) for s in seeds),
        "finetune rel. err": smallest_lambda_error(ft_rows),
        "tr(H)": f"{metrics['hessian_trace']:.4g} ± {metrics['hessian_trace_se']:.2g}",
        "top eig": f"{metrics['hessian_top_eig']:.4g}",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("corpus")
    ap.add_argument("--setting", action="append", default=[], help="overrides of the defaults")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    logging.basicConfig(level=logging.WARNING)
    settings = {"defaults": {}} | {s: parse_setting(s) for s in args.setting}
    print(f"{args.checkpoint}, 1 thread, median of {args.repeats}")
    for name, overrides in settings.items():
        cfg = dataclasses.replace(CurvatureConfig(seeds=(0, 1, 2)), **overrides)
        result = time_setting(args.checkpoint, args.corpus, cfg, args.repeats)
        print(
            f"{name:60s} "
            + " | ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in result.items())
        )


if __name__ == "__main__":
    main()
