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
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import torch

from pipeline.curvature.linearization import GAP_METRICS, finetuned_gap
from pipeline.data.chat import ChatSampler, encode_chats
from pipeline.data.encode import (
    ExampleSampler,
    encode_classification,
    lm_sampler,
    read_task,
    split_of_task,
)
from pipeline.data.heldout import heldout_eval_set, lm_eval_set
from pipeline.data.replay import replay_rows, with_replay
from pipeline.evaluate.benchmarks import configured_rows, eval_configured
from pipeline.evaluate.generation import write_responses
from pipeline.evaluate.perplexity import EVAL_METRICS, eval_perplexity
from pipeline.evaluate.tasks import eval_task
from pipeline.models.loading import (
    default_dtype,
    dtype_name,
    load_checkpoint,
)
from pipeline.models.shapes import shape_of
from pipeline.models.trained_params import base_parameters, describe, merge, select
from pipeline.multimodal.config import VlmConfig
from pipeline.multimodal.vlm_task import VlmTask
from pipeline.ranks import SINGLE, Ranks
from pipeline.tables import metric_row
from pipeline.train import resume
from pipeline.train.best_epoch import BestEpoch
from pipeline.train.config import FinetuneConfig, resolve_precision
from pipeline.train.distributed import check_same, local
from pipeline.train.linearized import linearize
from pipeline.train.loop import TrainResult, train
from pipeline.train.memory import plan_run
from pipeline.train.placement import WHOLE, Whole
from pipeline.train.proximal import ProximalStep, proximal_term
from pipeline.train.wise_ft import wise_ft

if TYPE_CHECKING:
    from pipeline.models.checkpoints import CheckpointSpec
    from pipeline.train.finetune_job import FinetuneJob

log = logging.getLogger(__name__)

# chat: perplexity / mean NLL of the assistant tokens of held-out conversations
TASK_METRICS = {
    "lm": ("ppl", "loss", "bpb"),
    "classification": ("ppl", "loss", "accuracy"),
    "chat": ("ppl", "loss"),
    "vlm": ("ppl", "loss", "loss_other_image"),  # held-out conversations (benchmarks: their own rows)
}


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


def _task_batches(task, tokenizer, max_len: int, rows: int, seed: int, token_cache: str | None = None):
    """(batch_fn, steps per epoch) of `rows` rows of a task's training split per step (token_cache:
    lm_sampler's cache_dir)."""
    if task.kind == "lm":
        sampler, per_epoch = lm_sampler(
            tokenizer, split_of_task(task, "train"), max_len, rows, seed, token_cache
        )
        return sampler.batch, per_epoch
    if task.kind == "chat":
        enc = encode_chats(tokenizer, split_of_task(task, "train"), max_len, name=f"{task.name}/train")
        sampler = ChatSampler(enc, rows, seed, tokenizer.pad_token_id)
    else:
        enc = encode_classification(tokenizer, split_of_task(task, "train"), max_len)
        sampler = ExampleSampler(enc, rows, seed, tokenizer.pad_token_id)
    n = len(enc.prompts) if task.kind == "classification" else len(enc)
    if n < rows:
        raise ValueError(
            f"finetune.batch_size {rows} (task rows per batch) is larger than task {task.name!r}'s "
            f"training split ({n} items)"
        )
    return sampler.batch, sampler.steps_per_epoch


def _train_data(task, tokenizer, max_len: int, cfg: FinetuneConfig, seed: int, job: FinetuneJob):
    """(batch_fn, steps per epoch) of the training batches: the task's rows, and with a replay
    fraction the pre-training corpus's training chunks after them (pipeline/data/replay.py)."""
    replayed = replay_rows(cfg.batch_size, cfg.replay_fraction)
    batches, per_epoch = _task_batches(
        task, tokenizer, max_len, cfg.batch_size - replayed, seed, job.token_cache
    )
    if not replayed:
        return batches, per_epoch
    corpus = pd.read_parquet(job.corpus_path)
    texts = corpus.loc[corpus["split"] == "train", "text"].tolist()
    replay, _ = lm_sampler(tokenizer, texts, max_len, replayed, seed, job.token_cache)
    log.info(
        "replay: %d of %d rows per batch from the pre-training corpus's training split",
        replayed,
        cfg.batch_size,
    )
    return with_replay(batches, replay.batch, tokenizer.pad_token_id), per_epoch


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
    """The micro-batch the memory planner fits on this job's GPUs (the job's rank count is fixed); a
    LLaVA model's: its language model's shape, the frozen tower beside it."""
    text = getattr(model.config, "text_config", model.config)
    tower = getattr(getattr(model, "model", None), "vision_tower", None)
    frozen = sum(p.numel() for p in tower.parameters()) if tower is not None else 0
    plan = plan_run(shape_of(text), cfg, max_len, gpu, gpus=ranks.world, frozen=frozen)
    log.info("memory plan: %s", plan.describe())
    return plan.micro_batch


