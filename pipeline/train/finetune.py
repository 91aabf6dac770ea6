"""Supervised fine-tuning of one checkpoint on one task at one (learning rate, λ, seed),
evaluated in memory (Section 3.4, Appendix C.1, Table 4).

AdamW (weight decay 0), warmup, cosine / constant schedule, up to `epochs` epochs with early
stopping over epochs on the in-domain validation split; an optional proximal term
λ‖θ − θ_pre‖² (Section 4). After training: pre-training perplexity on the held-out corpus,
in-domain metrics on validation and test (TASK_METRICS; chat tasks: the perplexity of the
assistant tokens), and ‖θ_ft − θ_pre‖₂ (Figure 8), as tidy rows. Instruction tuning (chat
tasks, Table 2) trains on whole conversations with the loss on assistant tokens only
(`pipeline.data.chat`).
A killed job resumes from its last state file (best epoch so far included).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from pipeline.data.chat import ChatSampler, encode_chats
from pipeline.data.encode import (
    ExampleSampler,
    encode_classification,
    lm_sampler,
    read_task,
    split_of_task,
)
from pipeline.data.heldout import heldout_eval_set, lm_eval_set
from pipeline.evaluate.benchmarks import configured_rows, eval_configured
from pipeline.evaluate.generation import write_responses
from pipeline.evaluate.perplexity import EVAL_METRICS, eval_perplexity
from pipeline.evaluate.tasks import eval_task
from pipeline.models.loading import default_dtype, dtype_name, load_checkpoint
from pipeline.models.shapes import shape_of
from pipeline.ranks import SINGLE, Ranks
from pipeline.tables import metric_row
from pipeline.train import resume
from pipeline.train.best_epoch import BestEpoch
from pipeline.train.config import FinetuneConfig, resolve_precision
from pipeline.train.distributed import check_same, local
from pipeline.train.loop import TrainResult, train
from pipeline.train.memory import plan_run
from pipeline.train.placement import WHOLE, Whole

if TYPE_CHECKING:
    from pipeline.models.checkpoints import CheckpointSpec
    from pipeline.train.finetune_job import FinetuneJob

log = logging.getLogger(__name__)

# chat: perplexity / mean NLL of the assistant tokens of held-out conversations
TASK_METRICS = {
    "lm": ("ppl", "loss", "bpb"),
    "classification": ("ppl", "loss", "accuracy"),
    "chat": ("ppl", "loss"),
}


def proximal_term(model: torch.nn.Module, reference: dict[str, torch.Tensor], lam: float):
    """λ‖θ − θ_ref‖² over all trainable parameters (a callable for `train(extra_loss=...)`); in a
    sharded run over this rank's shards (`reference` holds them), whose gradients it alone adds."""

    def term(m: torch.nn.Module) -> torch.Tensor:
        diffs = [(local(p) - reference[n]).pow(2).sum() for n, p in m.named_parameters() if p.requires_grad]
        return lam * torch.stack(diffs).sum()

    return term


@torch.no_grad()
def weight_distance(
    model: torch.nn.Module, reference: dict[str, torch.Tensor], ranks: Ranks = SINGLE
) -> float:
    """‖θ − θ_ref‖₂ over all parameters, accumulated in float64 (sharded: over every rank's shards)."""
    total = torch.zeros((), dtype=torch.float64)
    for n, p in model.named_parameters():
        mine = local(p).detach()
        total += (mine.double() - reference[n].to(mine.device).double()).pow(2).sum().cpu()
    device = next(model.parameters()).device  # a collective's tensors live there (NCCL: on the GPU)
    return math.sqrt(float(ranks.all_sum(total.to(device))))


def _eval_data(task, tokenizer, max_len: int, cfg: FinetuneConfig) -> dict:
    """In-domain validation and test data: rolling windows (LM), encoded items (classification) or
    encoded conversations (chat; up to eval_max_tokens like LM documents)."""
    if task.kind == "lm":
        return {
            s: lm_eval_set(tokenizer, split_of_task(task, s), max_len, cfg.eval_max_tokens)
            for s in ("validation", "test")
        }
    if task.kind == "chat":
        return {
            s: encode_chats(
                tokenizer, split_of_task(task, s), max_len, cfg.eval_max_tokens, f"{task.name}/{s}"
            )
            for s in ("validation", "test")
        }
    return {
        s: encode_classification(tokenizer, split_of_task(task, s), max_len) for s in ("validation", "test")
    }


