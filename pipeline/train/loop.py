"""A lean, resumable causal-LM training loop (pre-training and fine-tuning share it).

Why not `transformers.Trainer`: at the sizes this pipeline sweeps (thousands of small
runs) its per-step overhead dominates; bench/bench_train_eval.py measures the ratio.
The loop is deterministic given (seed, step): batches are a pure function of the step,
and a killed run resumes from its last state file with bit-identical results.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
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
SCORED = "scored_positions"  # a multimodal batch's scored positions, flat, found on the host


def _batch_loss(
    model: torch.nn.Module, head: FusedHead | None, batch: dict[str, torch.Tensor]
) -> torch.Tensor:
    """Mean next-token loss of one (micro-)batch, through the fused head when the model allows it;
    other inputs (a multimodal batch's `pixel_values`) go to the model's body.

    A multimodal batch scores its replies only (the toy LLaVA: ~6% of the positions), so only those
    rows go through the head: 2.0x faster steps than the model's own logits on the toy
    (bench/bench_llava_step.py). Text batches keep every row, which keeps the text studies'
    numbers bit for bit. The scored positions come found on the host (`SCORED`, the loop's batches:
    no read-back) or are found here.
    """
    extra = {k: v for k, v in batch.items() if k not in (*TOKEN_KEYS, SCORED)}
    labels = batch["labels"]
    if head is not None:  # chunked fused head: the (tokens x vocab) logits never exist
        return head.loss(
            batch["input_ids"],
            labels,
            batch.get("attention_mask"),
            scored_only=bool(extra),
            scored=batch.get(SCORED),
            **extra,
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
    for i in range(0, n, size):  # on the host (numpy): no device is involved
        scored = np.flatnonzero((batch["labels"][i : i + size].numpy() != IGNORE_INDEX).any(0))
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


class Callback:
    """A hook into `train`, each method a no-op unless overridden. Around each optimizer step the loop
    calls `extra_loss` (a term added to the LM loss), `before_step` (the gradients in place),
    `after_step` (the parameters stepped) and `step_end` (the step counted and logged; it may leave
    the model in eval mode, the loop switches it back). `start` offers a state to begin from when the
    run has no resume state of its own; `end` sees the finished run."""

    def start(self, loop: Loop) -> dict | None:
        return None

    def extra_loss(self, model: torch.nn.Module) -> torch.Tensor | None:
        return None

    def before_step(self, loop: Loop) -> None:
        pass

    def after_step(self, loop: Loop) -> None:
        pass

    def step_end(self, loop: Loop) -> None:
        pass

    def end(self, loop: Loop) -> None:
        pass


@dataclass
class Loop:
    """The running loop as its callbacks see it."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    cfg: TrainConfig
    placement: Whole
    result: TrainResult

    @property
    def step(self) -> int:
        """Optimizer steps done."""
        return self.result.steps_done

    @property
    def lr(self) -> float:
        """The learning rate of the last step."""
        return self.result.lrs[-1]

    def state(self, seconds: float) -> dict:
        """Everything a killed run needs to continue bit-identically besides the model and optimizer
        (pipeline/train/resume.py), and a run branched from it to go on (its branch key)."""
        return {
            "step": self.result.steps_done,
            "fingerprint": self.cfg.fingerprint(),
            "branch": self.cfg.branch_key(),
            "scheduler": self.scheduler.state_dict(),
            "rng_cpu": torch.get_rng_state(),
            "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "losses": list(self.result.losses),
            "lrs": list(self.result.lrs),
            "seconds": seconds,
        }

    def save(self, path: str | Path) -> None:
        """Write the run's state to `path` now (a branch point), waiting for it."""
        resume.save_state(
            path, self.model, self.optimizer, self.state(self.result.seconds), self.placement.ranks
        )


@dataclass
class _Batch:
    """One step's batch, planned on the host: its parts (this rank's rows, micro-batches) on the
    device, each with its share of the global batch's scored tokens."""

    parts: list[tuple[dict[str, torch.Tensor], float]]
    scored: int  # the global batch's scored tokens
    whole: bool  # one part, this process holding the whole batch: its loss is the batch's


def _scored(labels: torch.Tensor) -> int:
    """Scored positions of a host tensor of labels (numpy: no device is involved)."""
    return int(np.count_nonzero(labels.numpy() != IGNORE_INDEX))


class _Batches:
    """Each step's batch, planned on the host and copied to the device one step ahead: from pinned
    memory without blocking on CUDA, so the copy overlaps the step before."""

    def __init__(self, batch_fn, micro_batch_size: int | None, placement: Whole, device: torch.device):
        self.batch_fn = batch_fn
        self.micro_batch_size = micro_batch_size
        self.placement = placement
        self.device = device
        self.pin = device.type == "cuda"
        self.ahead: tuple[int, _Batch] | None = None

    def take(self, step: int) -> _Batch:
        """The batch of `step`, prefetched unless it was not."""
        if self.ahead is not None and self.ahead[0] == step:
            batch, self.ahead = self.ahead[1], None
            return batch
        return self._load(step)

    def prefetch(self, step: int) -> None:
        self.ahead = (step, self._load(step))

    def _load(self, step: int) -> _Batch:
        batch = self.batch_fn(step)  # the global batch (on the host): the same on every rank
        ranks = self.placement.ranks
        scored = _scored(batch["labels"])
        mine = {k: v[ranks.rows(len(v))] for k, v in batch.items()}
        parts = _micro_batches(mine, self.micro_batch_size, keep_unscored=self.placement.keeps_unscored)
        if len(parts) == 1 and not ranks.several:  # this process holds the whole batch
            return _Batch([(self._to_device(mine), 1.0)], scored, whole=True)
        planned = []
        for part in parts:  # each part's mean loss weighted by its share of the global batch's scored tokens
            share = _scored(part["labels"]) / max(scored, 1)
            planned.append((self._to_device(part if share else _scoring_one(part)), share))
        return _Batch(planned, scored, whole=False)

    def _to_device(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The batch on the device; a multimodal one with its scored positions (`_batch_loss`)."""
        if set(batch) - set(TOKEN_KEYS):
            flat = np.flatnonzero(batch["labels"].numpy().reshape(-1) != IGNORE_INDEX)
            batch = batch | {SCORED: torch.from_numpy(flat)}
        if self.pin:
            batch = {k: v.pin_memory() for k, v in batch.items()}
        return {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}


def _scoring_one(part: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`part` with its first label made a real token: a finite loss for a slice that scores
    nothing (it is weighted 0; a sharded rank still runs its forward and backward)."""
    labels = part["labels"].clone()
    labels.view(-1)[0] = 0
    return part | {"labels": labels}


def train(
    model: torch.nn.Module,
    batch_fn: Callable[[int], dict[str, torch.Tensor]],
    cfg: TrainConfig,
    state_path: str | Path | None = None,
    callbacks: Sequence[Callback] = (),
    stop_after: int | None = None,
    micro_batch_size: int | None = None,
    placement: Whole = WHOLE,
) -> TrainResult:
    """Train `model` for `cfg.steps` steps on `batch_fn(step)` batches (on the host).

    state_path: resume file; loaded if it exists (and was written with the same config), written in
        the background (pipeline/train/resume.py `Saver`) at the first logging step after
        `cfg.checkpoint_seconds`, and every `cfg.checkpoint_every` steps. A killed run continues
        from the last complete one.
    callbacks: hooks around each step (`Callback`): a proximal term or step toward the initial
        weights (pipeline/train/proximal.py), early stopping at epoch ends (finetune.py), a WSD
        branch point to start from and to write (pretrain.py).
    stop_after: stop (as if killed) after this many steps; for tests of resumption.
    micro_batch_size: gradient accumulation: forward/backward this many rows of a batch at a
        time, each part's mean loss weighted by its share of the batch's scored tokens (the
        gradient is the whole batch's; None: the whole batch at once).
    placement: where the model lives (pipeline/train/placement.py); sharded over ranks, each rank
        takes its rows of every global batch and the callbacks' terms cover its own shards.
    A non-finite loss stops the run and marks it diverged instead of raising. The host waits for
    the device once per logging step (the losses read back), not at the other steps.
    """
    device = next(model.parameters()).device
    optimizer = make_optimizer(model, cfg)
    loop = Loop(model, optimizer, make_schedule(optimizer, cfg), cfg, placement, TrainResult(steps_done=0))
    _resume(loop, Path(state_path) if state_path else None, callbacks)

    model.train()
    check_precision(cfg.precision, device)
    head = fused_head(model)  # (body, head weight), or None: the model's forward transforms its logits
    placement.prepare_output(model, cfg.precision)
    compute = placement.compute(cfg.precision, device)
    batches = _Batches(batch_fn, micro_batch_size, placement, device)
    saver = resume.Saver(placement.ranks)
    result = loop.result
    pending: list[torch.Tensor] = []
    t0 = time.perf_counter()
    tokens_since, step0 = 0, result.steps_done
    for step in range(result.steps_done, cfg.steps):
        batch = batches.take(step)
        with _unpacked_rows():
            pending.append(_forward_backward(loop, head, batch, compute, callbacks))
        stopping = stop_after is not None and step + 1 >= stop_after
        if step + 1 < cfg.steps and not stopping:
            batches.prefetch(step + 1)  # its copy queued behind this step's work
        _optimizer_step(loop, callbacks)
        tokens_since += batch.scored
        last = result.steps_done == cfg.steps
        checkpoint = (
            bool(state_path) and not last and (result.steps_done % cfg.checkpoint_every == 0 or stopping)
        )
        if checkpoint or last or stopping or result.steps_done % cfg.log_every == 0:
            elapsed = time.perf_counter() - t0
            _report(
                result,
                pending,
                tokens_since / max(elapsed, 1e-9),
                (result.steps_done - step0) / max(elapsed, 1e-9),
                cfg.steps,
            )
            if result.diverged:
                break
            if state_path and not last and (checkpoint or saver.due(cfg.checkpoint_seconds)):
                saver.save(state_path, model, optimizer, loop.state(result.seconds + elapsed))
            saver.poll()
        for callback in callbacks:
            callback.step_end(loop)
            model.train()
        if stopping:
            break
    saver.wait()
    result.seconds += time.perf_counter() - t0
    for callback in callbacks:
        callback.end(loop)
    model.eval()
    return result


def _resume(loop: Loop, state_path: Path | None, callbacks: Sequence[Callback]) -> None:
    """Continue from the run's own state at `state_path`, else from a callback's (a branch point),
    else from step 0."""
    cfg = loop.cfg
    state = resume.load_state(state_path, loop.model, loop.optimizer) if state_path else None
    if state is not None and state["fingerprint"] != cfg.fingerprint():
        raise ValueError(
            f"resume file {state_path} was written by a run with other hyperparameters; "
            "delete it to start over"
        )
    seconds = state["seconds"] if state is not None else 0.0  # this run's own time
    if state is not None:
        log.info("resumed from %s at step %d/%d", state_path, state["step"], cfg.steps)
    for callback in callbacks:
        state = state if state is not None else callback.start(loop)
    if state is None:
        return
    loop.scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng_cpu"])
    if state["rng_cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["rng_cuda"])
    loop.result = TrainResult(
        steps_done=state["step"],
        losses=state["losses"],
        lrs=state["lrs"],
        seconds=seconds,
        resumed_from=state["step"],
    )


def _forward_backward(
    loop: Loop, head, batch: _Batch, compute, callbacks: Sequence[Callback]
) -> torch.Tensor:
    """Gradients of the batch's mean loss (and the callbacks' terms); the loss, on the device."""
    model = loop.model
    if batch.whole:
        with compute:
            loss = _batch_loss(model, head, batch.parts[0][0])
        total = loss
        for term in _extra_terms(model, callbacks):
            total = total + term
        total.backward()
        return loss.detach()
    loss = torch.zeros((), device=next(model.parameters()).device)
    for part, share in batch.parts:
        with compute:
            part_loss = _batch_loss(model, head, part) * share
        part_loss.backward()
        loss += part_loss.detach()
    for term in _extra_terms(model, callbacks):
        term.backward()
    loop.placement.ranks.all_sum(loss)  # the global batch's mean loss on every rank
    return loss


@contextlib.contextmanager
def _unpacked_rows() -> Iterator[None]:
    """transformers checks a forward's position ids for packed sequences when it gets no attention
    mask (`masking_utils.find_packed_sequence_indices`): a value read back, so the host would wait for
    the device every step. The loop never passes position ids, so the model's own (0, 1, ... in every
    row) are what it checks, never packed: the check's answer is None, given here without the wait."""
    import transformers.masking_utils as masking

    check = masking.find_packed_sequence_indices
    masking.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masking.find_packed_sequence_indices = check


def _extra_terms(model: torch.nn.Module, callbacks: Sequence[Callback]) -> list[torch.Tensor]:
    return [t for c in callbacks if (t := c.extra_loss(model)) is not None]


def _optimizer_step(loop: Loop, callbacks: Sequence[Callback]) -> None:
    """Clip, step (the callbacks around it), advance the schedule, count the step."""
    result, model, optimizer = loop.result, loop.model, loop.optimizer
    if loop.cfg.grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), loop.cfg.grad_clip, foreach=True)
    result.lrs.append(loop.scheduler.get_last_lr()[0])
    for callback in callbacks:
        callback.before_step(loop)
    optimizer.step()
    for callback in callbacks:
        callback.after_step(loop)
    if not result.state_bytes:
        result.state_bytes = state_bytes(model, optimizer)
        ranks = loop.placement.ranks
        log.info(
            "rank %d of %d holds %s",
            ranks.rank,
            ranks.world,
            ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in result.state_bytes.items()),
        )
    loop.scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    result.steps_done += 1


