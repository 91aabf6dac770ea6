"""The GPU kit: what a single-GPU machine says about the pipeline, in one run (`make gpu-check`).

1. The CUDA-marked tests (`pytest -m cuda`), when pytest is installed.
2. bf16-mixed fine-tuning of a randomly initialised model with OLMo-1B's config (no weights
   needed) by the pipeline's training loop, beside `transformers.Trainer` on the same model,
   batch, sequence length and SDPA attention (bf16=True, fused AdamW): tokens/s after warm-up,
   MFU = 6 x parameters x tokens/s / the GPU's bf16 dense peak (measured with large matmuls, and
   the spec sheet's), and peak memory beside the memory planner's estimate.
3. Gaussian perturbation (bf16 weights, float32 noise) and held-out perplexity of that model, as
   the perturbation stage runs them: tokens/s.

Runs on the image's torch / transformers (no pins needed: it imports only torch, transformers,
numpy, pandas from outside the repository). Prints a table and writes JSON (--out).
On a CPU (--device cpu --model tiny --steps 4) it is a smoke test of the kit itself.

usage: python bench/gpu_check.py [--model olmo-1b] [--batch 4] [--seq-len 2048] [--steps 30]
           [--warmup 5] [--out gpu-check.json] [--skip-tests]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from pipeline.evaluate.perplexity import EvalSet, eval_perplexity
from pipeline.models.build import count_parameters, init_std_from_config
from pipeline.models.hub import HUB_PRESETS
from pipeline.models.shapes import ModelShape, shape_of
from pipeline.sweeps.noise import perturb_gaussian
from pipeline.train.config import TrainConfig
from pipeline.train.loop import train
from pipeline.train.memory import GIB, estimate

ROOT = Path(__file__).resolve().parents[1]
# Spec-sheet bf16 dense peaks (TFLOP/s, without sparsity), matched on the device name
SPEC_BF16_TFLOPS = {"H200": 989.0, "H100 SXM": 989.0, "H100 PCIe": 756.0, "H100": 989.0, "A100": 312.0}
TINY = ModelShape(layers=2, hidden=64, intermediate=256, heads=4, kv_heads=4, vocab=512, context=128)


def model_config(name: str):
    """A transformers config of `name`: OLMo-1B's architecture (OLMo v1) or a tiny one (CPU smoke)."""
    from transformers import OlmoConfig

    shape = TINY if name == "tiny" else HUB_PRESETS[name].shape
    return OlmoConfig(
        vocab_size=shape.vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        max_position_embeddings=shape.context,
        tie_word_embeddings=shape.tied,
        pad_token_id=1,
        bos_token_id=None,
        eos_token_id=0,
        attn_implementation="sdpa",
    )


def fresh_model(name: str, device: torch.device) -> torch.nn.Module:
    from transformers import OlmoForCausalLM

    torch.manual_seed(0)
    return OlmoForCausalLM(model_config(name)).to(device)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def peak_gib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / GIB if device.type == "cuda" else None


def measured_bf16_tflops(device: torch.device, n: int = 8192, repeats: int = 20) -> float | None:
    """Dense bf16 matmul throughput of the device (the MFU's denominator as measured)."""
    if device.type != "cuda":
        return None
    a, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(2))
    for _ in range(3):
        a @ b
    sync(device)
    t0 = time.perf_counter()
    for _ in range(repeats):
        a @ b
    sync(device)
    return 2 * n**3 * repeats / (time.perf_counter() - t0) / 1e12


def spec_bf16_tflops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in SPEC_BF16_TFLOPS.items() if k in name), None)