def _train_data(
    task, tokenizer, max_len: int, cfg: FinetuneConfig, seed: int, token_cache: str | None = None
):
    """(batch_fn, steps per epoch) of a task's training split (token_cache: lm_sampler's cache_dir)."""
    if task.kind == "lm":
        sampler, per_epoch = lm_sampler(
            tokenizer, split_of_task(task, "train"), max_len, cfg.batch_size, seed, token_cache
        )
        return sampler.batch, per_epoch
    if task.kind == "chat":
        enc = encode_chats(tokenizer, split_of_task(task, "train"), max_len, name=f"{task.name}/train")
        sampler = ChatSampler(enc, cfg.batch_size, seed, tokenizer.pad_token_id)
    else:
        enc = encode_classification(tokenizer, split_of_task(task, "train"), max_len)
        sampler = ExampleSampler(enc, cfg.batch_size, seed, tokenizer.pad_token_id)
    n = len(enc.prompts) if task.kind == "classification" else len(enc)
    if n < cfg.batch_size:
        raise ValueError(
            f"finetune.batch_size {cfg.batch_size} is larger than task {task.name!r}'s training split "
            f"({n} items)"
        )
    return sampler.batch, sampler.steps_per_epoch


def task_base_rows(
    spec: CheckpointSpec,
    path: str | None,
    task_path: str | Path,
    task_name: str,
    cfg: FinetuneConfig,
    study: str,
    device: str = "cpu",
) -> list[dict]:
    """In-domain metrics of the unmodified checkpoint on a task (the Δ baseline of fine-tuning), in
    the device's evaluation dtype (`default_dtype`), as the fine-tuned model is evaluated."""
    model, tokenizer, _, _ = load_checkpoint(spec, path, device)
    task = read_task(task_name, task_path)
    max_len = _context(model, cfg)
    evals = _eval_data(task, tokenizer, max_len, cfg)
    rows = []
    common = dict(
        **spec.row_fields(study),
        modification="none",
        task=task_name,
        eval_data=task_name,
        extra=dict(dtype=dtype_name(model)),
    )
    for split, data in evals.items():
        result = eval_task(model, data, tokenizer.pad_token_id, cfg.eval_batch_size)
        rows += [
            metric_row(**common, split=split, metric=m, value=result[m]) for m in TASK_METRICS[task.kind]
        ]
        log.info(
            "base %s on %s/%s: %s",
            spec.name,
            task_name,
            split,
            {m: round(result[m], 4) for m in TASK_METRICS[task.kind]},
        )
    return rows


def _suite_rows(whole, tokenizer, job: FinetuneJob, common: dict, ranks: Ranks) -> list[dict]:
    """The lm-eval suite's rows of the fine-tuned model and its responses to the instruction set
    (the judged metric). Every rank scores and answers its share (pipeline/ranks.py) and returns the
    same rows; rank 0 writes the responses."""
    rows: list[dict] = []
    if job.bench_cfg and job.bench_cfg.get("tasks"):
        results = eval_configured(whole, tokenizer, job.bench_cfg, ranks)
        rows = configured_rows(results, job.bench_cfg, **common)
    if job.generation:
        identity = {k: v for k, v in common.items() if k not in ("extra", "diverged")}
        g = job.generation
        write_responses(whole, tokenizer, g["instructions"], g["config"], identity, g["output"], ranks)
    return rows


def _planned_micro_batch(
    model: torch.nn.Module, cfg: FinetuneConfig, max_len: int, ranks: Ranks, gpu: dict
) -> int:
    """The micro-batch the memory planner fits on this job's GPUs (the job's rank count is fixed)."""
    plan = plan_run(shape_of(model.config), cfg, max_len, gpu, gpus=ranks.world)
    log.info("memory plan: %s", plan.describe())
    return plan.micro_batch


def _context(model: torch.nn.Module, cfg: FinetuneConfig) -> int:
    ctx = model.config.max_position_embeddings
    return min(cfg.seq_len or ctx, ctx)


