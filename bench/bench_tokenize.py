"""Tokenization fanned out over files (pipeline/data/shard_tokenize.py) against `tokenizers`' own
`encode_batch`, and the memory of a tokenization job and of a pre-training job as the data grows.

1. Throughput per core: the default study's embedded corpus (config.yaml corpus.embedded) as one
   JSON-lines.gz file, tokenized into a shard by `tokenize_file` (reading, tokenizing, writing the
   shard and its index) against `Tokenizer.encode_batch` alone over the same batches of documents
   (nothing read or written); both on one thread (RAYON_NUM_THREADS=1), the study's tokenizer (a
   2,048-token BPE trained on the corpus). Best of `--repeats`, interleaved. Target: ≥ 0.8x.
2. Peak RSS (a fresh process each, ru_maxrss): a tokenization job on the corpus 1x and Nx
   (`--times`, the same documents repeated), and a pre-training job (the tiny preset, `--steps`
   steps) reading that 1x or Nx shard by memmap. Target: within 10% between 1x and Nx.

usage: python bench/bench_tokenize.py [--times 20] [--repeats 3] [--steps 60]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ["RAYON_NUM_THREADS"] = "1"  # before tokenizers is imported: one core

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.data.corpus import load_embedded  # noqa: E402
from pipeline.data.shard_tokenize import read_documents, tokenize_file  # noqa: E402
from pipeline.data.tokenizer import EOS, train_bpe  # noqa: E402

BATCH = 1024


def corpus_texts() -> list[str]:
    import yaml

    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    packages = ROOT / config["corpus"].get("package_dir", "data/packages")
    return [d.text for name in config["corpus"]["embedded"] for d in load_embedded(name, packages)]


def write_jsonl_gz(path: Path, texts: list[str], times: int) -> Path:
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=1) as f:
        for _ in range(times):
            for text in texts:
                f.write(json.dumps({"text": text}) + "\n")
    return path


def encode_batch_seconds(tokenizer_file: Path, source: Path) -> tuple[float, int]:
    """`encode_batch` alone over the file's batches (read beforehand): seconds and tokens."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    batches = list(read_documents(source, "text", BATCH))
    start = time.perf_counter()
    tokens = sum(len(e.ids) + 1 for b in batches for e in tokenizer.encode_batch(b, add_special_tokens=False))
    return time.perf_counter() - start, tokens


def shard_seconds(tokenizer_file: Path, source: Path, out: Path) -> tuple[float, int]:
    start = time.perf_counter()
    record = tokenize_file(
        source, tokenizer_file, EOS, out / "s.bin", out / "s.idx", out / "s.json", batch_documents=BATCH
    )
    return time.perf_counter() - start, record["tokens"]


# peak RSS of this process: VmHWM (ru_maxrss would carry the parent's peak across fork and exec)
PEAK = "int(next(x for x in open('/proc/self/status') if x.startswith('VmHWM')).split()[1]) / 1024"
CHILD_TOKENIZE = f"""
import json, sys
from pipeline.data.shard_tokenize import tokenize_file
from pipeline.data.tokenizer import EOS
src, tok, out = sys.argv[1:4]
r = tokenize_file(src, tok, EOS, out + ".bin", out + ".idx", out + ".json", batch_documents=1024)
print(json.dumps({{"tokens": r["tokens"], "maxrss_mb": {PEAK}}}))
"""

CHILD_PRETRAIN = f"""
import json, sys, torch
from pipeline.data.token_shards import ShardSet
from pipeline.train.config import PretrainConfig
from pipeline.train.pretrain import pretrain_run
shard, tok_dir, out, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
torch.set_num_threads(1)
hp = dict(seq_len=128, batch_size=16, lr=1e-2, betas=[0.9, 0.95], weight_decay=0.1, warmup_fraction=0.1)
pretrain_run(
    train_tokens=None, token_shards=ShardSet((shard,), "uint16"), tokenizer_path=tok_dir, preset="tiny",
    budget=steps * 16 * 128, seed=0, cfg=PretrainConfig(**hp), out_dir=out + "/run",
    state_path=out + "/state",
)
print(json.dumps({{"maxrss_mb": {PEAK}}}))
"""


def child(code: str, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAYON_NUM_THREADS": "1"}
    res = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=ROOT
    )
    if res.returncode:
        raise RuntimeError(res.stderr[-3000:])
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--times", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=60)
    args = ap.parse_args()
    texts = corpus_texts()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        tok_dir = tmp / "tok"
        tok_dir.mkdir()
        tokenizer_file = tok_dir / "tokenizer.json"
        train_bpe(texts, vocab_size=2048).save(str(tokenizer_file))
        from pipeline.data.tokenizer import as_hf_tokenizer

        as_hf_tokenizer(tokenizer_file).save_pretrained(tok_dir)
        one = write_jsonl_gz(tmp / "x1.jsonl.gz", texts, 1)
        many = write_jsonl_gz(tmp / f"x{args.times}.jsonl.gz", texts, args.times)
        print(f"corpus: {len(texts):,} documents, {one.stat().st_size / 2**20:.1f} MiB gzipped (1x)")

        print("\n1. throughput on one core (best of", args.repeats, "runs, interleaved)")
        ours, theirs = [], []
        for _ in range(args.repeats):
            s, tokens = encode_batch_seconds(tokenizer_file, one)
            theirs.append(tokens / s)
            s, tokens_ours = shard_seconds(tokenizer_file, one, tmp)
            ours.append(tokens_ours / s)
        assert tokens == tokens_ours, (tokens, tokens_ours)
        print(f"   encode_batch alone:            {max(theirs):>12,.0f} tokens/s ({tokens:,} tokens)")
        print(f"   tokenize_file (read+write):    {max(ours):>12,.0f} tokens/s")
        ratio = max(ours) / max(theirs)
        print(f"   ratio {ratio:.2f} (target >= 0.8)")

        print(f"\n2. peak RSS (fresh process each), 1x vs {args.times}x")
        rss = {}
        for name, source in (("1x", one), (f"{args.times}x", many)):
            tok = child(CHILD_TOKENIZE, str(source), str(tokenizer_file), str(tmp / f"shard{name}"))
            run_dir = tmp / f"run{name}"
            run_dir.mkdir()
            pre = child(
                CHILD_PRETRAIN, str(tmp / f"shard{name}.bin"), str(tok_dir), str(run_dir), str(args.steps)
            )
            rss[name] = (tok["maxrss_mb"], pre["maxrss_mb"])
            print(
                f"   {name:>4}: {tok['tokens']:>12,} tokens  tokenization {tok['maxrss_mb']:7.1f} MiB  "
                f"pre-training ({args.steps} steps) {pre['maxrss_mb']:7.1f} MiB"
            )
        (t1, p1), (tn, pn) = rss["1x"], rss[f"{args.times}x"]
        print(f"   tokenization {tn / t1 - 1:+.1%}, pre-training {pn / p1 - 1:+.1%} (target within 10%)")
        print(f"ratio {ratio:.2f} tokenize_rss {tn / t1 - 1:+.3f} pretrain_rss {pn / p1 - 1:+.3f}")


if __name__ == "__main__":
    main()
