"""What the linearization stage costs, against a default fine-tuning job, and LoRA vs full
fine-tuning throughput on the same model, side by side in one process (the machine is noisy).

For one pre-trained checkpoint of a study and one of its task tables it times:
- one linearization diagnostic as a fine-tuning job runs it (`finetuned_gap`: the leading 512
  held-out pre-training tokens and 512 of the task's validation windows; θ_ft here is θ_pre plus
  a small random step, which costs the same as a real fine-tuning direction);
- one empirical NTK of one task (rule ntk's work per task, loading the checkpoint included:
  n = 64 examples, every parameter);
- a default fine-tuning job's wall time, from the study's own benchmark files (median);
- training throughput (tokens/s) of full fine-tuning and of LoRA (r = 4, alpha 8, q/k/v/o) on the
  same batches, alternated `--repeats` times;
- a linearized training step (pipeline/train/linearized.py: backpropagating through the jvp)
  against a graph-free jvp plus one ordinary backward at θ_pre (`jvp_then_backward`), alternated on
  the same batches, with their gradients compared.

usage: python bench/bench_linearization.py results/default tiny-8000000-s0 code [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

import torch

from pipeline.curvature.config import CurvatureConfig
from pipeline.curvature.linearization import finetuned_gap
from pipeline.curvature.ntk import ntk_rows
from pipeline.data.encode import lm_sampler, read_task, split_of_task
from pipeline.data.heldout import heldout_eval_set, lm_eval_set
from pipeline.models.build import build_model, model_config
from pipeline.models.checkpoints import CheckpointSpec
from pipeline.models.loading import load_checkpoint
from pipeline.models.trained_params import select
from pipeline.sweeps.search_rounds import benchmark_seconds
from pipeline.train.config import TrainConfig
from pipeline.train.linearized import linearize
from pipeline.train.loop import train

LORA = {"lora": {"rank": 4, "alpha": 8.0, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}}


def jvp_then_backward(model: torch.nn.Module, pre: dict[str, torch.Tensor]) -> None:
    """The tangent model by a graph-free jvp for its value and one ordinary backward at θ_pre for its
    gradient Jᵀ ∂L/∂f (the forward adds f(θ') − f(θ').detach(), θ' = θ_pre in value, the identity in
    gradient): the contender of pipeline/train/linearized.py's backward through the jvp."""
    names = list(pre)
    real_forward = model.forward
    inside = {"on": False}
    model.set_attn_implementation("eager")

    def forward(*args, **kwargs):
        if inside["on"]:
            return real_forward(*args, **kwargs)
        kwargs = {k: v for k, v in kwargs.items() if k in ("input_ids", "attention_mask")}
        named = dict(model.named_parameters())

        def logits(params):
            return torch.func.functional_call(model, params, args, kwargs).logits

        inside["on"] = True
        try:
            with torch.no_grad():
                delta = {n: named[n].detach() - pre[n] for n in names}
                f0, jd = torch.func.jvp(logits, (dict(pre),), (delta,))
            attached = logits({n: named[n] - delta[n] for n in names})
        finally:
            inside["on"] = False
        return SimpleNamespace(logits=(f0 + jd) + (attached - attached.detach()))

    model.forward = forward


