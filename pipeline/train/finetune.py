"""Supervised fine-tuning of one checkpoint on one task at one (learning rate, λ, seed),
evaluated in memory (Section 3.4, Appendix C.1, Table 4).

AdamW (weight decay 0), warmup, cosine / constant schedule, up to `epochs` epochs with early
stopping over epochs on the in-domain validation split; an optional proximal term
λ‖θ − θ_pre‖² (Section 4). The task is one `FinetuneTask` (pipeline/tasks/: how it batches,
prepares the checkpoint and scores the model); after training, the evaluations the job's settings
select run as a list (pipeline/train/evaluators.py). A killed job resumes from its last state file
(best epoch so far included).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from pipeline.data.encode import lm_sampler
from pipeline.data.replay import replay_rows, with_replay
from pipeline.models.compile import compile_layers, resolve_compile
from pipeline.models.loading import default_dtype, dtype_name, load_checkpoint
from pipeline.models.trained_params import base_parameters, describe, merge, select
from pipeline.tables import metric_row
from pipeline.tasks.base import context
from pipeline.tasks.text import TextTaskSpec
from pipeline.train import resume
from pipeline.train.best_epoch import BestEpoch
from pipeline.train.config import FinetuneConfig, resolve_precision
from pipeline.train.distributed import check_same
from pipeline.train.evaluators import Trained, evaluators
from pipeline.train.linearized import linearize
from pipeline.train.loop import Callback, Loop, TrainResult, train
from pipeline.train.placement import WHOLE, Whole
from pipeline.train.proximal import ProximalStep, ProximalTerm

if TYPE_CHECKING:
    from pipeline.models.checkpoints import CheckpointSpec
    from pipeline.sweeps.cells import Loaded
    from pipeline.tasks.base import FinetuneTask
    from pipeline.train.finetune_job import FinetuneJob

log = logging.getLogger(__name__)


def task_base_rows(
    spec: CheckpointSpec,
    path: str | None,
    task_path: str | Path,
    task_name: str,
    cfg: FinetuneConfig,
    study: str,
    device: str = "cpu",
    loaded: Loaded | None = None,
) -> list[dict]:
    """In-domain metrics of the unmodified checkpoint on a text task (the Δ baseline of fine-tuning),
    in the device's evaluation dtype (`default_dtype`), as the fine-tuned model is evaluated.
    `loaded`: the checkpoint already loaded by the job (rule evaluate), else it is loaded here."""
    model, tokenizer, _, _ = loaded or load_checkpoint(spec, path, device)
    task = TextTaskSpec(task_name, str(task_path)).open()
    evals = task.eval_data(tokenizer, task.max_len(model, cfg), cfg)
    common = dict(**spec.row_fields(study), modification="none", task=task_name, eval_data=task_name)
    rows = []
    for split, data in evals.items():
        result = task.evaluate(model, data, tokenizer, cfg)
        rows += [
            metric_row(**common, split=split, metric=m, value=result[m], extra=dict(dtype=dtype_name(model)))
            for m in task.metrics
        ]
        log.info(
            "base %s on %s/%s: %s",
            spec.name,
            task_name,
            split,
            {m: round(result[m], 4) for m in task.metrics},
        )
    return rows


def _train_data(task: FinetuneTask, tokenizer, max_len: int, cfg: FinetuneConfig, job: FinetuneJob):
    """(batch_fn, steps per epoch) of the training batches: the task's rows, and with a replay
    fraction the pre-training corpus's training chunks after them (pipeline/data/replay.py)."""
    replayed = replay_rows(cfg.batch_size, cfg.replay_fraction)
    if replayed and not task.replays:
        raise ValueError(f"finetune.methods.*.replay_fraction: task {task.name!r} cannot replay text rows")
    batches, per_epoch = task.train_batches(tokenizer, max_len, cfg.batch_size - replayed, job.seed)
    if not replayed:
        return batches, per_epoch
    corpus = job.corpus
    replay, _ = lm_sampler(tokenizer, corpus.train_texts(), max_len, replayed, job.seed, corpus.token_cache)
    log.info(
        "replay: %d of %d rows per batch from the pre-training corpus's training split",
        replayed,
        cfg.batch_size,
    )
    return with_replay(batches, replay.batch, tokenizer.pad_token_id), per_epoch


