"""Throughput of the pipeline's training loop and perplexity evaluation vs the libraries.

Prints tokens/s of (1) pipeline.train.train vs transformers.Trainer on the same model,
data, batch, schedule and thread count, and (2) pipeline.evaluate.eval_perplexity vs
lm-eval's HFLM.loglikelihood_rolling on the same model and text (and their bits/byte).
Runs alternate (ours, theirs, ours, theirs, ...) and report medians, because run-to-run
noise on a shared 2-core machine is large. Also reports the denormal-flush effect.

usage: python bench/bench_train_eval.py [--threads 2] [--steps 60] [--repeats 3]
"""

from __future__ import annotations

import argparse
import logging
import math
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from pipeline.corpus import load_embedded
from pipeline.evaluate import build_eval_set, eval_perplexity
from pipeline.models import build_model, model_config
from pipeline.tokenizer import as_hf_tokenizer, encode_documents, token_stream, train_bpe
from pipeline.train import ChunkSampler, TrainConfig, train

ROOT = Path(__file__).resolve().parents[1]
SEQ, BATCH = 128, 16


def make_data(tmp: Path):
    docs = load_embedded("moby_dick", ROOT / "data" / "packages")
    tok = train_bpe([d.text for d in docs[:100]], vocab_size=2048)
    tok.save(str(tmp / "tokenizer.json"))
    hf = as_hf_tokenizer(tmp / "tokenizer.json")
    train_tokens = token_stream(hf, [d.text for d in docs[:100]])
    heldout = [d.text for d in docs[100:130]]
    return hf, train_tokens, heldout


def fresh_model(hf):
    return build_model(model_config("tiny", len(hf), hf.eos_token_id, hf.pad_token_id), seed=0)


def ours_train(hf, tokens, steps: int) -> float:
    model = fresh_model(hf)
    sampler = ChunkSampler(tokens, SEQ, BATCH, seed=0)
    res = train(model, sampler.batch, TrainConfig(steps=steps, lr=3e-2, log_every=10**9, checkpoint_every=10**9))
    return steps * SEQ * BATCH / res.seconds


def trainer_train(hf, tokens, steps: int, tmp: Path) -> float:
    from transformers import Trainer, TrainingArguments

    sampler = ChunkSampler(tokens, SEQ, BATCH, seed=0)

    class Chunks(torch.utils.data.Dataset):
        def __len__(self):
            return sampler.n_chunks

        def __getitem__(self, i):
            row = torch.from_numpy(tokens[i * SEQ : i * SEQ + SEQ].astype(np.int64))
            return {"input_ids": row, "labels": row.clone()}

    args = TrainingArguments(
        output_dir=str(tmp / "trainer"), per_device_train_batch_size=BATCH, max_steps=steps, learning_rate=3e-2,
        lr_scheduler_type="cosine", warmup_steps=0.1, weight_decay=0.1, adam_beta1=0.9, adam_beta2=0.95,
        max_grad_norm=1.0, logging_steps=10**9, save_strategy="no", report_to=[], use_cpu=True,
        dataloader_num_workers=0, disable_tqdm=True, seed=0,
    )
    trainer = Trainer(model=fresh_model(hf), args=args, train_dataset=Chunks())
    out = trainer.train()
    return steps * SEQ * BATCH / out.metrics["train_runtime"]


def eval_pair(hf, model, texts: list[str]) -> tuple[float, float, float, float]:
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    docs = encode_documents(hf, texts)
    n_tokens = sum(map(len, docs))
    t0 = time.perf_counter()
    data = build_eval_set(docs, texts, hf.eos_token_id, SEQ, hf.pad_token_id)
    ours = eval_perplexity(model, data, batch_size=64)
    t_ours = time.perf_counter() - t0
    lm = HFLM(pretrained=model, tokenizer=hf, max_length=SEQ, batch_size=64)
    reqs = [Instance(request_type="loglikelihood_rolling", doc={}, arguments=(t,), idx=i) for i, t in enumerate(texts)]
    t0 = time.perf_counter()
    loglik = sum(lm.loglikelihood_rolling(reqs, disable_tqdm=True))
    t_theirs = time.perf_counter() - t0
    bpb_theirs = -loglik / sum(len(t.encode()) for t in texts) / math.log(2)
    return n_tokens / t_ours, n_tokens / t_theirs, ours["bpb"], bpb_theirs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="bench-"))
    hf, tokens, heldout = make_data(tmp)
    print(f"tiny Olmo2 ({sum(p.numel() for p in fresh_model(hf).parameters()) / 1e6:.2f}M params), batch {BATCH}x{SEQ}, {args.threads} threads, {args.steps} steps")

    ours, theirs = [], []
    for _ in range(args.repeats):
        ours.append(ours_train(hf, tokens, args.steps))
        theirs.append(trainer_train(hf, tokens, args.steps, tmp))
    o, t = statistics.median(ours), statistics.median(theirs)
    print(f"train  pipeline loop {o:8.0f} tok/s | HF Trainer {t:8.0f} tok/s | ratio {o / t:.2f}x  (target >= 1.5x)")

    torch.set_flush_denormal(False)
    nodenorm = statistics.median(ours_train(hf, tokens, args.steps) for _ in range(max(1, args.repeats - 1)))
    torch.set_flush_denormal(True)
    print(f"train  pipeline loop without denormal flush {nodenorm:8.0f} tok/s ({o / nodenorm:.2f}x slower)")

    model = fresh_model(hf)
    train(model, ChunkSampler(tokens, SEQ, BATCH, seed=0).batch, TrainConfig(steps=100, lr=3e-2, log_every=10**9))
    rates = [eval_pair(hf, model, heldout) for _ in range(args.repeats)]
    eo, et = statistics.median(r[0] for r in rates), statistics.median(r[1] for r in rates)
    bpb_o, bpb_t = rates[0][2], rates[0][3]
    print(f"eval   pipeline {eo:8.0f} tok/s | lm-eval loglikelihood_rolling {et:8.0f} tok/s | ratio {eo / et:.2f}x  (target >= 3x)")
    print(f"eval   bits/byte pipeline {bpb_o:.5f} vs lm-eval {bpb_t:.5f} (rel. diff {abs(bpb_o - bpb_t) / bpb_t:.2e}, target < 5e-3)")


if __name__ == "__main__":
    main()