def _positions(model: torch.nn.Module) -> int:
    """The model's context (a LLaVA model's: its language model's)."""
    return getattr(model.config, "text_config", model.config).max_position_embeddings


def _context(model: torch.nn.Module, cfg: FinetuneConfig) -> int:
    ctx = _positions(model)
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
    start: dict[str, torch.Tensor]  # the trained parameters at step 0 by name: what λ pulls toward
    batch_fn: Callable[[int], dict]
    per_epoch: int
    total: int
    evals: dict
    compute: object  # the forward pass's context (placement.compute)
    trained_parameters: int  # how many numbers training changes (LoRA: the adapters'; all ranks)
    unlinearize: Callable[[], None] | None  # a linearized run: gives the model its real forward back
    proximal: ProximalStep | None = None  # the decoupled / selective step, once training set it up


def vlm_task(job: FinetuneJob) -> VlmTask | None:
    """A LLaVA stage-2 job's task (its tokenizer's image token fixed), None for a text task."""
    if job.vlm is None:
        return None
    task = VlmTask.open(
        job.task_name,
        "stage2",
        job.vlm["data"],
        job.vlm["tower"],
        VlmConfig(**job.vlm["config"]),
        projector=job.vlm["projector"],
    )
    task.prepare_checkpoint(job.spec, job.path)
    return task


def set_up(job: FinetuneJob, placement: Whole) -> Run:
    """Load the checkpoint (sharded or whole), keep θ_pre, encode the task's data."""
    torch.manual_seed(job.seed)
    device = job.device
    cfg = dataclasses.replace(
        job.cfg, precision=resolve_precision(job.cfg.precision, device)
    )  # recorded resolved
    check_same(cfg, placement.ranks, "the fine-tuning config")
    if not placement.holds_whole_model and cfg.whole_model_keys():
        keys = ", ".join(cfg.whole_model_keys())
        raise ValueError(f"{keys}: needs the whole model in one process; set finetune.ranks to 1")
    vlm = vlm_task(job)
    model, tokenizer = placement.load(
        job.spec,
        job.path,
        device,
        cfg.precision,
        cfg.activation_checkpointing,
        build=(lambda m: select(vlm.build(m), cfg.params)) if vlm else (lambda m: select(m, cfg.params)),
    )
    if vlm:
        vlm.prepare(tokenizer, vlm.vocab_rows)  # the job's tokenizer gets the same image token
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
    task = vlm or read_task(job.task_name, job.task_path)
    max_len = vlm.max_len(_positions(model)) if vlm else _context(model, cfg)  # LLaVA: multimodal.max_length
    unlinearize = linearize(model, start) if cfg.linearized else None
    if torch.device(device).type == "cuda" and job.gpu is not None and cfg.micro_batch_size is None:
        planned = _planned_micro_batch(model, cfg, max_len, placement.ranks, job.gpu)
        cfg = dataclasses.replace(cfg, micro_batch_size=planned)
    if vlm:
        batch_fn, per_epoch = vlm.train_batches(tokenizer, max_len, cfg.batch_size, job.seed)
    else:
        batch_fn, per_epoch = _train_data(task, tokenizer, max_len, cfg, job.seed, job)
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
        vlm.eval_data(tokenizer, max_len, cfg.eval_batch_size)
        if vlm
        else _eval_data(task, tokenizer, max_len, cfg),
        placement.compute(cfg.precision, torch.device(device)),
        sum(p.numel() for _, p in trained),
        unlinearize,
    )


