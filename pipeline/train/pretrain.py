"""One run of the pre-training sweep (its job record: pipeline/train/pretrain_job.py): a model preset
trained to one token budget, or a segment of WSD's stable run."""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch

from pipeline.data.batches import ChunkSampler
from pipeline.data.token_shards import TokenStream, open_tokens
from pipeline.data.tokenizer import load_tokenizer
from pipeline.io import atomic_path, write_json
from pipeline.models.build import build_model, count_parameters, init_std, model_config
from pipeline.models.compile import compile_layers, resolve_compile
from pipeline.models.mup import Mup, attach, fold, folded_init_std, init_weights, mup_of
from pipeline.models.presets import mup_base
from pipeline.train import resume
from pipeline.train.config import check_repeat, resolve_precision, steps_for_budget
from pipeline.train.loop import Branch, train
from pipeline.train.placement import WHOLE, Whole
from pipeline.train.recompute import enable_activation_checkpointing

if TYPE_CHECKING:
    from pipeline.train.pretrain_job import PretrainJob

log = logging.getLogger(__name__)


@dataclass
class Setup:
    """What a run of the sweep trains: the tokenizer, the model at its initialisation (and each
    tensor's std there), the training split and its sampler."""

    tokenizer: object
    model: torch.nn.Module
    init_stds: dict[str, float]  # as the saved checkpoint holds each tensor (muP: folded)
    tokens: np.ndarray | TokenStream
    sampler: ChunkSampler
    mup: Mup | None = None  # muP's scalings (pretrain.parameterization: mup)
    mup_hook: object = None  # its forward hook, until `fold` writes it into the weights

    @property
    def width_mult(self) -> float | None:
        return self.mup.mult if self.mup is not None else None

    def fold(self, model: torch.nn.Module) -> torch.nn.Module:
        """`model` (the trained one, or its gathered copy) as a plain HF checkpoint: muP's multiplier
        and attention scale folded into its weights."""
        if self.mup is not None:
            fold(model, self.mup, self.mup_hook if model is self.model else None)
        return model


