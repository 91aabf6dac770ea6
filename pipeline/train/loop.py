"""A lean, resumable causal-LM training loop (pre-training and fine-tuning share it).

Why not `transformers.Trainer`: at the sizes this pipeline sweeps (thousands of small
runs) its per-step overhead dominates; bench/bench_train_eval.py measures the ratio.
The loop is deterministic given (seed, step): batches are a pure function of the step,
and a killed run resumes from its last state file with bit-identical results.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from pipeline.data.batches import IGNORE_INDEX
from pipeline.models.losses import FusedHead, fused_head
from pipeline.models.mup import is_hidden
from pipeline.train import resume
from pipeline.train.distributed import state_bytes
from pipeline.train.placement import WHOLE, Whole
from pipeline.train.precision import check_precision
from pipeline.train.schedules import lambda_schedule

if TYPE_CHECKING:
    from pipeline.train.config import TrainConfig
    from pipeline.train.proximal import ProximalStep

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    steps_done: int
    losses: list[float] = field(default_factory=list)
    lrs: list[float] = field(default_factory=list)
    diverged: bool = False
    seconds: float = 0.0
    resumed_from: int = 0
    state_bytes: dict[str, int] = field(default_factory=dict)  # this rank's, after its first step


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not on norm weights / biases); under muP
    (`cfg.mup_width_mult`) the hidden matrices in their own group at lr / m (pipeline/models/mup.py)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    params = [p for _, p in named]
    hidden = [p for n, p in named if cfg.mup_width_mult is not None and is_hidden(n, p)]
    decay = [p for p in params if p.dim() >= 2 and not any(p is h for h in hidden)]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if hidden:
        groups.append({"params": hidden, "weight_decay": cfg.weight_decay, "lr": cfg.lr / cfg.mup_width_mult})
    device = params[0].device
    fused = device.type in ("cuda", "cpu")
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, fused=fused)


def make_schedule(optimizer: torch.optim.Optimizer, cfg: TrainConfig) -> torch.optim.lr_scheduler.LambdaLR:
    """Learning-rate schedule; cosine and WSD reach exactly zero after `cfg.steps` steps."""
    return lambda_schedule(
        optimizer, cfg.schedule, cfg.warmup_steps, cfg.steps, cfg.decay_steps, cfg.decay_shape
    )


def lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over positions whose label is not IGNORE_INDEX.

    The full-logits path, for models `pipeline.models.losses.fused_head` cannot split; the others
    (in one process and sharded) train through `FusedHead.loss`, which gives the same loss and
    gradients.
    """
    return F.cross_entropy(
        logits.reshape(-1, logits.size(-1)).float(), labels.reshape(-1), ignore_index=IGNORE_INDEX
    )


TOKEN_KEYS = ("input_ids", "attention_mask", "labels")  # (rows, positions); other keys: per row


def _batch_loss(
    model: torch.nn.Module, head: FusedHead | None, batch: dict[str, torch.Tensor]
) -> torch.Tensor:
    """Mean next-token loss of one (micro-)batch, through the fused head when the model allows it;
    other inputs (a multimodal batch's `pixel_values`) go to the model's body.

    A multimodal batch scores its replies only (the toy LLaVA: ~6% of the positions), so only those
    rows go through the head: 2.0x faster steps than the model's own logits on the toy
    (bench/bench_llava_step.py). Text batches keep every row, which keeps the text studies'
    numbers bit for bit.
    """
    extra = {k: v for k, v in batch.items() if k not in TOKEN_KEYS}
    labels = batch["labels"]
    if head is not None:  # chunked fused head: the (tokens x vocab) logits never exist
        return head.loss(
            batch["input_ids"], labels, batch.get("attention_mask"), scored_only=bool(extra), **extra
        )
    logits = model(input_ids=batch["input_ids"], attention_mask=batch.get("attention_mask"), **extra).logits
    return lm_loss(logits, labels)


def _micro_batches(
    batch: dict[str, torch.Tensor], size: int | None, keep_unscored: bool = False
) -> list[dict[str, torch.Tensor]]:
    """The batch split into row slices of at most `size` (without slices that score nothing, unless
    `keep_unscored`: a sharded rank runs every slice, since the other ranks gather layers for it
    too), each cut after its last scored column: right padding past it cannot change a causal
    model's loss, and a padded batch's width is set by its longest row, which most slices do not
    contain."""
    n = len(batch["labels"])
    if size is None or size >= n:
        return [batch]
    parts = []
    for i in range(0, n, size):
        scored = (batch["labels"][i : i + size] != IGNORE_INDEX).any(0).nonzero()
        if len(scored):
            width = int(scored[-1]) + 1
            parts.append({k: _rows(k, v, i, size, width) for k, v in batch.items()})
        elif keep_unscored:  # one position, or all where the row's image tokens must stay whole
            width = 1 if set(batch) <= set(TOKEN_KEYS) else batch["input_ids"].shape[1]
            parts.append({k: _rows(k, v, i, size, width) for k, v in batch.items()})
    return parts or [batch]


