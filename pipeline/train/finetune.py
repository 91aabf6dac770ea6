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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from pipeline.data.chat import ChatSampler, encode_chats
from pipeline.data.encode import (
    ExampleSampler,
    encode_classification,
    lm_eval_set,
    lm_sampler,
    read_task,
    split_of_task,
)
from pipeline.evaluate.benchmarks import configured_rows, eval_configured
from pipeline.evaluate.generation import write_responses
from pipeline.evaluate.heldout import EVAL_METRICS, heldout_eval_set
from pipeline.evaluate.perplexity import eval_perplexity
from pipeline.evaluate.tasks import eval_task
from pipeline.models.checkpoints import CheckpointSpec, default_dtype, load_checkpoint
from pipeline.models.shapes import shape_of
from pipeline.tables import metric_row
from pipeline.train.best_epoch import BestEpoch
from pipeline.train.config import FinetuneConfig, resolve_precision
from pipeline.train.distributed import (
    SINGLE,
    Ranks,
    all_sum,
    check_same,
    full_copy,
    is_sharded,
    load_into_shards,
    local,
    remove_sharded,
    reshard,
    shard_model,
)
from pipeline.train.loop import train
from pipeline.train.memory import plan_run
from pipeline.train.precision import compute_context
from pipeline.train.recompute import enable_activation_checkpointing

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
    return math.sqrt(float(all_sum(total.to(_collective_device(ranks, model)), ranks)))


def _collective_device(ranks: Ranks, model: torch.nn.Module) -> torch.device:
    """Where a collective's tensors live: the model's device (NCCL needs GPU tensors)."""
    return next(model.parameters()).device if ranks.sharded else torch.device("cpu")


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
    """In-domain metrics of the unmodified checkpoint on a task (the Δ baseline of fine-tuning)."""
    model, tokenizer, _, _ = load_checkpoint(spec, path, device, dtype=torch.float32)
    task = read_task(task_name, task_path)
    max_len = _context(model, cfg)
    evals = _eval_data(task, tokenizer, max_len, cfg)
    rows = []
    common = dict(**spec.row_fields(study), modification="none", task=task_name, eval_data=task_name)
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


@contextmanager
def evaluation_model(model: torch.nn.Module, device: str) -> Iterator[torch.nn.Module]:
    """The model as every evaluation of whole models runs it (the lm-eval suite, generation): whole,
    in its device's evaluation dtype (`default_dtype`: bf16 on CUDA, float32 on CPU, as base
    models are loaded), so a fine-tuned-minus-base difference holds no precision change. The
    fine-tuned model itself when it already is that; else a copy, gathered on every rank when
    sharded (a collective)."""
    dtype = default_dtype(torch.device(device))
    if not is_sharded(model) and next(model.parameters()).dtype == dtype:
        yield model.eval()
        return
    copy = full_copy(model, dtype)
    try:
        yield copy
    finally:
        del copy
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _whole_model_rows(
    model, tokenizer, bench_cfg: dict | None, generation: dict | None, common: dict, device: str, ranks: Ranks
) -> list[dict]:
    """The lm-eval suite's rows of the fine-tuned model, and its responses to the instruction set
    (the judged metric), from one evaluation model: every rank scores and generates its share
    (`pipeline.ranks`), every rank returns the same rows, rank 0 writes the responses."""
    rows: list[dict] = []
    with evaluation_model(model, device) as whole:
        if bench_cfg and bench_cfg.get("tasks"):
            results = eval_configured(whole, tokenizer, bench_cfg, ranks)
            rows = configured_rows(results, bench_cfg, **common)
        if generation:
            identity = {k: v for k, v in common.items() if k not in ("extra", "diverged")}
            write_responses(
                whole,
                tokenizer,
                generation["instructions"],
                generation["config"],
                identity,
                generation["output"],
                ranks,
            )
    return rows


def _planned_micro_batch(
    model: torch.nn.Module, cfg: FinetuneConfig, max_len: int, ranks: Ranks, gpu: dict
) -> int:
    """The micro-batch the memory planner fits on this job's GPUs (the job's rank count is fixed)."""
    plan = plan_run(shape_of(model.config), cfg, max_len, gpu, gpus=ranks.world)
    log.info("memory plan: %s", plan.describe())
    return plan.micro_batch