def linearized_steps(load, sampler, steps: int, repeats: int) -> dict[str, list[float]]:
    """Seconds per linearized training step of each implementation (`load()`: a fresh model),
    alternated; and the relative difference of their gradients on one batch after both trained the
    same steps (the same math: rounding only)."""
    implementations = {"through the jvp": linearize, "jvp + backward": jvp_then_backward}
    cfg = TrainConfig(steps=steps, lr=1e-3, weight_decay=0.0, log_every=10**6, checkpoint_every=10**6)
    out: dict[str, list[float]] = {k: [] for k in implementations}
    grads = {}
    for _ in range(repeats):
        for name, make in implementations.items():
            model = load()
            make(model, {n: p.detach().clone() for n, p in model.named_parameters()})
            out[name].append(train(model, sampler.batch, cfg).seconds / steps)
            batch = sampler.batch(0)
            model.zero_grad()
            logits = model(input_ids=batch["input_ids"]).logits
            torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten()).backward()
            grads[name] = torch.cat([p.grad.flatten() for p in model.parameters()])
    a, b = grads.values()
    out["gradient difference"] = [float((a - b).norm() / b.norm())]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("study", type=Path)
    ap.add_argument("checkpoint")
    ap.add_argument("task")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument(
        "--linearized-presets",
        nargs="*",
        default=["olmo-15m", "olmo-30m"],
        help="size presets (random weights, the study's tokenizer) the linearized step is also timed on",
    )
    args = ap.parse_args()
    torch.set_num_threads(1)
    model_name, budget = args.checkpoint.rsplit("-", 1)
    path = str(args.study / "pretrain" / model_name / budget)
    spec = CheckpointSpec(args.checkpoint, "local", model_name, int(budget), path=path)
    task = read_task(args.task, args.study / "data" / "tasks" / f"{args.task}.parquet")
    corpus = args.study / "data" / "corpus.parquet"

    jobs = [
        benchmark_seconds(f)
        for f in (args.study / "benchmarks" / "finetune").glob(f"{args.checkpoint}/*/*/lr*.tsv")
    ]
    job = statistics.median(jobs) if jobs else float("nan")

    model, tokenizer, *_ = load_checkpoint(spec, path, "cpu", dtype=torch.float32)
    max_len = model.config.max_position_embeddings
    reference = {n: p.detach().clone() for n, p in model.named_parameters()}
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1e-2 * torch.randn(p.shape, generator=gen))
    sets = {
        "pretrain": heldout_eval_set(corpus, "validation", tokenizer, max_len, 120000),
        args.task: lm_eval_set(tokenizer, split_of_task(task, "validation"), max_len, 60000),
    }
    gap_s, ntk_s = [], []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        finetuned_gap(model, reference, sets, 512)
        gap_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        tasks = {args.task: args.study / "data" / "tasks" / f"{args.task}.parquet"}
        ntk_rows(spec, path, tasks, 128, CurvatureConfig(ntk_examples=64), "bench")
        ntk_s.append(time.perf_counter() - t0)

    sampler, _ = lm_sampler(tokenizer, split_of_task(task, "train"), 128, 16, 0)
    cfg = TrainConfig(steps=args.steps, lr=1e-2, weight_decay=0.0, log_every=10**6, checkpoint_every=10**6)
    rates: dict[str, list[float]] = {"full": [], "lora": []}
    for _ in range(args.repeats):
        for kind in rates:
            fresh, *_ = load_checkpoint(spec, path, "cpu", dtype=torch.float32)
            trained = select(fresh, LORA) if kind == "lora" else fresh
            result = train(trained, sampler.batch, cfg)
            rates[kind].append(args.steps * 16 * 128 / result.seconds)

    n_steps = max(5, args.steps // 3)

    def checkpoint() -> torch.nn.Module:
        return load_checkpoint(spec, path, "cpu", dtype=torch.float32)[0]

    linear = {args.checkpoint: linearized_steps(checkpoint, sampler, n_steps, args.repeats)}
    for preset in args.linearized_presets:
        config = model_config(preset, len(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id)
        config.attention_dropout = 0.0  # both implementations must see the same function
        linear[preset] = linearized_steps(lambda c=config: build_model(c, seed=0), sampler, 3, args.repeats)

    print(f"{args.checkpoint} on {args.task} (1 thread, {args.repeats} repeats, median):")
    print(f"  default fine-tuning job (study's benchmark files, n = {len(jobs)}): {job:.1f} s")
    for name, s in (("linearization diagnostic (2 x 512 tokens)", gap_s), ("NTK, n = 64", ntk_s)):
        m = statistics.median(s)
        print(
            f"  {name}: {m:.2f} s = {100 * m / job:.1f}% of a job (runs: {', '.join(f'{x:.2f}' for x in s)})"
        )
    full, lora = statistics.median(rates["full"]), statistics.median(rates["lora"])
    print(f"  training tokens/s: full {full:,.0f}  LoRA {lora:,.0f}  (LoRA / full {lora / full:.2f})")
    print(
        "    full:",
        ", ".join(f"{x:,.0f}" for x in rates["full"]),
        "| LoRA:",
        ", ".join(f"{x:,.0f}" for x in rates["lora"]),
    )
    for model_name, steps in linear.items():
        ours, other = statistics.median(steps["through the jvp"]), statistics.median(steps["jvp + backward"])
        print(
            f"  linearized training step, {model_name}: through the jvp {ours:.3f} s, jvp + backward "
            f"{other:.3f} s ({other / ours:.2f}x); gradients differ by {steps['gradient difference'][0]:.1e}"
        )


if __name__ == "__main__":
    main()