@dataclass
class Run:
    """A fine-tuning run once set up: the model at θ_pre, its data, its resolved config."""

    model: torch.nn.Module
    tokenizer: object
    task: object
    cfg: FinetuneConfig  # precision resolved; on CUDA the planned micro-batch
    max_len: int
    reference: dict[str, torch.Tensor]  # θ_pre by name (this rank's shards)
    batch_fn: Callable[[int], dict]
    per_epoch: int
    total: int
    evals: dict
    compute: object  # the forward pass's context (placement.compute)


def set_up(job: FinetuneJob, placement: Whole) -> Run:
    """Load the checkpoint (sharded or whole), keep θ_pre, encode the task's data."""
    torch.manual_seed(job.seed)
    device = job.device
    cfg = dataclasses.replace(
        job.cfg, precision=resolve_precision(job.cfg.precision, device)
    )  # recorded resolved
    check_same(cfg, placement.ranks, "the fine-tuning config")
    model, tokenizer = placement.load(job.spec, job.path, device, cfg.precision, cfg.activation_checkpointing)
    reference_device = device if job.lambda_reg > 0 else "cpu"
    reference = {
        n: placement.local(p).detach().to(reference_device, copy=True) for n, p in model.named_parameters()
    }
    task = read_task(job.task_name, job.task_path)
    max_len = _context(model, cfg)
    if torch.device(device).type == "cuda" and job.gpu is not None and cfg.micro_batch_size is None:
        planned = _planned_micro_batch(model, cfg, max_len, placement.ranks, job.gpu)
        cfg = dataclasses.replace(cfg, micro_batch_size=planned)
    batch_fn, per_epoch = _train_data(task, tokenizer, max_len, cfg, job.seed, job.token_cache)
    total = per_epoch * cfg.epochs if cfg.max_steps is None else min(per_epoch * cfg.epochs, cfg.max_steps)
    return Run(
        model,
        tokenizer,
        task,
        cfg,
        max_len,
        reference,
        batch_fn,
        per_epoch,
        total,
        _eval_data(task, tokenizer, max_len, cfg),
        placement.compute(cfg.precision, torch.device(device)),
    )


def train_run(run: Run, job: FinetuneJob, placement: Whole) -> tuple[TrainResult, BestEpoch]:
    """Train with early stopping over epochs on ID validation (the best epoch kept across a kill)."""
    cfg, model = run.cfg, run.model
    boundaries = sorted({s for s in range(run.per_epoch, run.total + 1, run.per_epoch)} | {run.total})
    best = BestEpoch(job.state_dir, placement.ranks)

    def at_epoch_end(step: int) -> None:
        if step not in boundaries:
            return
        with run.compute:
            val = eval_task(model, run.evals["validation"], run.tokenizer.pad_token_id, cfg.eval_batch_size)
        placement.settle(model)
        epoch = step / run.per_epoch
        record = {"step": step, "epoch": epoch, "val_loss": val["loss"], "val_ppl": val["ppl"]}
        best.update(model, record, val["loss"], final=step >= run.total)
        log.info(
            "step %d (epoch %.2f): ID validation loss %.4f ppl %.3f", step, epoch, val["loss"], val["ppl"]
        )

    log.info(
        "fine-tuning %s on %s: lr %g, λ %g, seed %d, %d steps (%d per epoch, evaluations at %s)",
        job.spec.name,
        job.task_name,
        job.learning_rate,
        job.lambda_reg,
        job.seed,
        run.total,
        run.per_epoch,
        boundaries,
    )
    extra_loss = proximal_term(model, run.reference, job.lambda_reg) if job.lambda_reg > 0 else None
    result = train(
        model,
        run.batch_fn,
        cfg.train_config(run.total, job.learning_rate, job.device),
        state_path=Path(job.state_dir) / "train",
        stop_after=job.stop_after,
        extra_loss=extra_loss,
        on_step_end=at_epoch_end,
        micro_batch_size=cfg.micro_batch_size,
        placement=placement,
    )
    return result, best