def _load_for_training(
    spec: CheckpointSpec, path: str | None, cfg: FinetuneConfig, device: str, ranks: Ranks
):
    """(model, tokenizer) in float32 (master) weights on every device (AdamW on bf16 weights loses
    small updates); several ranks: sharded with FSDP2, the checkpoint read once (by rank 0)."""

    def prepare(model: torch.nn.Module) -> None:
        if cfg.activation_checkpointing:
            enable_activation_checkpointing(model)
        if ranks.sharded:
            shard_model(model, cfg.precision)

    if ranks.sharded:
        return load_into_shards(spec, path, device, ranks, prepare)
    model, tokenizer, _, _ = load_checkpoint(spec, path, device, dtype=torch.float32)
    prepare(model)
    return model, tokenizer


def _context(model: torch.nn.Module, cfg: FinetuneConfig) -> int:
    ctx = model.config.max_position_embeddings
    return min(cfg.seq_len or ctx, ctx)


def finetune_run(
    spec: CheckpointSpec,
    path: str | None,
    task_path: str | Path,
    task_name: str,
    corpus_path: str | Path,
    eval_cfg: dict,
    cfg: FinetuneConfig,
    learning_rate: float,
    lambda_reg: float,
    seed: int,
    study: str,
    state_dir: str | Path,
    device: str = "cpu",
    stop_after: int | None = None,
    bench_cfg: dict | None = None,
    after: Callable[[torch.nn.Module, object, dict[str, torch.Tensor]], None] | None = None,
    ranks: Ranks = SINGLE,
    gpu: dict | None = None,
    token_cache: str | None = None,
    generation: dict | None = None,
) -> list[dict]:
    """Fine-tune, pick the best epoch on ID validation, evaluate; tidy metric rows.

    bench_cfg: `eval.benchmarks` (pipeline.evaluate.benchmarks); with tasks, the fine-tuned model is also
    scored on the lm-eval suite in memory (Figure 2: base vs fine-tuned benchmark accuracy).
    state_dir: resume files of this run (training state + best epoch so far), removed at the end.
    stop_after: stop as if killed after this many steps (tests of resumption); returns [].
    after: called last, once every row is computed, as after(model at θ_ft, tokenizer, θ_pre by name),
    e.g. the curvature stage's line along θ_ft − θ_pre (both in memory: no second load); it may
    modify the model. Not in a sharded run (the line needs the whole model in one process).
    ranks: a run over several processes (pipeline.train.distributed; `device` is this rank's):
    the model is sharded with FSDP2 after loading; every rank returns the same rows.
    gpu: the config's `gpu:` section; on CUDA with micro_batch_size null, the memory planner picks
    the micro-batch for this model and rank count (pipeline/train/memory.py).
    token_cache: a directory the tokenized training split of an LM task is kept in for the
    study's other jobs (the same tokens; None: tokenize here).
    generation: the judged metric's responses, `{instructions, config, output}` (the instruction
    table, GenerationConfig fields, the Parquet to write): generated from the fine-tuned model in
    memory, before `after` (None: none).
    """
    if learning_rate <= 0:
        raise ValueError(f"finetune.learning_rates: a learning rate must be > 0, got {learning_rate}")
    if lambda_reg < 0:
        raise ValueError(f"finetune.lambdas: λ must be >= 0, got {lambda_reg}")
    torch.manual_seed(seed)
    cfg = dataclasses.replace(cfg, precision=resolve_precision(cfg.precision, device))  # recorded resolved
    check_same(cfg, ranks, "the fine-tuning config")
    model, tokenizer = _load_for_training(spec, path, cfg, device, ranks)
    reference_device = device if lambda_reg > 0 else "cpu"
    reference = {n: local(p).detach().to(reference_device, copy=True) for n, p in model.named_parameters()}
    compute = compute_context(cfg.precision, torch.device(device), sharded=ranks.sharded)
    task = read_task(task_name, task_path)
    max_len = _context(model, cfg)
    if torch.device(device).type == "cuda" and gpu is not None and cfg.micro_batch_size is None:
        cfg = dataclasses.replace(cfg, micro_batch_size=_planned_micro_batch(model, cfg, max_len, ranks, gpu))
    batch_fn, per_epoch = _train_data(task, tokenizer, max_len, cfg, seed, token_cache)
    evals = _eval_data(task, tokenizer, max_len, cfg)
    total = per_epoch * cfg.epochs if cfg.max_steps is None else min(per_epoch * cfg.epochs, cfg.max_steps)
    boundaries = sorted({s for s in range(per_epoch, total + 1, per_epoch)} | {total})
    train_cfg = cfg.train_config(total, learning_rate, device)
    state_dir = Path(state_dir)
    best = BestEpoch(state_dir, ranks)

    def at_epoch_end(step: int) -> None:
        if step not in boundaries:
            return
        with compute:
            val = eval_task(model, evals["validation"], tokenizer.pad_token_id, cfg.eval_batch_size)
        reshard(model)
        record = {"step": step, "epoch": step / per_epoch, "val_loss": val["loss"], "val_ppl": val["ppl"]}
        best.update(model, record, val["loss"], final=step >= total)
        log.info(
            "step %d (epoch %.2f): ID validation loss %.4f ppl %.3f",
            step,
            step / per_epoch,
            val["loss"],
            val["ppl"],
        )

    log.info(
        "fine-tuning %s on %s: lr %g, λ %g, seed %d, %d steps (%d per epoch, evaluations at %s)",
        spec.name,
        task_name,
        learning_rate,
        lambda_reg,
        seed,
        total,
        per_epoch,
        boundaries,
    )
    extra_loss = proximal_term(model, reference, lambda_reg) if lambda_reg > 0 else None
    train_state = state_dir / ("train.dcp" if ranks.sharded else "train.pt")
    result = train(
        model,
        batch_fn,
        train_cfg,
        state_path=train_state,
        stop_after=stop_after,
        extra_loss=extra_loss,
        on_step_end=at_epoch_end,
        micro_batch_size=cfg.micro_batch_size,
        ranks=ranks,
    )
    if stop_after is not None and result.steps_done < total and not result.diverged:
        return []
    if best.restore(model, result.steps_done):
        log.info("early stopping: restored step %d (best ID validation loss %.4f)", best.step, best.loss)

    pretrain_data = heldout_eval_set(
        corpus_path,
        eval_cfg["split"],
        tokenizer,
        min(eval_cfg.get("seq_len") or max_len, model.config.max_position_embeddings),
        eval_cfg.get("max_tokens"),
    )
    with compute:
        pre = eval_perplexity(model, pretrain_data, batch_size=eval_cfg["batch_size"])
        ident = {
            s: eval_task(model, data, tokenizer.pad_token_id, cfg.eval_batch_size)
            for s, data in evals.items()
        }
    reshard(model)
    distance = weight_distance(model, reference, ranks)
    tokens_per_step = cfg.batch_size * max_len if task.kind == "lm" else None
    extra = {
        **cfg.recorded(),
        "steps": result.steps_done,
        "steps_per_epoch": per_epoch,
        "best_step": best.step,
        "best_epoch": best.step / per_epoch,
        "train_tokens": tokens_per_step * result.steps_done if tokens_per_step else None,
        "final_train_loss": result.losses[-1] if result.losses else None,
        "history": best.history,
    }  # no wall-clock times here: the table must be identical across machines and reruns
    common = dict(
        **spec.row_fields(study),
        modification="sft",
        task=task_name,
        learning_rate=float(learning_rate),
        lambda_reg=float(lambda_reg),
        seed=int(seed),
        extra=extra,
        diverged=result.diverged,
    )
    rows = [
        metric_row(**common, eval_data="pretrain", split=eval_cfg["split"], metric=m, value=pre[m])
        for m in EVAL_METRICS
    ]
    for split, res in ident.items():
        rows += [
            metric_row(**common, eval_data=task_name, split=split, metric=m, value=res[m])
            for m in TASK_METRICS[task.kind]
        ]
    rows.append(metric_row(**common, eval_data="weights", split=None, metric="distance_l2", value=distance))
    rows += _whole_model_rows(model, tokenizer, bench_cfg, generation, common, device, ranks)
    log.info(
        "done: pre-training ppl %.3f | ID val ppl %.3f test ppl %.3f | ‖θ_ft − θ_pre‖ %.4f | %.0f s training",
        pre["ppl"],
        ident["validation"]["ppl"],
        ident["test"]["ppl"],
        distance,
        result.seconds,
    )
    if ranks.sharded:
        remove_sharded(train_state, ranks)
    else:
        train_state.unlink(missing_ok=True)
    best.remove()
    if after is not None and ranks.sharded:
        log.warning("sharded run: no curvature line along θ_ft − θ_pre (it needs the model in one process)")
    elif after is not None:
        after(model, tokenizer, reference)
    return rows