def _validation(run: Run, model: torch.nn.Module, split: str = "validation") -> dict[str, float]:
    """In-domain metrics of `model` on one held-out split (a LLaVA stage: its conversations' loss)."""
    if run.task.kind == "vlm":
        return run.task.validation(model, run.evals[split])
    return eval_task(model, run.evals[split], run.tokenizer.pad_token_id, run.cfg.eval_batch_size)


def train_run(run: Run, job: FinetuneJob, placement: Whole) -> tuple[TrainResult, BestEpoch]:
    """Train with early stopping over epochs on ID validation (the best epoch kept across a kill)."""
    cfg, model = run.cfg, run.model
    boundaries = sorted({s for s in range(run.per_epoch, run.total + 1, run.per_epoch)} | {run.total})
    best = BestEpoch(job.state_dir, placement.ranks)

    def at_epoch_end(step: int) -> None:
        if step not in boundaries:
            return
        with run.compute:
            val = _validation(run, model)
        placement.settle(model)
        epoch = step / run.per_epoch
        record = {"step": step, "epoch": epoch, "val_loss": val["loss"], "val_ppl": val["ppl"]}
        best.update(model, record, val["loss"], final=step >= run.total)
        log.info(
            "step %d (epoch %.2f): ID validation loss %.4f ppl %.3f", step, epoch, val["loss"], val["ppl"]
        )

    log.info(
        "fine-tuning %s on %s (%s: %s, %s proximal term): lr %g, λ %g, seed %d, %d steps (%d per epoch, "
        "evaluations at %s)",
        job.spec.name,
        job.task_name,
        job.method,
        describe(cfg.params),
        cfg.proximal,
        job.learning_rate,
        job.lambda_reg,
        job.seed,
        run.total,
        run.per_epoch,
        boundaries,
    )
    pulled = job.lambda_reg > 0
    extra_loss = (
        proximal_term(model, run.start, job.lambda_reg) if pulled and cfg.proximal == "coupled" else None
    )
    if pulled and cfg.proximal != "coupled":
        run.proximal = ProximalStep(
            model, run.start, job.lambda_reg, cfg.proximal == "selective", placement.ranks
        )
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
        proximal_step=run.proximal,
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
        min(eval_cfg.get("seq_len") or run.max_len, _positions(model)),
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
        "trained_parameters": run.trained_parameters,
    }
    if run.proximal is not None and run.proximal.fraction_applied:  # selective: how often it pulled
        applied = run.proximal.fraction_applied
        extra["proximal_applied_fraction"] = sum(applied) / len(
            applied
        )  # no wall-clock times here: the table must be identical across machines and reruns
    # a linearized run is evaluated as it trained (its own dtype): a copy in another dtype would be
    # the real model, without the tangent forward
    dtype = next(model.parameters()).dtype if cfg.linearized else default_dtype(torch.device(job.device))
    with placement.whole(model, dtype) as whole:
        ident = {s: _validation(run, whole, s) for s in run.evals}
        common = dict(
            **job.identity(),
            extra={**extra, "dtype": dtype_name(whole)},
            diverged=result.diverged,
        )
        benchmarks = []
        if run.task.kind == "vlm":  # LLaVA: the five benchmarks, then the language model inside it
            benchmarks = run.task.benchmark_rows(whole, tokenizer, common, placement.ranks)
            if job.vlm.get("hf_dir") and placement.ranks.main:
                run.task.save_hf(whole, tokenizer, job.vlm["hf_dir"])
            whole = run.task.language_model(whole)  # hands its modules over: `whole` is the LM now
        pre = eval_perplexity(whole, pretrain_data, batch_size=eval_cfg["batch_size"])
        suite = _suite_rows(whole, tokenizer, job, common, placement.ranks)
    wise = _wise_rows(run, job, placement, dtype, pretrain_data, common) if cfg.wise_ft_alphas else []
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
    rows += benchmarks + suite + wise
    if run.unlinearize is not None:  # the gap and the curvature line look at the real model at θ
        run.unlinearize()
        run.unlinearize = None
    if cfg.linearization_tokens:
        rows += _linearization_rows(run, job, placement, pretrain_data, common)
    log.info(
        "done: pre-training ppl %.3f | ID %s | ‖θ_ft − θ_pre‖ %.4f | %.0f s training",
        pre["ppl"],
        " ".join(f"{split} ppl {res['ppl']:.3f}" for split, res in ident.items()),
        distance,
        result.seconds,
    )
    return rows