def evaluate_run(
    run: Run, job: FinetuneJob, result: TrainResult, best: BestEpoch, placement: Whole
) -> list[dict]:
    """The fine-tuned model's rows: pre-training perplexity, in-domain metrics, ‖θ_ft − θ_pre‖₂,
    the lm-eval suite and the judged metric's responses.

    Every evaluation runs on one whole model in the device's evaluation dtype (`default_dtype`:
    bf16 on CUDA, float32 on CPU, as base and perturbed models are loaded and evaluated), so a
    fine-tuned-minus-base difference holds no precision change, whether the job ran in one process
    or sharded (`placement.whole`: the model itself when it already is that, else a copy gathered on
    every rank); the dtype is recorded in the rows (`extra.dtype`).
    """
    cfg, model, tokenizer = run.cfg, run.model, run.tokenizer
    eval_cfg = job.eval_cfg
    pretrain_data = heldout_eval_set(
        job.corpus_path,
        eval_cfg["split"],
        tokenizer,
        min(eval_cfg.get("seq_len") or run.max_len, model.config.max_position_embeddings),
        eval_cfg.get("max_tokens"),
    )
    distance = weight_distance(model, run.reference, placement.ranks)  # the training (master) weights
    tokens_per_step = cfg.batch_size * run.max_len if run.task.kind == "lm" else None
    extra = {
        **cfg.recorded(),
        "steps": result.steps_done,
        "steps_per_epoch": run.per_epoch,
        "best_step": best.step,
        "best_epoch": best.step / run.per_epoch,
        "train_tokens": tokens_per_step * result.steps_done if tokens_per_step else None,
        "final_train_loss": result.losses[-1] if result.losses else None,
        "history": best.history,
    }  # no wall-clock times here: the table must be identical across machines and reruns
    with placement.whole(model, default_dtype(torch.device(job.device))) as whole:
        pre = eval_perplexity(whole, pretrain_data, batch_size=eval_cfg["batch_size"])
        ident = {
            s: eval_task(whole, data, tokenizer.pad_token_id, cfg.eval_batch_size)
            for s, data in run.evals.items()
        }
        common = dict(
            **job.identity(),
            modification="sft",
            extra={**extra, "dtype": dtype_name(whole)},
            diverged=result.diverged,
        )
        suite = _suite_rows(whole, tokenizer, job, common, placement.ranks)
    rows = [
        metric_row(**common, eval_data="pretrain", split=eval_cfg["split"], metric=m, value=pre[m])
        for m in EVAL_METRICS
    ]
    for split, res in ident.items():
        rows += [
            metric_row(**common, eval_data=job.task_name, split=split, metric=m, value=res[m])
            for m in TASK_METRICS[run.task.kind]
        ]
    rows.append(metric_row(**common, eval_data="weights", split=None, metric="distance_l2", value=distance))
    rows += suite
    log.info(
        "done: pre-training ppl %.3f | ID val ppl %.3f test ppl %.3f | ‖θ_ft − θ_pre‖ %.4f | %.0f s training",
        pre["ppl"],
        ident["validation"]["ppl"],
        ident["test"]["ppl"],
        distance,
        result.seconds,
    )
    return rows


def finetune_run(
    job: FinetuneJob,
    placement: Whole = WHOLE,
    after: Callable[[torch.nn.Module, object, dict[str, torch.Tensor]], None] | None = None,
) -> list[dict]:
    """Fine-tune, pick the best epoch on ID validation, evaluate; tidy metric rows (the same on
    every rank). Phases: `set_up`, `train_run`, `evaluate_run`, then `after`.

    job.device is the device itself (`cpu`, `cuda:0`), resolved by the entry point.
    after: called last, once every row is computed, as after(model at θ_ft, tokenizer, θ_pre by
    name), e.g. the curvature stage's line along θ_ft − θ_pre (both in memory: no second load); it
    may modify the model. Only where the placement holds the whole model.
    Returns [] when the job stops as if killed (`job.stop_after`); its resume files stay.
    """
    if after is not None and not placement.holds_whole_model:
        raise ValueError(f"{type(placement).__name__}: `after` needs the whole model in one process")
    run = set_up(job, placement)
    result, best = train_run(run, job, placement)
    if job.stop_after is not None and result.steps_done < run.total and not result.diverged:
        return []
    if best.restore(run.model, result.steps_done):
        log.info("early stopping: restored step %d (best ID validation loss %.4f)", best.step, best.loss)
    rows = evaluate_run(run, job, result, best, placement)
    resume.remove(Path(job.state_dir) / "train", placement.ranks)
    best.remove()
    if after is not None:
        after(run.model, run.tokenizer, run.reference)
    return rows