@dataclass
class Run:
    """A fine-tuning run once set up: the model at θ_pre, its task and data, its resolved config."""

    model: torch.nn.Module
    tokenizer: object
    task: FinetuneTask
    cfg: FinetuneConfig  # precision resolved
    max_len: int
    reference: dict[str, torch.Tensor]  # θ_pre by name (this rank's shards)
    start: dict[str, torch.Tensor]  # the trained parameters at step 0 by name: what λ pulls toward
    batch_fn: Callable[[int], dict]
    per_epoch: int
    total: int
    evals: dict
    compute: object  # the forward pass's context (placement.compute)
    trained_parameters: int  # how many numbers training changes (LoRA: the adapters'; all ranks)
    unlinearize: Callable[[], None] | None  # a linearized run: gives the model its real forward back
    proximal: ProximalStep | None = None  # the decoupled / selective step, once training set it up


def set_up(job: FinetuneJob, placement: Whole) -> Run:
    """Open the task, load the checkpoint (sharded or whole) as the task builds it, keep θ_pre,
    encode the task's data."""
    torch.manual_seed(job.seed)
    device = job.device
    cfg = dataclasses.replace(
        job.cfg, precision=resolve_precision(job.cfg.precision, device)
    )  # recorded resolved
    check_same(cfg, placement.ranks, "the fine-tuning config")
    if not placement.holds_whole_model and cfg.whole_model_keys():
        keys = ", ".join(cfg.whole_model_keys())
        raise ValueError(f"{keys}: needs the whole model in one process; set finetune.ranks to 1")
    if not placement.holds_whole_model and job.curvature is not None:
        raise ValueError(
            "the curvature stage's line along θ_ft − θ_pre needs the whole model in one process: "
            "not in a sharded fine-tuning job (finetune.ranks > 1)"
        )
    if cfg.linearized and cfg.compile:
        raise ValueError(
            "finetune.compile: true, but a linearized run (finetune.linearized) runs the model under "
            "torch.func transforms; set compile to null or false"
        )
    compiled = not cfg.linearized and resolve_compile(cfg.compile, device, "finetune.compile")
    task = job.task.open()
    model, tokenizer = placement.load_model(
        job.spec,
        job.path,
        device,
        cfg.precision,
        cfg.activation_checkpointing,
        build=lambda m, t: select(task.build(m, t), cfg.params),
    )
    if compiled:
        compile_layers(model)
    reference_device = device if job.lambda_reg > 0 or cfg.linearized else "cpu"
    reference = {
        n: placement.local(p).detach().to(reference_device, copy=True) for n, p in base_parameters(model)
    }
    trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    start = (
        {n: reference[n] for n, _ in trained}
        if all(n in reference for n, _ in trained)
        else {n: placement.local(p).detach().to(reference_device, copy=True) for n, p in trained}  # adapters
    )
    max_len = task.max_len(model, cfg)
    unlinearize = linearize(model, start) if cfg.linearized else None
    batch_fn, per_epoch = _train_data(task, tokenizer, max_len, cfg, job)
    total = per_epoch * cfg.epochs if cfg.max_steps is None else min(per_epoch * cfg.epochs, cfg.max_steps)
    return Run(
        model,
        tokenizer,
        task,
        cfg,
        max_len,
        reference,
        start,
        batch_fn,
        per_epoch,
        total,
        task.eval_data(tokenizer, max_len, cfg),
        placement.compute(cfg.precision, torch.device(device)),
        sum(p.numel() for _, p in trained),
        unlinearize,
    )


class EpochEnds(Callback):
    """Early stopping over epochs: at each epoch end (and the run's last step) the model on ID
    validation, the best epoch kept across a kill (`BestEpoch`)."""

    def __init__(self, run: Run, best: BestEpoch, placement: Whole):
        self.run, self.best, self.placement = run, best, placement
        self.boundaries = sorted(set(range(run.per_epoch, run.total + 1, run.per_epoch)) | {run.total})

    def step_end(self, loop: Loop) -> None:
        run, step = self.run, loop.step
        if step not in self.boundaries:
            return
        with run.compute:
            val = run.task.evaluate(run.model, run.evals["validation"], run.tokenizer, run.cfg)
        self.placement.settle(run.model)
        epoch = step / run.per_epoch
        record = {"step": step, "epoch": epoch, "val_loss": val["loss"], "val_ppl": val["ppl"]}
        self.best.update(run.model, record, val["loss"], final=step >= run.total)
        log.info(
            "step %d (epoch %.2f): ID validation loss %.4f ppl %.3f", step, epoch, val["loss"], val["ppl"]
        )


def proximal_callbacks(run: Run, job: FinetuneJob, placement: Whole) -> list[Callback]:
    """How λ pulls θ toward its start (pipeline/train/proximal.py): the coupled term in the loss, or
    the decoupled / selective step (kept on `run` for the rows); none at λ = 0."""
    if job.lambda_reg == 0:
        return []
    if run.cfg.proximal == "coupled":
        return [ProximalTerm(run.start, job.lambda_reg)]
    selective = run.cfg.proximal == "selective"
    run.proximal = ProximalStep(run.model, run.start, job.lambda_reg, selective, placement.ranks)
    return [run.proximal]