def _rows(key: str, value: torch.Tensor, first: int, size: int, width: int) -> torch.Tensor:
    """Rows first..first+size of a batch entry, token entries cut to `width` positions."""
    rows = value[first : first + size]
    return rows[:, :width] if key in TOKEN_KEYS else rows


def _to(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def _scoring_one(part: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`part` with its first label made a real token: a finite loss for a slice that scores
    nothing (it is weighted 0; a sharded rank still runs its forward and backward)."""
    labels = part["labels"].clone()
    labels.view(-1)[0] = 0
    return part | {"labels": labels}


def _save_state(
    path: Path,
    model,
    optimizer,
    scheduler,
    result: TrainResult,
    seconds: float,
    cfg: TrainConfig,
    placement: Whole,
) -> None:
    """Everything a killed run needs to continue bit-identically (pipeline/train/resume.py), and a
    run branched from it to go on (its branch key)."""
    state = {
        "step": result.steps_done,
        "fingerprint": cfg.fingerprint(),
        "branch": cfg.branch_key(),
        "scheduler": scheduler.state_dict(),
        "rng_cpu": torch.get_rng_state(),
        "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "losses": result.losses,
        "lrs": result.lrs,
        "seconds": seconds,
    }
    resume.save_state(path, model, optimizer, state, placement.ranks)


def train(
    model: torch.nn.Module,
    batch_fn: Callable[[int], dict[str, torch.Tensor]],
    cfg: TrainConfig,
    state_path: str | Path | None = None,
    stop_after: int | None = None,
    extra_loss: Callable[[torch.nn.Module], torch.Tensor] | None = None,
    on_step_end: Callable[[int], None] | None = None,
    micro_batch_size: int | None = None,
    placement: Whole = WHOLE,
    proximal_step: ProximalStep | None = None,
    branch_from: str | Path | None = None,
    final_state: str | Path | None = None,
) -> TrainResult:
    """Train `model` for `cfg.steps` steps on `batch_fn(step)` batches.

    state_path: resume file; loaded if it exists (and was written with the same config),
        written every `cfg.checkpoint_every` steps. A killed run continues from there.
    stop_after: stop (as if killed) after this many steps; for tests of resumption.
    extra_loss: added to the LM loss (e.g. a proximal term towards the initial weights).
    on_step_end: called with the number of steps done after every optimiser step (e.g. to
        evaluate at epoch boundaries for early stopping); it may switch the model to eval
        mode, the loop switches it back.
    micro_batch_size: gradient accumulation: forward/backward this many rows of a batch at a
        time, each part's mean loss weighted by its share of the batch's scored tokens (the
        gradient is the whole batch's; None: the whole batch at once).
    placement: where the model lives (pipeline/train/placement.py); sharded over ranks, each rank
        takes its rows of every global batch and `extra_loss` covers its own shards.
    proximal_step: a step toward the initial weights around each optimizer step (decoupled or
        selective regularisation, pipeline/train/proximal.py).
    branch_from: another run's state to start from when this run has none of its own (a WSD decay
        from its stable run): it must share the run's branch key (TrainConfig.branch_key); the
        run then continues as if it had trained those steps itself, bit for bit.
    final_state: where to write the state after the last step (a stable run's branch point).
    A non-finite loss stops the run and marks it diverged instead of raising.
    """
    device = next(model.parameters()).device
    optimizer = make_optimizer(model, cfg)
    scheduler = make_schedule(optimizer, cfg)
    result = TrainResult(steps_done=0)
    state_path = Path(state_path) if state_path else None
    state = resume.load_state(state_path, model, optimizer) if state_path else None
    if state is not None and state["fingerprint"] != cfg.fingerprint():
        raise ValueError(
            f"resume file {state_path} was written by a run with other hyperparameters; "
            "delete it to start over"
        )
    seconds = state["seconds"] if state is not None else 0.0  # this run's own time
    if state is not None:
        log.info("resumed from %s at step %d/%d", state_path, state["step"], cfg.steps)
    elif branch_from is not None:
        state = _branch_state(branch_from, model, optimizer, cfg)
    if state is not None:
        scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng_cpu"])
        if state["rng_cuda"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["rng_cuda"])
        result = TrainResult(
            steps_done=state["step"],
            losses=state["losses"],
            lrs=state["lrs"],
            seconds=seconds,
            resumed_from=state["step"],
        )

    model.train()
    check_precision(cfg.precision, device)
    head = fused_head(model)  # (body, head weight), or None: the model's forward transforms its logits
    placement.prepare_output(model, cfg.precision)
    compute = placement.compute(cfg.precision, device)
    ranks = placement.ranks
    pending: list[torch.Tensor] = []
    t0, tokens_since, step0 = time.perf_counter(), 0, result.steps_done
    for step in range(result.steps_done, cfg.steps):
        batch = batch_fn(step)  # the global batch (on the host): the same on every rank
        scored = int((batch["labels"] != IGNORE_INDEX).sum())
        mine = {k: v[ranks.rows(len(v))] for k, v in batch.items()}
        parts = _micro_batches(mine, micro_batch_size, keep_unscored=placement.keeps_unscored)
        if len(parts) == 1 and not ranks.several:  # this process holds the whole batch
            with compute:
                loss = _batch_loss(model, head, _to(mine, device))
            total = loss + extra_loss(model) if extra_loss is not None else loss
            total.backward()
        else:  # each part's mean loss weighted by its share of the global batch's scored tokens
            loss = torch.zeros((), device=device)
            for part in parts:
                share = int((part["labels"] != IGNORE_INDEX).sum()) / max(scored, 1)
                with compute:
                    part_loss = _batch_loss(model, head, _to(part if share else _scoring_one(part), device))
                    part_loss = part_loss * share
                part_loss.backward()
                loss += part_loss.detach()
            if extra_loss is not None:
                extra_loss(model).backward()
            ranks.all_sum(loss)  # the global batch's mean loss on every rank
        if cfg.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip, foreach=True)
        result.lrs.append(scheduler.get_last_lr()[0])
        if proximal_step is not None:
            proximal_step.before_step()
        optimizer.step()
        if proximal_step is not None:
            proximal_step.after_step(result.lrs[-1])
        if not result.state_bytes:
            result.state_bytes = state_bytes(model, optimizer)
            log.info(
                "rank %d of %d holds %s",
                ranks.rank,
                ranks.world,
                ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in result.state_bytes.items()),
            )
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        pending.append(loss.detach())
        tokens_since += scored
        result.steps_done = step + 1
        last = result.steps_done == cfg.steps
        stopping = stop_after is not None and result.steps_done >= stop_after
        if (
            result.steps_done % cfg.log_every == 0
            or result.steps_done % cfg.checkpoint_every == 0
            or last
            or stopping
        ):
            result.losses.extend(torch.stack(pending).float().cpu().tolist())
            pending.clear()
            elapsed = time.perf_counter() - t0
            rate = (result.steps_done - step0) / max(elapsed, 1e-9)
            log.info(
                "step %d/%d loss %.4f lr %.3g | %.0f tok/s, ETA %.0fs",
                result.steps_done,
                cfg.steps,
                result.losses[-1],
                result.lrs[-1],
                tokens_since / max(elapsed, 1e-9),
                (cfg.steps - result.steps_done) / max(rate, 1e-9),
            )
            if not math.isfinite(result.losses[-1]):
                result.diverged = True
                log.warning("loss became non-finite at step %d: run marked diverged", result.steps_done)
                break
            if state_path and (result.steps_done % cfg.checkpoint_every == 0 or stopping) and not last:
                _save_state(
                    state_path,
                    model,
                    optimizer,
                    scheduler,
                    result,
                    result.seconds + elapsed,
                    cfg,
                    placement,
                )
        if on_step_end is not None:
            on_step_end(result.steps_done)
            model.train()
        if stopping:
            break
    result.seconds += time.perf_counter() - t0
    if final_state is not None and result.steps_done == cfg.steps and not result.diverged:
        _save_state(Path(final_state), model, optimizer, scheduler, result, result.seconds, cfg, placement)
    model.eval()
    return result


def _branch_state(path: str | Path, model, optimizer, cfg: TrainConfig) -> dict:
    """Load another run's state to go on from (`train`'s branch_from), checked to be a branch point
    of this run."""
    state = resume.load_state(path, model, optimizer)
    if state is None:
        raise FileNotFoundError(f"{path}: no training state to branch from")
    if state.get("branch") != cfg.branch_key():
        raise ValueError(
            f"{path}: written by a run this one cannot branch from (other hyperparameters before the "
            "decay: learning rate, betas, weight decay, warmup, precision, ...)"
        )
    if state["step"] > cfg.steps:
        raise ValueError(f"{path}: its step {state['step']} is past this run's {cfg.steps} steps")
    log.info("branching from %s at step %d", path, state["step"])
    return state