def random_batches(vocab: int, batch: int, seq_len: int):
    """batch_fn of the training loop: a fixed pseudo-random token batch per step (inputs, next tokens)."""

    def batch_fn(step: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(step)
        rows = torch.randint(2, vocab, (batch, seq_len + 1), generator=gen)
        return {"input_ids": rows[:, :-1], "labels": rows[:, 1:]}

    return batch_fn


def run_ours(args, device: torch.device) -> dict:
    """The pipeline's loop (fused head, fused AdamW), bf16-mixed: tokens/s after warm-up, peak memory."""
    model = fresh_model(args.model, device)
    reset_peak(device)
    stamps: list[float] = []

    def on_step_end(step: int) -> None:
        sync(device)
        stamps.append(time.perf_counter())

    cfg = TrainConfig(steps=args.steps, lr=1e-4, precision=args.precision, log_every=args.steps)
    train(
        model, random_batches(model.config.vocab_size, args.batch, args.seq_len), cfg, on_step_end=on_step_end
    )
    timed = stamps[args.warmup - 1 :]
    tokens_s = args.batch * args.seq_len * (len(timed) - 1) / (timed[-1] - timed[0])
    shape = shape_of(model.config)
    planned = estimate(shape, 1, args.batch, args.seq_len, args.precision, False)
    return {
        "tokens_per_s": tokens_s,
        "peak_gib": peak_gib(device),
        "planner_gib": planned.total / GIB,
        "planner": planned.describe(),
        "params": count_parameters(model),
    }


def run_trainer(args, device: torch.device, out_dir: Path) -> dict:
    """transformers.Trainer on the same model, batch and sequence length: bf16=True, fused AdamW."""
    from transformers import Trainer, TrainerCallback, TrainingArguments

    model = fresh_model(args.model, device)
    batch_fn = random_batches(model.config.vocab_size, args.batch, args.seq_len)
    rows = torch.cat(
        [torch.cat([b["input_ids"], b["labels"][:, -1:]], 1) for b in map(batch_fn, range(args.steps))]
    )

    class Tokens(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return len(rows)

        def __getitem__(self, i: int) -> dict:
            return {"input_ids": rows[i, :-1], "labels": rows[i, :-1]}  # the model shifts labels itself

    stamps: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, *a, **k):
            sync(device)
            stamps.append(time.perf_counter())

    targs = TrainingArguments(
        output_dir=str(out_dir),
        per_device_train_batch_size=args.batch,
        max_steps=args.steps,
        learning_rate=1e-4,
        lr_scheduler_type="cosine",
        warmup_steps=round(0.1 * args.steps),  # as the loop: warmup_fraction 0.1
        bf16=args.precision == "bf16-mixed",
        optim="adamw_torch_fused" if device.type == "cuda" else "adamw_torch",
        logging_steps=args.steps,
        save_strategy="no",
        report_to=[],
        dataloader_num_workers=0,
        use_cpu=device.type == "cpu",
        disable_tqdm=True,
    )
    reset_peak(device)
    Trainer(model=model, args=targs, train_dataset=Tokens(), callbacks=[Clock()]).train()
    timed = stamps[args.warmup - 1 :]
    return {
        "tokens_per_s": args.batch * args.seq_len * (len(timed) - 1) / (timed[-1] - timed[0]),
        "peak_gib": peak_gib(device),
    }


def run_perturb_eval(args, device: torch.device) -> dict:
    """Gaussian perturbation of bf16 weights (float32 noise) and perplexity on held-out windows."""
    model = fresh_model(args.model, device)
    if device.type == "cuda":
        model = model.to(torch.bfloat16)
    std = init_std_from_config(model, model.config)
    sync(device)
    t0 = time.perf_counter()
    perturb_gaussian(model, std, gamma=1.0, seed=0)
    sync(device)
    perturb_s = time.perf_counter() - t0
    windows = 4 * args.batch
    gen = torch.Generator().manual_seed(1)
    inputs = torch.randint(2, model.config.vocab_size, (windows, args.seq_len), generator=gen)
    labels = torch.roll(inputs, -1, 1)
    labels[:, -1] = -100
    data = EvalSet(inputs, labels, int((labels != -100).sum()), 4 * int((labels != -100).sum()), windows)
    eval_perplexity(model, EvalSet(inputs[:2], labels[:2], 2, 2, 2), batch_size=2)  # warm-up
    sync(device)
    t0 = time.perf_counter()
    result = eval_perplexity(model, data, batch_size=args.batch)
    sync(device)
    return {
        "perturb_s": perturb_s,
        "eval_tokens_per_s": data.n_tokens / (time.perf_counter() - t0),
        "ppl_finite": math.isfinite(result["ppl"]),
    }


def run_cuda_tests() -> dict:
    if importlib.util.find_spec("pytest") is None:
        return {"status": "skipped: pytest is not installed (pip install pytest, or carry its wheel)"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--noconftest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-rs",
            str(ROOT / "tests" / "test_cuda.py"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    tail = (done.stdout + done.stderr).strip().splitlines()
    return {
        "status": "passed" if done.returncode == 0 else f"failed (exit {done.returncode})",
        "summary": tail[-1:],
    }


def summary(report: dict) -> str:
    """The figures docs/benchmarks.md reports, as lines."""

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f}%"

    def gib(x: float | None) -> str:
        return "-" if x is None else f"{x:.1f} GiB"

    ours, hf, pe = report["ours"], report["trainer"], report["perturb_eval"]
    measured, spec = report["measured_bf16_tflops"], report["spec_bf16_tflops"]
    tests = report["cuda_tests"]
    return "\n".join(
        [
            f"device {report['device']}, torch {report['torch']}, transformers {report['transformers']}",
            f"bf16 dense peak: measured {measured or '-'} TFLOP/s, spec sheet {spec or '-'}",
            f"CUDA tests: {tests['status']} {tests.get('summary', '')}",
            f"ours:    {ours['tokens_per_s']:,.0f} tok/s, MFU {pct(ours['mfu_vs_measured'])} (measured "
            f"peak) / {pct(ours['mfu_vs_spec'])} (spec), peak {gib(ours['peak_gib'])}",
            f"         planner {ours['planner']}",
            f"Trainer: {hf['tokens_per_s']:,.0f} tok/s, MFU {pct(hf['mfu_vs_measured'])} / "
            f"{pct(hf['mfu_vs_spec'])}, peak {gib(hf['peak_gib'])}",
            f"ours / Trainer: {report['speedup_vs_trainer']:.2f}x",
            f"perturbation {pe['perturb_s']:.2f} s, perplexity {pe['eval_tokens_per_s']:,.0f} tok/s",
        ]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="olmo-1b", choices=["olmo-1b", "tiny"])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--precision", default="bf16-mixed", choices=["bf16-mixed", "fp32"])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--skip-tests", action="store_true")
    args = ap.parse_args()
    if args.steps < args.warmup + 2:
        ap.error("--steps must exceed --warmup by at least 2")
    device = torch.device(args.device)
    report: dict = {
        "device": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor() or "cpu",
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "settings": {k: str(v) for k, v in vars(args).items()},
        "measured_bf16_tflops": measured_bf16_tflops(device),
        "spec_bf16_tflops": spec_bf16_tflops(device),
    }
    report["cuda_tests"] = {"status": "skipped (--skip-tests)"} if args.skip_tests else run_cuda_tests()
    report["ours"] = run_ours(args, device)
    with tempfile.TemporaryDirectory() as tmp:
        report["trainer"] = run_trainer(args, device, Path(tmp))
    report["perturb_eval"] = run_perturb_eval(args, device)
    params = report["ours"]["params"]
    for key in ("measured_bf16_tflops", "spec_bf16_tflops"):
        peak = report[key]
        for side in ("ours", "trainer"):
            report[side][f"mfu_vs_{key.split('_')[0]}"] = (
                6 * params * report[side]["tokens_per_s"] / (peak * 1e12) if peak else None
            )
    report["speedup_vs_trainer"] = report["ours"]["tokens_per_s"] / report["trainer"]["tokens_per_s"]
    print(json.dumps(report, indent=2, default=str))
    print(summary(report))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
