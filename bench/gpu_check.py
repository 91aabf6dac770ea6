"""The GPU kit: the whole pipeline on one GPU in one command (`make gpu-check`).

Steps, each reported as pass / fail / skip with its time and figures into one JSON (rewritten
after every step, so a run cut short keeps what it measured); a failing step does not stop the
next ones:

0. preflight, before any step: the wheelhouse (`.whl/`, envs/fetch_gpu_wheels.sh) matches this
   Python and, installed with `pip install --no-index --no-deps --target`, holds every package the
   pipeline needs beside the image's own (bench/wheelhouse.py); the smoke study's data (`.gpu-kit/`,
   bench/gpu_kit_data.py) is there. Otherwise the kit stops, naming what is missing.
1. cuda_tests: the CUDA-marked tests (tests/test_cuda.py).
2. training: bf16-mixed training of a randomly initialised model of OLMo-1B's architecture by the
   pipeline's loop beside `transformers.Trainer` (same model, batch, sequence length, SDPA
   attention, fused AdamW): tokens/s after warm-up, MFU = FLOPs per token (the project's one
   formula, ModelShape.train_flops_per_token: blocks, output layer, attention) x tokens/s / the
   bf16 dense peak (measured with large matmuls, and the spec sheet's), peak memory beside the
   planner.
2b. pretrain: a pre-training step of the sweep's olmo-30m preset (Table 3's shape, 50,304 tokens of
   vocabulary), bf16-mixed, by the pipeline's loop: tokens/s, MFU, and the TFLOP/s delivered
   (the runtime model's `gpu.tflops`).
3. perturb_eval: Gaussian perturbation (bf16 weights, float32 noise) and held-out perplexity.
4. study: the kit's smoke study (bench/gpu_kit.yaml) through Snakemake on this device: data,
   pre-training, perturbation, bf16-mixed fine-tuning, the lm-eval suite, generation and the
   hf_local judge, the curvature stage, metrics, figures; its tables checked (every stage's rows,
   one evaluation dtype), each stage's time reported.
5. torchrun: one of the study's fine-tuning jobs on one rank under torchrun (NCCL on CUDA: the
   FSDP2 path end to end) against the same job in one process (within bf16 tolerance), then
   stopped after some steps as if killed and resumed from its DCP state (equal to uninterrupted).
6. generation: HF `generate` of the model in bf16 (float32 on CPU), greedy: tokens/s per batch size.
7. vlm: LLaVA's stage 2 on a random CLIP ViT-L/14-336 tower (frozen) around the model, bf16-mixed
   with activation checkpointing: step time and peak memory beside the planner (docs/multimodal.md).

After the steps, the issue's GPU targets (TARGETS, declared once) are printed as booleans and
written to the report's `targets`.

Runs on the GPU image's own torch / transformers / accelerate (no pins: tests/test_gpu_kit.py runs
it on CPU in a virtual environment shaped like the image). On a CPU (`--device cpu --model tiny`)
it is the kit's own test.

usage: python bench/gpu_check.py [--model olmo-1b] [--out gpu-check.json] [--only STEP ...]
           [--wheels .whl] [--site DIR] [--data .gpu-kit] (--help: every option)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
# Spec-sheet bf16 dense peaks (TFLOP/s, without sparsity), matched on the device name
SPEC_BF16_TFLOPS = {"H200": 989.0, "H100 SXM": 989.0, "H100 PCIe": 756.0, "H100": 989.0, "A100": 312.0}
TINY = dict(layers=2, hidden=64, intermediate=256, heads=4, kv_heads=4, vocab=512, context=128)  # CPU runs
KIT_DATA = ROOT / ".gpu-kit"  # bench/gpu_kit_data.py
WHEELS = ROOT / ".whl"  # envs/fetch_gpu_wheels.sh


def model_config(name: str):
    """A transformers config of `name`: OLMo-1B's architecture (OLMo v1) or a tiny one (CPU smoke)."""
    from transformers import OlmoConfig

    from pipeline.models.hub import HUB_PRESETS
    from pipeline.models.shapes import ModelShape

    shape = ModelShape(**TINY) if name == "tiny" else HUB_PRESETS[name].shape
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
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


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


def step_clock(device: torch.device, stamps: list[float]):
    """A training-loop callback that appends the time after each step (the device synchronised)."""
    from pipeline.train.loop import Callback

    class Clock(Callback):
        def step_end(self, loop) -> None:
            sync(device)
            stamps.append(time.perf_counter())

    return Clock()