def _report(
    result: TrainResult, pending: list[torch.Tensor], tokens_per_s: float, steps_per_s: float, steps: int
) -> None:
    """Read the losses since the last report back to the host (the loop's one wait for the device),
    log them, and mark a non-finite loss diverged."""
    result.losses.extend(torch.stack(pending).float().cpu().tolist())
    pending.clear()
    log.info(
        "step %d/%d loss %.4f lr %.3g | %.0f tok/s, ETA %.0fs",
        result.steps_done,
        steps,
        result.losses[-1],
        result.lrs[-1],
        tokens_per_s,
        (steps - result.steps_done) / max(steps_per_s, 1e-9),
    )
    if not math.isfinite(result.losses[-1]):
        result.diverged = True
        log.warning("loss became non-finite at step %d: run marked diverged", result.steps_done)


class Branch(Callback):
    """A run that goes on from another run's state (a WSD decay from its stable run) when it has none
    of its own, and writes its state after its last step (a stable run's branch point)."""

    def __init__(self, start_from: str | Path | None = None, final_state: str | Path | None = None):
        self.start_from, self.final_state = start_from, final_state

    def start(self, loop: Loop) -> dict | None:
        if self.start_from is None:
            return None
        return _branch_state(self.start_from, loop.model, loop.optimizer, loop.cfg)

    def end(self, loop: Loop) -> None:
        if self.final_state is not None and loop.step == loop.cfg.steps and not loop.result.diverged:
            loop.save(self.final_state)


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
