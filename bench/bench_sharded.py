"""Sharded fine-tuning (FSDP2, gloo ranks on CPU) against one process, side by side in one run.

1. Metrics: one fine-tuning job of a study run in this process and on N ranks (torchrun, the
   pipeline's own launcher): pre-training perplexity, ID perplexity, ‖θ_ft − θ_pre‖ and their
   relative differences (target: <= 1e-4; docs/benchmarks.md, '2 gloo ranks vs 1 process').
2. Memory: the bytes each rank holds of parameters, gradients and AdamW state after its first
   optimiser step (the training loop measures them), for 1 and N ranks: sharding should divide
   them by N (up to padding of dimensions that N does not divide).

The job is the smoke study's fine-tuning settings (tests/smoke/config.yaml) on a checkpoint and a
task table of an existing study, e.g. after `make smoke`:

usage: python bench/bench_sharded.py [--study results/ci-smoke] [--checkpoint tiny-262144-s0]
           [--task mr] [--ranks 2] [--steps 16]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import yaml

from pipeline.data.heldout import PretrainCorpus
from pipeline.models.checkpoints import CheckpointSpec
from pipeline.ranks import SINGLE
from pipeline.tasks.text import TextTaskSpec
from pipeline.train.config import FinetuneConfig, execution, hyperparameters
from pipeline.train.finetune_job import FinetuneJob, run_in_process, run_on_ranks
from pipeline.train.launch import torchrun_command

ROOT = Path(__file__).resolve().parents[1]

COMPARED = [
    ("pretrain", "validation", "ppl"),
    ("{task}", "validation", "ppl"),
    ("{task}", "test", "ppl"),
    ("weights", None, "distance_l2"),
]


def smoke_finetune_config(steps: int) -> tuple[FinetuneConfig, dict]:
    """The smoke study's fine-tuning settings and eval section (config.yaml + tests/smoke overlay)."""
    from snakemake.utils import update_config

    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    update_config(cfg, yaml.safe_load((ROOT / "tests" / "smoke" / "config.yaml").read_text()))
    section = cfg["finetune"] | {"max_steps": steps}
    ft = FinetuneConfig(**hyperparameters(FinetuneConfig, section), **execution(FinetuneConfig, section))
    return ft, cfg["eval"]


def describe(args, cfg: FinetuneConfig, eval_cfg: dict, out: Path, name: str) -> FinetuneJob:
    study = Path(args.study)
    budget = args.checkpoint.rsplit("-", 1)[-1]
    spec = CheckpointSpec(
        args.checkpoint, "local", "bench", 1, path=str(study / "pretrain" / "tiny" / budget)
    )
    return FinetuneJob(
        spec=spec,
        cfg=cfg,
        task=TextTaskSpec(args.task, str(study / "data" / "tasks" / f"{args.task}.parquet")),
        corpus=PretrainCorpus(str(study / "data" / "corpus.parquet"), **eval_cfg),
        learning_rate=args.lr,
        lambda_reg=0.0,
        seed=0,
        study="bench",
        state_dir=str(out / f"{name}-state"),
        metrics_path=str(out / f"{name}.parquet"),
        path=spec.path,
        device="cpu",
        threads=args.ranks,
    )


def figures(df: pd.DataFrame, task: str) -> dict[str, float]:
    out = {}
    for eval_data, split, metric in COMPARED:
        eval_data = eval_data.format(task=task)
        m = df[(df["eval_data"] == eval_data) & (df["metric"] == metric)]
        m = m[m["split"].isna()] if split is None else m[m["split"] == split]
        out[f"{eval_data}/{split or '-'}/{metric}"] = float(m["value"].iloc[0])
    return out


def measure_state(job_file: str) -> None:
    """(a torchrun worker, or this process) Train 2 steps; print this rank's state bytes as JSON."""
    import torch

    from pipeline.models.loading import load_checkpoint
    from pipeline.train import finetune as ft
    from pipeline.train.distributed import init_ranks, shard_model
    from pipeline.train.loop import train
    from pipeline.train.placement import Sharded, Whole

    job = FinetuneJob.from_json(Path(job_file).read_text())
    cfg, spec = job.cfg, job.spec
    sharded = "WORLD_SIZE" in os.environ  # under torchrun
    ranks, device = init_ranks("cpu", cfg.collective_timeout_s) if sharded else (SINGLE, "cpu")
    model, tokenizer, _, _ = load_checkpoint(spec, spec.path, device, dtype=torch.float32)
    if sharded:
        shard_model(model, cfg.precision or "fp32")
    batch_fn, _ = ft._train_data(job.task.open(), tokenizer, cfg.seq_len or 64, cfg, job)
    placement = Sharded(ranks) if sharded else Whole()
    result = train(
        model, batch_fn, cfg.train_config(2, 1e-3), micro_batch_size=cfg.micro_batch_size, placement=placement
    )
    if ranks.main:
        print("STATE " + json.dumps(result.state_bytes), flush=True)
    if sharded:
        torch.distributed.destroy_process_group()


def state_of(ranks: int, job_file: Path) -> dict[str, int]:
    program = (str(Path(__file__)), "--measure-state", str(job_file))
    cmd = torchrun_command(ranks, *program) if ranks > 1 else [sys.executable, *program]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    return json.loads(next(line[6:] for line in out.splitlines() if line.startswith("STATE ")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--study", default=str(ROOT / "results" / "ci-smoke"))
    ap.add_argument("--checkpoint", default="tiny-262144-s0")
    ap.add_argument("--task", default="mr")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--measure-state", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure_state:
        return measure_state(args.measure_state)

    cfg, eval_cfg = smoke_finetune_config(args.steps)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        one = describe(args, cfg, eval_cfg, out, "one")
        many = describe(args, cfg, eval_cfg, out, "many")
        single = pd.DataFrame(run_in_process(one))
        run_on_ranks(dataclasses.replace(many, ranks=args.ranks), out / "job.json")
        sharded = pd.read_parquet(many.metrics_path)
        print(
            f"\n{args.checkpoint} fine-tuned on {args.task}, {args.steps} steps of {cfg.batch_size} "
            f"(micro-batch {cfg.micro_batch_size}), {cfg.precision or 'fp32'}: "
            f"1 process vs {args.ranks} gloo ranks"
        )
        a, b = figures(single, args.task), figures(sharded, args.task)
        print(f"{'metric':32s} {'1 process':>14s} {f'{args.ranks} ranks':>14s} {'rel. diff':>10s}")
        for key in a:
            print(f"{key:32s} {a[key]:14.8g} {b[key]:14.8g} {abs(b[key] - a[key]) / abs(a[key]):10.2e}")

        job_file = out / "state.json"
        job_file.write_text(one.to_json())
        states = {n: state_of(n, job_file) for n in (1, args.ranks)}
        print(f"\nper-rank state after the first step (MiB): 1 process vs {args.ranks} ranks (ratio)")
        for key in states[1]:
            s1, sn = states[1][key] / 2**20, states[args.ranks][key] / 2**20
            print(f"{key:32s} {s1:14.3f} {sn:14.3f} {sn / s1:10.3f}")
        t1, tn = sum(states[1].values()), sum(states[args.ranks].values())
        print(f"{'total':32s} {t1 / 2**20:14.3f} {tn / 2**20:14.3f} {tn / t1:10.3f}")


if __name__ == "__main__":
    main()