def run_ours(args, device: torch.device, model: torch.nn.Module | None = None) -> dict:
    """The pipeline's loop (fused head, fused AdamW), bf16-mixed: tokens/s after warm-up, peak memory."""
    from pipeline.models.build import count_parameters
    from pipeline.models.shapes import shape_of
    from pipeline.train.config import TrainConfig
    from pipeline.train.loop import train
    from pipeline.train.memory import GIB, estimate

    model = fresh_model(args.model, device) if model is None else model
    reset_peak(device)
    stamps: list[float] = []
    cfg = TrainConfig(steps=args.steps, lr=1e-4, precision=args.precision, log_every=args.steps)
    batch_fn = random_batches(model.config.vocab_size, args.batch, args.seq_len)
    train(model, batch_fn, cfg, callbacks=[step_clock(device, stamps)])
    timed = stamps[args.warmup - 1 :]
    tokens_s = args.batch * args.seq_len * (len(timed) - 1) / (timed[-1] - timed[0])
    shape = shape_of(model.config)
    planned = estimate(shape, 1, args.batch, args.seq_len, args.precision, False)
    return {
        "tokens_per_s": tokens_s,
        "flops_per_token": shape.train_flops_per_token(args.seq_len),
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


def step_perturb_eval(args, device: torch.device) -> dict:
    """Gaussian perturbation of bf16 weights (float32 noise) and perplexity on held-out windows."""
    from pipeline.data.heldout import EvalSet
    from pipeline.evaluate.perplexity import eval_perplexity
    from pipeline.models.build import init_std_from_config
    from pipeline.sweeps.noise import perturb_gaussian

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


def step_cuda_tests(args, device: torch.device) -> dict:
    """tests/test_cuda.py (its tests skip themselves without CUDA)."""
    if importlib.util.find_spec("pytest") is None:
        return {
            "status": "skip",
            "reason": "pytest is not installed (pip install pytest, or carry its wheel)",
        }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--noconftest", "-p", "no:cacheprovider", "-q", "-rs"]
        + [str(ROOT / "tests" / "test_cuda.py")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    tail = (done.stdout + done.stderr).strip().splitlines()
    if done.returncode != 0:
        raise RuntimeError(f"pytest exit {done.returncode}: " + "\n".join(tail[-30:]))
    status = "skip" if device.type != "cuda" else "pass"
    return {"status": status, "summary": tail[-1] if tail else ""}


def step_training(args, device: torch.device) -> dict:
    """Our loop beside transformers.Trainer: tokens/s, MFU, peak memory against the planner."""
    ours = run_ours(args, device)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = run_trainer(args, device, Path(tmp))
    measured, spec = measured_bf16_tflops(device), spec_bf16_tflops(device)
    for side in (ours, trainer):
        side.update(delivered(ours["flops_per_token"], side["tokens_per_s"], measured, spec))
    return {
        "ours": ours,
        "trainer": trainer,
        "speedup_vs_trainer": ours["tokens_per_s"] / trainer["tokens_per_s"],
        "measured_bf16_tflops": measured,
        "spec_bf16_tflops": spec,
    }


def delivered(
    flops_per_token: float, tokens_per_s: float, measured: float | None, spec: float | None
) -> dict:
    """TFLOP/s a run delivered by the project's FLOP formula, and its MFU against the measured and
    the spec sheet's bf16 peaks (None where a peak is unknown: the CPU)."""
    tflops = flops_per_token * tokens_per_s / 1e12
    return {
        "tflops": tflops,
        "mfu_vs_measured": tflops / measured if measured else None,
        "mfu_vs_spec": tflops / spec if spec else None,
    }


def step_pretrain(args, device: torch.device) -> dict:
    """Pre-training step of the sweep's olmo-30m preset (Table 3's shape, the paper's 50,304-token
    vocabulary; tiny on CPU) by the pipeline's loop, bf16-mixed: tokens/s, the TFLOP/s it delivers
    (what `gpu.tflops` takes) and MFU."""
    from pipeline.models.build import build_model, model_config

    preset, vocab = ("tiny", 512) if args.model == "tiny" else ("olmo-30m", 50304)
    model = build_model(model_config(preset, vocab, 0, 1), seed=0).to(device)
    seq_len = min(args.pretrain_seq_len, model.config.max_position_embeddings)
    run = argparse.Namespace(**{**vars(args), "batch": args.pretrain_batch, "seq_len": seq_len})
    figures = run_ours(run, device, model)
    figures |= delivered(
        figures["flops_per_token"],
        figures["tokens_per_s"],
        measured_bf16_tflops(device),
        spec_bf16_tflops(device),
    )
    return {"preset": preset, "vocab": vocab, "batch": args.pretrain_batch, "seq_len": seq_len, **figures}


# --- the smoke study through Snakemake ----------------------------------------------------------

# (modification, eval_data) pairs the kit study's metrics table must hold: every stage wrote rows
STUDY_ROWS = [
    ("none", "pretrain"),  # evaluate: the base model's held-out perplexity
    ("gaussian", "pretrain"),  # evaluate: Gaussian perturbations
    ("none", "benchmark:arc_easy"),  # evaluate: the suite on base models
    ("gaussian", "benchmark:arc_easy"),
    ("none", "mbpp"),  # evaluate: in-domain metrics before fine-tuning
    ("sft", "pretrain"),  # finetune: pre-training perplexity after fine-tuning
    ("sft", "mbpp"),
    ("sft", "weights"),
    ("sft", "benchmark:arc_easy"),  # the suite on fine-tuned models, in their job
    ("none", "alpaca_eval"),  # judge: base and fine-tuned responses against the reference
    ("sft", "alpaca_eval"),
]


def kit_study_config(args, device: torch.device) -> dict:
    """The kit's study config (bench/gpu_kit.yaml) on this device and the prepared data, with
    config.yaml's values under it and the schema's defaults filled in, as a run sees it."""
    import yaml
    from gpu_kit_data import kit_config
    from snakemake.utils import update_config

    from pipeline.workflow.schema import load_schema, validate_config

    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    update_config(config, kit_config(args.data, device.type))
    validate_config(config, load_schema(ROOT / "config" / "schema.yaml"))
    return config


def stage_seconds(study_dir: Path) -> dict[str, dict[str, float]]:
    """Per stage (a `benchmark:` file's first folder under benchmarks/, or its name): jobs and total
    / max seconds, from Snakemake's benchmark files."""
    import pandas as pd

    out: dict[str, dict[str, float]] = {}
    bench = study_dir / "benchmarks"
    for tsv in sorted(bench.rglob("*.tsv")):
        stage = tsv.relative_to(bench).parts[0].removesuffix(".tsv")
        s = float(pd.read_csv(tsv, sep="\t")["s"].iloc[0])
        r = out.setdefault(stage, {"jobs": 0, "total_s": 0.0, "max_s": 0.0})
        r["jobs"], r["total_s"], r["max_s"] = r["jobs"] + 1, round(r["total_s"] + s, 1), max(r["max_s"], s)
    return out


def step_study(args, device: torch.device) -> dict:
    """The kit's smoke study end to end through Snakemake, from an empty results directory."""
    import pandas as pd
    import yaml
    from gpu_kit_data import kit_config

    from pipeline.layout import METRICS, study_dir
    from pipeline.models.loading import default_dtype, dtype_name

    config = kit_study_config(args, device)
    results = ROOT / study_dir(config["study"])
    shutil.rmtree(results, ignore_errors=True)
    cfg_file = args.work / "gpu-kit-study.yaml"
    cfg_file.write_text(yaml.safe_dump(kit_config(args.data, device.type)))  # as --configfile
    log_file = args.logs / "gpu-check.study.log"
    command = [sys.executable, "-m", "snakemake", "--cores", str(args.cores), "--configfile", str(cfg_file)]
    print(f"  {' '.join(command)} (log: {log_file})", flush=True)
    with log_file.open("w") as log:
        done = subprocess.run(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        tail = log_file.read_text().splitlines()[-40:]
        raise RuntimeError(f"snakemake exit {done.returncode}:\n" + "\n".join(tail))
    metrics = pd.read_parquet(results / METRICS)
    have = set(zip(metrics["modification"], metrics["eval_data"]))
    missing = [pair for pair in STUDY_ROWS if pair not in have]
    if missing:
        raise RuntimeError(f"the metrics table lacks rows of {missing}")
    dtype = dtype_name(default_dtype(device))
    evaluated = metrics[
        metrics["eval_data"].isin(["pretrain", "mbpp"]) | metrics["eval_data"].str.startswith("benchmark:")
    ]
    # the curvature stage, the linearization gap and the NTK run in float32 on every device
    evaluated = evaluated[~evaluated["metric"].str.startswith(("hessian", "lin_", "ntk_"))]
    dtypes = sorted({json.loads(e).get("dtype", "unrecorded") for e in evaluated["extra"]})
    if dtypes != [dtype]:
        raise RuntimeError(f"models were evaluated in {dtypes}, expected only {dtype} on {device.type}")
    sft = metrics[(metrics["modification"] == "sft") & (metrics["eval_data"] == "pretrain")]
    precisions = sorted({json.loads(e)["precision"] for e in sft["extra"]})
    judged = metrics[(metrics["eval_data"] == "alpaca_eval") & (metrics["metric"] == "n_judged")]["value"]
    unparsable = metrics[(metrics["eval_data"] == "alpaca_eval") & (metrics["metric"] == "n_unparsable")]
    figures = sorted(p.name for p in (results / "figures").glob("*.png"))
    curvature = results / "analysis" / "curvature_summary.parquet"
    if not curvature.is_file() or not figures:
        raise RuntimeError(f"missing outputs: curvature summary {curvature.is_file()}, figures {figures}")
    pre = metrics[(metrics["eval_data"] == "pretrain") & (metrics["metric"] == "ppl")]
    return {
        "jobs": sum(r["jobs"] for r in stage_seconds(results).values()),
        "rows": len(metrics),
        "eval_dtype": dtype,
        "finetune_precision": precisions,
        "judged_pairs": int(judged.sum()),
        "unparsable": int(unparsable["value"].sum()),
        "figures": figures,
        "pretrain_ppl": {
            m: round(float(v), 3) for m, v in pre.groupby("modification")["value"].median().items()
        },
        "stages": stage_seconds(results),
    }


# --- one fine-tuning job under torchrun against one process --------------------------------------

COMPARED = [  # (eval_data, split, metric) of a fine-tuning job's rows compared across paths
    ("pretrain", "validation", "ppl"),
    ("mbpp", "validation", "ppl"),
    ("mbpp", "test", "ppl"),
    ("weights", None, "distance_l2"),
]
BENCH_ACC = ("benchmark:arc_easy", "validation", "acc")  # 16 items: may differ by one in bf16


def job_figures(rows) -> dict[str, float]:
    import pandas as pd

    df = pd.DataFrame(rows)
    out = {}
    for eval_data, split, metric in [*COMPARED, BENCH_ACC]:
        m = df[(df["eval_data"] == eval_data) & (df["metric"] == metric)]
        m = m[m["split"].isna()] if split is None else m[m["split"] == split]
        if len(m) != 1:
            raise RuntimeError(f"{len(m)} rows of {(eval_data, split, metric)} in a fine-tuning job's table")
        out[f"{eval_data}/{split}/{metric}"] = float(m["value"].iloc[0])
    return out


def max_rel_diff(a: dict[str, float], b: dict[str, float]) -> float:
    """Over the continuous figures (COMPARED)."""
    keys = [f"{e}/{s}/{m}" for e, s, m in COMPARED]
    return max(abs(a[k] - b[k]) / max(abs(a[k]), 1e-12) for k in keys)


def acc_diff(a: dict[str, float], b: dict[str, float]) -> float:
    key = "/".join(map(str, BENCH_ACC))
    return abs(a[key] - b[key])


def step_torchrun(args, device: torch.device) -> dict:
    """The study's fine-tuning job (its last checkpoint, largest learning rate) in one process and
    on one torchrun rank (NCCL on CUDA); then on that rank stopped as if killed and resumed."""
    import pandas as pd

    from pipeline.data.heldout import PretrainCorpus
    from pipeline.evaluate.benchmark_registry import BenchmarkSettings
    from pipeline.layout import TASK_TABLE, study_path
    from pipeline.models.checkpoints import sweep_checkpoints
    from pipeline.tasks.text import TextTaskSpec
    from pipeline.train.config import FinetuneConfig, execution
    from pipeline.train.finetune_job import FinetuneJob, run_in_process, run_on_ranks
    from pipeline.workflow.config import eval_config
    from pipeline.workflow.params import benchmark_params, finetune_params
    from pipeline.workflow.plans import finetune_plan

    config = kit_study_config(args, device)
    study, ft = config["study"], config["finetune"]
    pt = config["pretrain"]
    spec = sweep_checkpoints(pt["presets"], pt["budgets"], pt["seeds"], study)[-1]
    if not Path(ROOT, spec.path).is_dir():
        raise RuntimeError(f"needs the study step's checkpoint {spec.path} (run the study step first)")
    cfg = replace(
        FinetuneConfig(**finetune_params(config, "sft"), **execution(FinetuneConfig, ft)),
        checkpoint_every=4,
        linearization_tokens=0,  # the gap needs the whole model in one process: not on ranks
        # on CUDA the memory planner's micro-batch, as the workflow gives a job (its `micro_batch`)
        micro_batch_size=finetune_plan(spec, config).micro_batch if device.type == "cuda" else None,
    )
    work = args.work / "torchrun"
    shutil.rmtree(work, ignore_errors=True)

    def job(name: str, **kw) -> FinetuneJob:
        return FinetuneJob(
            spec=spec,
            cfg=cfg,
            task=TextTaskSpec(ft["tasks"][0], str(ROOT / study_path(study, TASK_TABLE, task=ft["tasks"][0]))),
            corpus=PretrainCorpus(
                str(ROOT / study_path(study, "data/corpus.parquet")), **eval_config(config)
            ),
            learning_rate=max(ft["learning_rates"]),
            lambda_reg=0.0,
            seed=0,
            study=study,
            state_dir=str(work / f"{name}-state"),
            metrics_path=str(work / f"{name}.parquet"),
            path=str(ROOT / spec.path),
            device=device.type,
            suite=BenchmarkSettings(**benchmark_params(config)) if benchmark_params(config) else None,
            **kw,
        )

    t0 = time.perf_counter()
    single = job_figures(run_in_process(job("single")))
    t1 = time.perf_counter()
    ranked = job("rank")
    run_on_ranks(ranked, work / "rank.json")
    on_rank = job_figures(pd.read_parquet(ranked.metrics_path).to_dict("records"))
    t2 = time.perf_counter()
    killed = job("resumed", stop_after=cfg.checkpoint_every * 2)
    run_on_ranks(killed, work / "killed.json")
    if not pd.read_parquet(killed.metrics_path).empty or not Path(killed.state_dir).is_dir():
        raise RuntimeError("the job stopped as if killed wrote rows or kept no resume state")
    resumed = replace(killed, stop_after=None)
    run_on_ranks(resumed, work / "resumed.json")
    after_resume = job_figures(pd.read_parquet(resumed.metrics_path).to_dict("records"))
    tol = 2e-2 if device.type == "cuda" else 1e-4  # bf16 compute: autocast (one process) vs FSDP2 casts
    acc_tol = 1 / config["eval"]["benchmarks"]["limit"] + 1e-9 if device.type == "cuda" else 0.0
    vs_single, vs_uninterrupted = max_rel_diff(single, on_rank), max_rel_diff(on_rank, after_resume)
    accs = max(acc_diff(single, on_rank), acc_diff(on_rank, after_resume))
    figures = {
        "backend": "nccl" if device.type == "cuda" else "gloo",
        "single": single,
        "one_rank": on_rank,
        "resumed": after_resume,
        "max_rel_diff_rank_vs_single": vs_single,
        "max_rel_diff_resumed_vs_uninterrupted": vs_uninterrupted,
        "tolerance": tol,
        "max_benchmark_acc_diff": accs,
        "benchmark_acc_tolerance": acc_tol,
        "single_s": round(t1 - t0, 1),
        "one_rank_s": round(t2 - t1, 1),
    }
    if not (vs_single <= tol and vs_uninterrupted <= tol and accs <= acc_tol):
        raise RuntimeError(f"outside the tolerance {tol}: {json.dumps(figures)}")
    return figures


# --- generation throughput ----------------------------------------------------------------------


def step_generation(args, device: torch.device) -> dict:
    """HF `generate` (greedy, KV cache) of the model in bf16 on CUDA (float32 on CPU): tokens/s of
    `--gen-new-tokens` new tokens after a `--gen-prompt`-token prompt, per batch size."""
    from pipeline.models.loading import dtype_name

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = fresh_model(args.model, device).to(dtype).eval()
    gen = torch.Generator().manual_seed(0)
    new = args.gen_new_tokens
    rates = {}
    for batch in [args.gen_batches[0], *args.gen_batches]:  # the first: warm-up, not reported
        ids = torch.randint(2, model.config.vocab_size, (batch, args.gen_prompt), generator=gen).to(device)
        sync(device)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=new,
                min_new_tokens=new,  # random weights: no early end of sequence
                do_sample=False,
                pad_token_id=model.config.pad_token_id,
            )
        sync(device)
        seconds = time.perf_counter() - t0
        assert out.shape == (batch, args.gen_prompt + new), out.shape
        rates[str(batch)] = batch * new / seconds
    return {"dtype": dtype_name(dtype), "new_tokens": new, "tokens_per_s": rates}


# --- the run ------------------------------------------------------------------------------------


def step_vlm(args, device: torch.device) -> dict:
    """LLaVA's stage 2 on the device: a random CLIP ViT-L/14-336 tower (frozen, 576 image tokens) and
    projector around the model of --model (OLMo-1B's architecture on a GPU), bf16-mixed with
    activation checkpointing, by the pipeline's loop: step time and peak memory beside the planner
    (the tower counted as frozen parameters). On a CPU (--model tiny) a tiny tower."""
    from transformers import CLIPVisionConfig, CLIPVisionModel

    from pipeline.data.batches import IGNORE_INDEX
    from pipeline.models.shapes import shape_of
    from pipeline.multimodal.config import HUB_TOWERS
    from pipeline.multimodal.llava import build_llava
    from pipeline.multimodal.tower import patch_tokens
    from pipeline.train.config import TrainConfig
    from pipeline.train.loop import train
    from pipeline.train.memory import GIB, estimate
    from pipeline.train.recompute import enable_activation_checkpointing

    hidden, inter, layers, size, patch = (
        HUB_TOWERS["openai/clip-vit-large-patch14-336"] if args.model != "tiny" else (32, 64, 2, 32, 8)
    )
    heads = 16 if args.model != "tiny" else 4
    lm = fresh_model(args.model, device)
    enable_activation_checkpointing(lm)
    torch.manual_seed(1)
    tower_cfg = CLIPVisionConfig(
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        image_size=size,
        patch_size=patch,
    )
    tower = CLIPVisionModel(tower_cfg).to(device)
    image_token = lm.config.vocab_size - 1  # a spare row (OLMo-1B has 24): no resizing
    model = build_llava(lm, tower, image_token, projector_seed=0)
    for n, p_ in model.named_parameters():
        p_.requires_grad_(not n.startswith("model.vision_tower."))
    n_image = patch_tokens(tower_cfg)
    seq_len = max(args.seq_len, n_image + 16)

    def batch_fn(step: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(step)
        rows = torch.randint(2, image_token, (args.batch, seq_len + 1), generator=gen)
        rows[:, 1 : 1 + n_image] = image_token
        labels = rows[:, 1:].clone()
        labels[:, :n_image] = IGNORE_INDEX
        pixels = torch.randn(args.batch, 3, size, size, generator=gen)
        return {"input_ids": rows[:, :-1], "labels": labels, "pixel_values": pixels}

    stamps: list[float] = []
    reset_peak(device)
    cfg = TrainConfig(steps=args.steps, lr=1e-5, precision=args.precision, log_every=args.steps)
    train(model, batch_fn, cfg, callbacks=[step_clock(device, stamps)])
    timed = stamps[args.warmup - 1 :]
    tower_params = sum(t.numel() for t in tower.parameters())
    planned = estimate(shape_of(lm.config), 1, args.batch, seq_len, args.precision, True, frozen=tower_params)
    peak = peak_gib(device)
    return {
        "step_s": (timed[-1] - timed[0]) / (len(timed) - 1),
        "tokens_per_s": args.batch * seq_len * (len(timed) - 1) / (timed[-1] - timed[0]),
        "image_tokens": n_image,
        "tower_params": tower_params,
        "peak_gib": peak,
        "planner_gib": planned.total / GIB,
        "planner": planned.describe(),
        "peak_over_planner": peak / (planned.total / GIB) if peak else None,
    }


STEPS: dict[str, Callable[[argparse.Namespace, torch.device], dict]] = {
    "cuda_tests": step_cuda_tests,
    "training": step_training,
    "pretrain": step_pretrain,
    "perturb_eval": step_perturb_eval,
    "study": step_study,
    "torchrun": step_torchrun,
    "generation": step_generation,
    "vlm": step_vlm,
}


def preflight(args) -> dict:
    """Before any step: the wheelhouse installed and its closure checked (bench/wheelhouse.py), the
    prepared data present. Exits naming every missing thing otherwise."""
    problems: list[str] = []
    info: dict = {"python": platform.python_version()}
    if args.wheels is not None:
        import wheelhouse

        try:
            wheelhouse.preflight(args.wheels, args.site)
        except wheelhouse.PreflightError as err:
            problems.append(str(err.code))
        else:
            info["wheels"] = len(list(args.wheels.glob("*.whl")))
            sys.path.insert(0, str(args.site))
            os.environ["PYTHONPATH"] = os.pathsep.join(
                filter(None, [str(args.site), os.environ.get("PYTHONPATH")])
            )
    sys.path.insert(0, str(ROOT))  # the pipeline package, here and in every process the kit starts
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    if {"study", "torchrun"} & set(args.only):
        if not (args.data / "corpus").is_dir():
            problems.append(
                f"no prepared data in {args.data}: run `make gpu-kit` (bench/gpu_kit_data.py) here"
            )
        needed = ("snakemake", "datasets", "lm_eval", "alpaca_eval")
        missing = [m for m in needed if importlib.util.find_spec(m) is None]
        if missing:
            problems.append(f"not importable: {', '.join(missing)} (carry the wheelhouse: --wheels .whl)")
    if problems:
        sys.exit("gpu-check: stopped before any step:\n" + "\n".join(problems))
    return info


# The issue's GPU targets, declared once: name -> (what it says, its test on the steps' figures).
# A target whose step did not run or did not pass is None (not measured), not False.
TARGETS: dict[str, tuple[str, Callable[[dict], bool]]] = {
    "finetune_ge_50k_tok_s": (
        "fine-tuning on OLMo-1B's shape >= 50K tokens/s",
        lambda f: f["training"]["ours"]["tokens_per_s"] >= 50_000,
    ),
    "finetune_ge_1.1x_trainer": (
        "fine-tuning >= 1.1x transformers.Trainer in the same run",
        lambda f: f["training"]["speedup_vs_trainer"] >= 1.1,
    ),
    "pretrain_olmo30m_ge_1m_tok_s": (
        "olmo-30m pre-training >= 1.0M tokens/s",
        lambda f: f["pretrain"]["preset"] == "olmo-30m" and f["pretrain"]["tokens_per_s"] >= 1_000_000,
    ),
    "fsdp2_rank_within_10pct": (
        "one FSDP2 rank within 10% of one process (the job's wall time)",
        lambda f: f["torchrun"]["one_rank_s"] <= 1.10 * f["torchrun"]["single_s"],
    ),
    "planner_within_15pct": (
        "the planner's peak within +-15% on three shapes (training, pretrain, vlm)",
        lambda f: all(
            abs(r["peak_gib"] / r["planner_gib"] - 1) <= 0.15
            for r in (f["training"]["ours"], f["pretrain"], f["vlm"])
        ),
    ),
}


def targets(report: dict) -> dict[str, bool | None]:
    """Each target as a boolean from the report's figures (None: a step it reads did not pass), and
    `every_step_green`: every step of the kit passed (False if one failed; None if one was skipped or
    not run)."""
    steps = report["steps"]
    figures = {name: s.get("figures", {}) for name, s in steps.items() if s["status"] == "pass"}
    out: dict[str, bool | None] = {}
    for name, (_, met) in TARGETS.items():
        try:
            out[name] = bool(met(figures))
        except (KeyError, TypeError, ZeroDivisionError):
            out[name] = None
    if any(s["status"] == "fail" for s in steps.values()):
        out["every_step_green"] = False
    else:  # every step of the kit passed; a skip or a step left out (--only): not measured
        out["every_step_green"] = (
            True if all(steps.get(n, {}).get("status") == "pass" for n in STEPS) else None
        )
    return out


def targets_summary(report: dict) -> str:
    """The targets, one line each: true / false / not measured."""
    words = {True: "true", False: "false", None: "not measured"}
    met = targets(report)
    what = {name: text for name, (text, _) in TARGETS.items()} | {"every_step_green": "every kit step green"}
    return "\n".join(["targets:"] + [f"  {name:30s} {words[v]:12s} {what[name]}" for name, v in met.items()])


def summary(report: dict) -> str:
    """One line per step: status, seconds, its headline figures."""

    def pct(x) -> str:
        return "-" if x is None else f"{100 * x:.1f}%"

    lines = [f"device {report['device']}, torch {report['torch']}, transformers {report['transformers']}"]
    for name, step in report["steps"].items():
        f = step.get("figures", {})
        head = f"{name:13s} {step['status']:4s} {step['seconds']:7.1f} s"
        if step["status"] == "fail":
            lines.append(f"{head}  {step['error'].splitlines()[0][:200]}")
        elif name == "training":
            o, t = f["ours"], f["trainer"]
            lines.append(
                f"{head}  ours {o['tokens_per_s']:,.0f} tok/s MFU {pct(o['mfu_vs_spec'])} (spec) / "
                f"{pct(o['mfu_vs_measured'])} (measured); Trainer {t['tokens_per_s']:,.0f} tok/s; "
                f"ours / Trainer: {f['speedup_vs_trainer']:.2f}x; peak {o['peak_gib']} GiB vs planner "
                f"{o['planner_gib']:.2f} GiB"
            )
        elif name == "pretrain":
            lines.append(
                f"{head}  {f['preset']} batch {f['batch']} x {f['seq_len']}: {f['tokens_per_s']:,.0f} tok/s, "
                f"{f['tflops']:.1f} TFLOP/s delivered (gpu.tflops), MFU {pct(f['mfu_vs_spec'])} (spec) / "
                f"{pct(f['mfu_vs_measured'])} (measured), "
                f"peak {f['peak_gib']} GiB vs planner {f['planner_gib']:.2f} GiB"
            )
        elif name == "perturb_eval":
            lines.append(
                f"{head}  perturbation {f['perturb_s']:.2f} s, perplexity {f['eval_tokens_per_s']:,.0f} tok/s"
            )
        elif name == "study":
            lines.append(
                f"{head}  {f['jobs']} jobs, {f['rows']} rows, eval dtype {f['eval_dtype']}, "
                f"judged pairs {f['judged_pairs']}"
            )
        elif name == "torchrun":
            lines.append(
                f"{head}  {f['backend']}: rank vs one process {f['max_rel_diff_rank_vs_single']:.2e}, "
                f"resumed vs uninterrupted {f['max_rel_diff_resumed_vs_uninterrupted']:.2e} "
                f"(tolerance {f['tolerance']})"
            )
        elif name == "generation":
            rates = ", ".join(f"batch {b}: {r:,.0f}" for b, r in f["tokens_per_s"].items())
            lines.append(f"{head}  {f['dtype']} tokens/s {rates}")
        else:
            lines.append(f"{head}  {f.get('summary', f.get('reason', ''))}")
    return "\n".join(lines)


def write(report: dict, out: Path | None) -> None:
    if out is not None:
        tmp = out.with_name(f".{out.name}.tmp")
        tmp.write_text(json.dumps(report, indent=2, default=str) + "\n")
        os.replace(tmp, out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="olmo-1b", choices=["olmo-1b", "tiny"])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--precision", default="bf16-mixed", choices=["bf16-mixed", "fp32"])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--pretrain-batch", type=int, default=64, help="pretrain step: sequences per step")
    ap.add_argument(
        "--pretrain-seq-len", type=int, default=1024, help="pretrain step (capped at the context)"
    )
    ap.add_argument("--gen-batches", type=lambda s: [int(x) for x in s.split(",")], default=[1, 8, 32])
    ap.add_argument("--gen-prompt", type=int, default=128)
    ap.add_argument("--gen-new-tokens", type=int, default=128)
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="Snakemake's --cores (study)")
    ap.add_argument("--only", nargs="+", choices=list(STEPS), default=list(STEPS), help="steps to run")
    ap.add_argument("--wheels", type=Path, default=None, help="wheelhouse to install first (.whl)")
    ap.add_argument("--site", type=Path, default=Path(tempfile.gettempdir()) / "overtrain-site")
    ap.add_argument("--data", type=Path, default=KIT_DATA, help="the study's prepared data (.gpu-kit)")
    ap.add_argument("--out", type=Path, default=None, help="the JSON report (and its logs beside it)")
    args = ap.parse_args()
    if args.steps < args.warmup + 2:
        ap.error("--steps must exceed --warmup by at least 2")
    args.data = args.data.resolve()
    info = preflight(args)
    args.work = Path(tempfile.mkdtemp(prefix="gpu-check-"))  # configs, the torchrun step's job files
    args.logs = args.out.resolve().parent if args.out else args.work  # the study's log, beside the JSON
    args.logs.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    report: dict = {
        "device": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor() or "cpu",
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "preflight": info,
        "settings": {k: str(v) for k, v in vars(args).items()},
        "steps": {},
    }
    for name in args.only:
        print(f"[{name}] ...", flush=True)
        t0 = time.perf_counter()
        try:
            figures = STEPS[name](args, device)
            entry = {"status": figures.pop("status", "pass"), "figures": figures}
        except Exception as err:  # a failed step is reported; the next ones still run
            entry = {
                "status": "fail",
                "error": f"{type(err).__name__}: {err}",
                "traceback": traceback.format_exc(),
            }
        entry["seconds"] = round(time.perf_counter() - t0, 1)
        report["steps"][name] = entry
        write(report, args.out)
        print(f"[{name}] {entry['status']} in {entry['seconds']:.0f} s", flush=True)
    report["targets"] = targets(report)
    write(report, args.out)
    print(summary(report))
    print(targets_summary(report))
    if any(s["status"] == "fail" for s in report["steps"].values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
