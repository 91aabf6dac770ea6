"""Tokenization fanned out over files (pipeline/data/shard_tokenize.py) against `tokenizers`' own
`encode_batch`, and the memory of a tokenization job and of a pre-training job as the data grows.

1. Throughput per core: the default study's embedded corpus (config.yaml corpus.embedded) as one
   JSON-lines.gz file, tokenized into a shard by `tokenize_file` (reading, tokenizing, writing the
   shard and its index) against `Tokenizer.encode_batch` alone over the same batches of documents
   (nothing read or written); both on one thread (RAYON_NUM_THREADS=1), the study's tokenizer (a
   2,048-token BPE trained on the corpus). Best of `--repeats`, interleaved. Target: ≥ 0.8x.
2. Peak RSS (a fresh process each, VmHWM): a tokenization job on the corpus 1x and Nx
   (`--times`, the same documents repeated), and a pre-training job (the tiny preset, `--steps`
   steps) reading that 1x or Nx shard, by the pipeline's positioned reads and, side by side, by a
   memmap (the kernel maps more of the file than each random chunk touches, and the mapped pages
   count in RSS until the map is closed). Target: within 10% between 1x and Nx.
3. What the reader costs: the time to draw training batches from the Nx shard, positioned reads
   against the memmap.

usage: python bench/bench_tokenize.py [--times 20] [--repeats 3] [--steps 60] [--batches 2000]
                                     [--skip-throughput]
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
READERS = ("pread", "memmap")  # the pipeline's reader (pipeline/data/token_shards.py), the contender


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

# the pre-training job reads its shard through the pipeline's reader (positioned reads) or, the
# contender, a memmap of the same file
CHILD_PRETRAIN = f"""
import json, sys, torch
import numpy as np
import pipeline.train.pretrain as pretrain
from pipeline.data.token_shards import ShardSet
from pipeline.train.config import PretrainConfig
from pipeline.train.pretrain_job import PretrainJob
shard, tok_dir, out, steps, reader = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
if reader == "memmap":
    pretrain.open_tokens = lambda path, shards: np.memmap(shards.paths[0], dtype=shards.dtype, mode="r")
torch.set_num_threads(1)
hp = dict(seq_len=128, batch_size=16, lr=1e-2, betas=[0.9, 0.95], weight_decay=0.1, warmup_fraction=0.1)
pretrain.pretrain_run(PretrainJob(
    train_tokens=None, token_shards=ShardSet((shard,), "uint16"), tokenizer_path=tok_dir, preset="tiny",
    budget=steps * 16 * 128, seed=0, cfg=PretrainConfig(**hp), out=out + "/run",
    state_path=out + "/state",
))
file_mb = int(next(x for x in open('/proc/self/status') if x.startswith('RssFile')).split()[1]) / 1024
print(json.dumps({{"maxrss_mb": {PEAK}, "rss_file_mb": file_mb}}))
"""


def read_seconds(shard: Path, reader: str, batches: int) -> float:
    """Seconds to draw `batches` training batches (16 chunks of 129 ids, the default study's) from
    `shard` through `reader`."""
    import numpy as np

    from pipeline.data.batches import ChunkSampler
    from pipeline.data.token_shards import ShardSet, TokenStream

    shards = ShardSet((str(shard),), "uint16")
    tokens = (
        TokenStream.of_shards(shards) if reader == "pread" else np.memmap(shard, dtype="uint16", mode="r")
    )
    sampler = ChunkSampler(tokens, 128, 16, seed=0)
    start = time.perf_counter()
    for step in range(batches):
        sampler.batch(step)
    return time.perf_counter() - start


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
    ap.add_argument("--batches", type=int, default=2000)
    ap.add_argument("--skip-throughput", action="store_true", help="parts 2 and 3 only")
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

        ratio = float("nan")
        if not args.skip_throughput:
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
            rss[name, "tokenization"] = tok["maxrss_mb"]
            print(f"   {name:>4}: {tok['tokens']:>12,} tokens  tokenization {tok['maxrss_mb']:7.1f} MiB")
        for reader in READERS:  # side by side: each reader at 1x, then at Nx
            for name in ("1x", f"{args.times}x"):
                run_dir = tmp / f"run{name}{reader}"
                run_dir.mkdir()
                shard = str(tmp / f"shard{name}.bin")
                pre = child(CHILD_PRETRAIN, shard, str(tok_dir), str(run_dir), str(args.steps), reader)
                rss[name, reader] = pre["maxrss_mb"]
                print(
                    f"   {name:>4}: pre-training ({args.steps} steps) reading by {reader:<6} peak "
                    f"{pre['maxrss_mb']:7.1f} MiB (file pages mapped at end {pre['rss_file_mb']:6.1f})"
                )
        growth = {
            what: rss[f"{args.times}x", what] / rss["1x", what] - 1 for what in ("tokenization", *READERS)
        }
        print(
            "   from 1x to Nx: "
            + ", ".join(f"{w} {g:+.1%}" for w, g in growth.items())
            + " (target within 10%)"
        )
        print(
            f"\n3. drawing {args.batches} batches from the {args.times}x shard "
            f"(best of {args.repeats}, interleaved)"
        )
        seconds = {reader: [] for reader in READERS}
        for _ in range(args.repeats):
            for reader in READERS:
                seconds[reader].append(read_seconds(tmp / f"shard{args.times}x.bin", reader, args.batches))
        for reader in READERS:
            print(f"   {reader:<6} {1e6 * min(seconds[reader]) / args.batches:8.1f} us per batch")
        print(f"ratio {ratio:.2f} " + " ".join(f"{w}_rss {g:+.3f}" for w, g in growth.items()))


if __name__ == "__main__":
    main()
