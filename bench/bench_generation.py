"""Generation throughput: batched, left-padded `generate_responses` against one prompt at a time,
side by side in one run (alternating, medians of `--repeats`).

A freshly initialised model of each size preset (greedy: both contenders produce the same tokens,
tests/evaluate/test_generation.py), a BPE trained on Moby-Dick, and 32 instructions cut from
Moby-Dick sentences (real text, 5-40 words). Rates count the response tokens kept (up to EOS).

    python bench/bench_generation.py [--presets tiny olmo-15m] [--threads 2]
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from pathlib import Path

import torch

from pipeline.data.corpus import load_embedded
from pipeline.data.tokenizer import as_hf_tokenizer, train_bpe
from pipeline.evaluate.generation import GenerationConfig, generate_responses
from pipeline.models.build import build_model, model_config

ROOT = Path(__file__).resolve().parents[1]


def instructions(text: str, n: int) -> list[str]:
    sentences = [s.strip() for s in re.split(r"(?<=[.?!])\s+", text) if 5 <= len(s.split()) <= 40]
    return sentences[:n]


def tokens_per_second(model, tok, prompts: list[str], cfg: GenerationConfig) -> float:
    t0 = time.perf_counter()
    rows = generate_responses(model, tok, prompts, cfg)
    return sum(r["n_tokens"] for r in rows) / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", nargs="+", default=["tiny", "olmo-15m"])
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    docs = load_embedded("moby_dick", ROOT / "data" / "packages")
    tmp = Path("/tmp/bench_generation_tokenizer.json")
    train_bpe([d.text for d in docs[:60]], vocab_size=2048).save(str(tmp))
    tok = as_hf_tokenizer(tmp)
    prompts = instructions(" ".join(d.text for d in docs[60:120]), args.n)
    for preset in args.presets:
        model = build_model(model_config(preset, len(tok), tok.eos_token_id, tok.pad_token_id), seed=0)
        batched = GenerationConfig(max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
        single = GenerationConfig(max_new_tokens=args.max_new_tokens, batch_size=1)
        rates = {"batched": [], "one at a time": []}
        for _ in range(args.repeats):
            rates["batched"].append(tokens_per_second(model, tok, prompts, batched))
            rates["one at a time"].append(tokens_per_second(model, tok, prompts, single))
        b, s = (statistics.median(v) for v in rates.values())
        print(
            f"{preset}: {len(prompts)} prompts x {args.max_new_tokens} new tokens, {args.threads} threads: "
            f"batched ({args.batch_size}) {b:,.0f} tok/s, one at a time {s:,.0f} tok/s: {b / s:.1f}x"
        )


if __name__ == "__main__":
    main()