def set_up(job: PretrainJob, placement: Whole = WHOLE) -> Setup:
    """The job's preset's model from initialisation `job.seed` on `job.device` (every rank builds the
    same one, then keeps its shards), and the training tokens (the study's split, or
    `job.token_shards`) in data order `job.seed`."""
    cfg, seed, preset = job.cfg, job.seed, job.preset
    compiled = resolve_compile(cfg.compile, job.device, "pretrain.compile")  # before any work: a clear error
    tokenizer = load_tokenizer(job.tokenizer_path)
    config = model_config(preset, len(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id)
    if cfg.seq_len > config.max_position_embeddings:
        raise ValueError(
            f"pretrain.seq_len {cfg.seq_len} exceeds the context of preset {preset!r} "
            f"({config.max_position_embeddings})"
        )
    tokens = open_tokens(job.train_tokens, job.token_shards)
    sampler = ChunkSampler(tokens, cfg.seq_len, cfg.batch_size, seed=seed)
    model = build_model(config, seed=seed)
    mup = hook = None
    if cfg.parameterization == "mup":
        base = mup_base(preset)
        mup = mup_of(config, base.hidden_size, base.num_attention_heads)
        init_weights(model, mup, config.initializer_range, seed)
        hook = attach(model, mup)
    stds = init_std(model) if mup is None else folded_init_std(init_std(model), mup)
    model.to(job.device)
    if cfg.activation_checkpointing:
        enable_activation_checkpointing(model)
    placement.place(model, resolve_precision(cfg.precision, job.device))
    if compiled:
        compile_layers(model)
    return Setup(tokenizer, model, stds, tokens, sampler, mup, hook)


def stable_run(job: PretrainJob, placement: Whole = WHOLE) -> int:
    """WSD's stable run of (preset, seed) up to step `job.stable_steps`, from the previous branch
    point's state (`job.branch_from`; None: from initialisation); writes its state there to `job.out`,
    the point the decay of a budget branches from. Returns the steps done."""
    run = set_up(job, placement)
    steps, cfg = job.stable_steps, job.cfg
    log.info(
        "stable run of %s (seed %d) to step %d (%d tokens)%s",
        job.preset,
        job.seed,
        steps,
        steps * cfg.batch_size * cfg.seq_len,
        f", from {job.branch_from}" if job.branch_from else "",
    )
    result = train(
        run.model,
        run.sampler.batch,
        cfg.stable_config(steps, job.device, run.width_mult),
        state_path=job.state_path,
        callbacks=[Branch(job.branch_from, final_state=job.out)],
        stop_after=job.stop_after,
        placement=placement,
    )
    if result.steps_done == steps:
        resume.remove(job.state_path, placement.ranks)
    return result.steps_done


def pretrain_run(job: PretrainJob, placement: Whole = WHOLE) -> dict:
    """Train the job's preset on `job.budget` tokens from initialisation and data order `job.seed`
    and write a self-contained checkpoint directory to `job.out`. Under WSD (`pretrain.schedule`) the
    sweep trains the budget's decay only, from the stable run's state at its branch step
    (`job.branch_from`): the same numbers as the whole WSD run, bit for bit.

    The checkpoint directory gets: the HF model + tokenizer (save_pretrained), init_std.json
    (per-tensor std at initialisation, used by the perturbation), loss_curve.parquet and summary.json
    (with the epochs over the training split: a budget beyond the split repeats data, and stops
    here before any step unless `job.allow_repeat`).
    """
    run = set_up(job, placement)
    tokenizer, model, sampler, tokens = run.tokenizer, run.model, run.sampler, run.tokens
    cfg, budget, seed, out_dir = job.cfg, job.budget, job.seed, job.out
    train_cfg = cfg.train_config(
        steps_for_budget(budget, cfg.batch_size, cfg.seq_len), job.device, run.width_mult
    )
    tokens_per_step = cfg.batch_size * cfg.seq_len
    available = sampler.n_chunks * cfg.seq_len  # the split's tokens in whole training chunks
    split = "pretrain.token_shards" if job.token_shards is not None else str(job.train_tokens)
    check_repeat(budget, train_cfg.steps * tokens_per_step, available, job.allow_repeat, split)
    log.info(
        "pre-training %s (%d params, seed %d) for %d steps = %d tokens (budget %d, %.2f epochs)",
        job.preset,
        count_parameters(model),
        seed,
        train_cfg.steps,
        train_cfg.steps * cfg.batch_size * cfg.seq_len,
        budget,
        train_cfg.steps * tokens_per_step / available,
    )
    result = train(
        model,
        sampler.batch,
        train_cfg,
        state_path=job.state_path,
        callbacks=[Branch(job.branch_from)],
        stop_after=job.stop_after,
        placement=placement,
    )
    if job.stop_after is not None and result.steps_done < train_cfg.steps:
        return {"stopped_at": result.steps_done}
    summary = {
        "preset": job.preset,
        "budget": budget,
        "seed": seed,
        "tokens_trained": result.steps_done * tokens_per_step,
        "steps": result.steps_done,
        "final_loss": result.losses[-1] if result.losses else None,
        "diverged": result.diverged,
        "seconds": result.seconds,
        "tokens_per_second": (result.steps_done - result.resumed_from)
        * tokens_per_step
        / max(result.seconds, 1e-9),
        "resumed_from_step": result.resumed_from,
        "parameters": count_parameters(model),
        "vocab_size": len(tokenizer),
        "non_embedding_parameters": count_parameters(model, non_embedding=True),
        "train_tokens_available": int(len(tokens)),
        "epochs": result.steps_done * tokens_per_step / available,  # > 1: data repeated
        "schedule": cfg.schedule,
        "parameterization": cfg.parameterization,
        "decay_start_step": train_cfg.steps - train_cfg.decay_steps if train_cfg.decay_steps else None,
        "hyperparameters": {**asdict(cfg), **asdict(train_cfg), "seed": seed},
    }
    curve = loss_curve(result.losses, result.lrs, tokens_per_step)
    write_checkpoint(run, out_dir, summary, curve, placement)
    resume.remove(job.state_path, placement.ranks)  # the run is done
    log.info(
        "wrote %s (final loss %.4f, %.0f tok/s)",
        out_dir,
        summary["final_loss"] or float("nan"),
        summary["tokens_per_second"],
    )
    return summary


def loss_curve(losses: list[float], lrs: list[float], tokens_per_step: int) -> pd.DataFrame:
    """A run's loss and learning rate per step, with the tokens seen by then."""
    steps = np.arange(1, len(losses) + 1)
    return pd.DataFrame(
        {"step": steps, "lr": lrs[: len(losses)], "loss": losses, "tokens": steps * tokens_per_step}
    )


def write_checkpoint(
    run: Setup, out_dir: str | os.PathLike, summary: dict, curve: pd.DataFrame, placement: Whole
) -> None:
    """The trained model as a self-contained checkpoint directory, written atomically: the HF model
    (muP folded in) and tokenizer, init_std.json, summary.json, loss_curve.parquet."""
    with placement.whole(run.model, torch.float32) as whole:  # sharded: gathered on every rank
        if placement.ranks.main:
            with atomic_path(out_dir) as tmp:
                tmp.mkdir()
                run.fold(whole).to("cpu").save_pretrained(tmp)
                run.tokenizer.save_pretrained(tmp)
                write_json(tmp / "init_std.json", run.init_stds)
                write_json(tmp / "summary.json", summary)
                curve.to_parquet(tmp / "loss_curve.parquet", index=False)


def stable_twin(job: PretrainJob) -> dict:
    """WSD's stable run at `job.budget` tokens (its state at the budget's last step, `job.branch_from`)
    as a checkpoint directory like a budget's (`job.out`): the undecayed twin of the budget's decayed
    branch, at equal tokens. Trains nothing."""
    cfg, budget, seed = job.cfg, job.budget, job.seed
    run = set_up(job, WHOLE)
    steps = steps_for_budget(budget, cfg.batch_size, cfg.seq_len)
    extra = resume.load_state(job.branch_from, run.model, None)
    if extra is None or extra["step"] != steps:
        found = "no state" if extra is None else f"step {extra['step']}"
        raise ValueError(
            f"{job.branch_from}: expected the stable run's state at step {steps} (budget {budget:,}), "
            f"found {found}"
        )
    tokens_per_step = cfg.batch_size * cfg.seq_len
    summary = {
        "preset": job.preset,
        "budget": budget,
        "seed": seed,
        "tokens_trained": steps * tokens_per_step,
        "steps": steps,
        "final_loss": extra["losses"][-1] if extra["losses"] else None,
        "diverged": False,
        "schedule": cfg.schedule,
        "phase": "stable",
        "parameterization": cfg.parameterization,
        "parameters": count_parameters(run.model),
        "hyperparameters": {**asdict(cfg), "seed": seed},
    }
    curve = loss_curve(extra["losses"], extra["lrs"], tokens_per_step)
    write_checkpoint(run, job.out, summary, curve, WHOLE)
    log.info(
        "wrote %s: the stable run of %s (seed %d) at %d tokens, undecayed", job.out, job.preset, seed, budget
    )
    return summary