def train_run(run: Run, job: FinetuneJob, placement: Whole) -> tuple[TrainResult, BestEpoch]:
    """Train with early stopping over epochs on ID validation (the best epoch kept across a kill)."""
    cfg = run.cfg
    best = BestEpoch(job.state_dir, placement.ranks)
    epochs = EpochEnds(run, best, placement)
    log.info(
        "fine-tuning %s on %s (%s: %s, %s proximal term): lr %g, λ %g, seed %d, %d steps (%d per epoch, "
        "evaluations at %s)",
        job.spec.name,
        run.task.name,
        job.method,
        describe(cfg.params),
        cfg.proximal,
        job.learning_rate,
        job.lambda_reg,
        job.seed,
        run.total,
        run.per_epoch,
        epochs.boundaries,
    )
    result = train(
        run.model,
        run.batch_fn,
        cfg.train_config(run.total, job.learning_rate, job.device),
        state_path=Path(job.state_dir) / "train",
        callbacks=[*proximal_callbacks(run, job, placement), epochs],
        stop_after=job.stop_after,
        micro_batch_size=cfg.micro_batch_size,
        placement=placement,
    )
    return result, best


def evaluate_run(
    run: Run, job: FinetuneJob, result: TrainResult, best: BestEpoch, placement: Whole
) -> list[dict]:
    """The fine-tuned model's rows: the best epoch's weights restored (early stopping), LoRA adapters
    merged into the weights they adapt, then every evaluation the job's settings select
    (pipeline/train/evaluators.py), in its groups' order.

    Every evaluation of the model runs on one whole model in the device's evaluation dtype
    (`default_dtype`: bf16 on CUDA, float32 on CPU, as base and perturbed models are loaded and
    evaluated); a linearized run is evaluated as it trained (its own dtype: a copy in another
    dtype would be the real model, without the tangent forward).
    """
    if best.restore(run.model, result.steps_done):
        log.info("early stopping: restored step %d (best ID validation loss %.4f)", best.step, best.loss)
    run.model = merge(run.model)
    cfg, model = run.cfg, run.model
    pretrain_data = job.corpus.eval_set(run.tokenizer, run.max_len, context(model))
    extra = {
        **cfg.recorded(),
        "steps": result.steps_done,
        "steps_per_epoch": run.per_epoch,
        "best_step": best.step,
        "best_epoch": best.step / run.per_epoch,
        "train_tokens": cfg.batch_size * run.max_len * result.steps_done if run.task.packed else None,
        "final_train_loss": result.losses[-1] if result.losses else None,
        "history": best.history,
        "trained_parameters": run.trained_parameters,
    }
    if run.proximal is not None and run.proximal.fraction_applied:  # selective: how often it pulled
        applied = run.proximal.fraction_applied
        extra["proximal_applied_fraction"] = sum(applied) / len(applied)
    # no wall-clock times in the rows: the table must be identical across machines and reruns
    dtype = next(model.parameters()).dtype if cfg.linearized else default_dtype(torch.device(job.device))
    common = dict(**job.identity(), extra={**extra, "dtype": dtype_name(dtype)}, diverged=result.diverged)
    done = Trained(run, job, placement, dtype, pretrain_data, common)
    chosen = evaluators(job)
    rows = [r for e in chosen.before for r in e(done)]
    with placement.whole(model, dtype) as whole:
        rows += [r for e in chosen.on_task_model for r in e(done, whole)]
        whole = run.task.language_model(whole)  # the task's LM (LLaVA: the one inside, handed over)
        rows += [r for e in chosen.on_language_model for r in e(done, whole)]
    rows += [r for e in chosen.after for r in e(done)]
    log.info(
        "done: ID %s | %.0f s training",
        " ".join(f"{split} ppl {res['ppl']:.3f}" for split, res in done.ident.items()),
        result.seconds,
    )
    return rows


def finetune_run(job: FinetuneJob, placement: Whole = WHOLE) -> list[dict]:
    """Fine-tune, pick the best epoch on ID validation, evaluate; tidy metric rows (the same on
    every rank). Phases: `set_up`, `train_run`, `evaluate_run`.

    job.device is the device itself (`cpu`, `cuda:0`), resolved by the entry point.
    Returns [] when the job stops as if killed (`job.stop_after`); its resume files stay.
    """
    run = set_up(job, placement)
    result, best = train_run(run, job, placement)
    if job.stop_after is not None and result.steps_done < run.total and not result.diverged:
        return []
    rows = evaluate_run(run, job, result, best, placement)
    resume.remove(Path(job.state_dir) / "train", placement.ranks)
    best.remove()
    return rows