def _wise_rows(
    run: Run, job: FinetuneJob, placement: Whole, dtype: torch.dtype, pretrain_data, common: dict
) -> list[dict]:
    """WiSE-FT (pipeline/train/wise_ft.py): pre-training and in-domain metrics of θ_pre + α(θ_ft −
    θ_pre) at each α, as metrics `wise_<metric>` with `extra.wise_alpha`. The master weights (this
    process's part of them) move along the line; each α is evaluated on the whole model in the
    evaluation dtype, as the fine-tuned model is."""
    cfg, pad = run.cfg, run.tokenizer.pad_token_id
    moved = {n: placement.local(p) for n, p in run.model.named_parameters() if p.requires_grad}

    def evaluate() -> dict:
        with placement.whole(run.model, dtype) as whole:
            out = {
                ("pretrain", job.eval_cfg["split"]): eval_perplexity(
                    whole, pretrain_data, job.eval_cfg["batch_size"]
                )
            }
            return out | {
                (job.task_name, s): eval_task(whole, d, pad, cfg.eval_batch_size)
                for s, d in run.evals.items()
            }

    rows = []
    for alpha, results in wise_ft(moved, run.reference, cfg.wise_ft_alphas, evaluate):
        for (eval_data, split), res in results.items():
            metrics = EVAL_METRICS if eval_data == "pretrain" else TASK_METRICS[run.task.kind]
            fields = common | {"extra": {**common["extra"], "wise_alpha": float(alpha)}}
            rows += [
                metric_row(**fields, eval_data=eval_data, split=split, metric=f"wise_{m}", value=res[m])
                for m in metrics
            ]
        log.info(
            "WiSE-FT α %g: pre-training ppl %.3f, ID validation ppl %.3f",
            alpha,
            results[("pretrain", job.eval_cfg["split"])]["ppl"],
            results[(job.task_name, "validation")]["ppl"],
        )
    return rows


def _linearization_rows(
    run: Run, job: FinetuneJob, placement: Whole, pretrain_data, common: dict
) -> list[dict]:
    """The linearization gap along θ_ft − θ_pre (pipeline/curvature/linearization.py) on the held-out
    pre-training windows and, for LM tasks, the task's validation windows: metrics `lin_*`. On the
    whole model in its float32 master weights, θ_pre of the trained parameters whole beside it (a
    sharded job gathers both on every rank, each computing the same rows)."""
    t0 = time.perf_counter()
    sets = {("pretrain", job.eval_cfg["split"]): pretrain_data}
    if run.task.kind == "lm":
        sets[(job.task_name, "validation")] = run.evals["validation"]
    trained = [(n, p) for n, p in run.model.named_parameters() if p.requires_grad]
    pre = {n: placement.full_like(run.reference[n], p) for n, p in trained}
    with placement.whole(run.model, next(run.model.parameters()).dtype) as whole:
        found = finetuned_gap(whole, pre, sets, run.cfg.linearization_tokens)
        fields = common | {"extra": {**common["extra"], "dtype": dtype_name(whole)}}  # the master weights
    del pre
    rows = [
        metric_row(**fields, eval_data=eval_data, split=split, metric=GAP_METRICS[k], value=v)
        for (eval_data, split), res in found.items()
        for k, v in res.items()
    ]
    log.info(
        "linearization gap along θ_ft − θ_pre (%.1f s): %s",
        time.perf_counter() - t0,
        {f"{d}/{s}": {k: round(v, 4) for k, v in res.items()} for (d, s), res in found.items()},
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
    run.model = merge(run.model)  # LoRA: adapters merged into the weights they adapt
    rows = evaluate_run(run, job, result, best, placement)
    resume.remove(Path(job.state_dir) / "train", placement.ranks)
    best.remove()
    if after is not None:
        after(run.model, run.tokenizer, run.reference)
    return rows
