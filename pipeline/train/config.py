"""Run configs of the training stages: one dataclass per `pretrain:` / `finetune:` config section,
and the training loop's own per-run config. Torch-free: the Snakefile builds them at parse time.

The fields of PretrainConfig and FinetuneConfig are the hyperparameters, with their defaults (the
one place they live; config/schema/ has their types and ranges). A rule passes them to its job
through `params:` (`hyperparameters`), so a changed value reruns exactly the jobs that read it. Each
field's role (pipeline/fields.py: NUMBERS, the default, RECORDED or NEITHER) says where it goes:

- EXECUTION (NEITHER): how a run executes (logging / resume-state cadence, activation
  checkpointing, per-layer compilation). It changes no number (compilation: float rounding, and
  attention dropout's masks drawn by inductor's generator), so it is not in params (a change
  reruns nothing) and not in the recorded hyperparameters; the job reads it from the config.
- UNRECORDED (NUMBERS, not recorded): reaches the job, but is not a hyperparameter of the result
  (how a batch is computed).
- BASE_EVAL (a tag): also read by the base model's in-domain evaluation (rule task_base).

`OTHER_KEYS` of each class names the keys of its config section that are not fields, and why.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, ClassVar

from pipeline import fields as roles
from pipeline.fields import NEITHER, NUMBERS, meta

SCHEDULES = ("cosine", "constant", "constant_with_warmup")
# the pre-training sweep's schedules: cosine to zero at each budget (the paper), or warmup-stable-decay
# with each budget a decay branched from one stable run (Hägele et al. 2024, arXiv:2405.18392)
PRETRAIN_SCHEDULES = ("cosine", "wsd")
# standard parameterization, or muP (pipeline/models/mup.py: init, per-tensor learning rates, output
# multiplier and attention scale against each preset's base width)
PARAMETERIZATIONS = ("standard", "mup")
# how a WSD decay goes to zero: linearly, or as 1 - sqrt (Hägele et al.'s better cooldown)
DECAY_SHAPES = ("linear", "1-sqrt")
# fp32: weights, optimizer state and compute in float32. bf16-mixed: float32 master weights and
# AdamW state, bfloat16 compute, the loss and logits in float32 (pipeline/train/precision.py).
PRECISIONS = ("fp32", "bf16-mixed")
# How λ pulls θ toward θ_pre ("Linearization Explains Fine-Tuning in Large Language Models", eqs. 5
# and 8): coupled, the penalty λ‖θ − θ_pre‖² in the loss; decoupled, a step θ ← θ − λη(θ − θ_pre)
# after each optimizer step; selective, that step only on the tensors with ⟨∇L, θ − θ_pre⟩ ≥ 0.
PROXIMAL = ("coupled", "decoupled", "selective")
# What is trained: every parameter, the output layer only, or named module groups / LoRA (a mapping)
PARAMS = ("all", "output")
METHOD = meta(NUMBERS, method=True)  # a field a fine-tuning method (finetune.methods.<name>) sets

EXECUTION = meta(NEITHER)
UNRECORDED = meta(NUMBERS, recorded=False)
BASE_EVAL = meta(NUMBERS, base_eval=True)
WHEN_SET = meta(NUMBERS, when_set=True)  # in the identity only away from its default (pipeline/fields.py)

LOG_EVERY = 50  # steps between loss log lines (and loss-curve flushes)
CHECKPOINT_EVERY = 200  # steps between resume states (a killed run resumes from the last one)
# seconds between resume states, at the next logging step (written in the background: train/resume.py)
CHECKPOINT_SECONDS = 600.0
# seconds a rank of a sharded job may wait in a collective (for a dead or hung peer) before the job fails
COLLECTIVE_TIMEOUT_S = 1800


def _cadence(default: float | None) -> Any:
    return field(default=default, metadata=EXECUTION)


def resolve_precision(precision: str | None, device: str) -> str:
    """The precision policy a run uses: the configured one, or by device when null (bf16-mixed
    on CUDA, fp32 elsewhere: CPUs without bf16 units run bf16 several times slower)."""
    if precision is None:
        return "bf16-mixed" if str(device).startswith("cuda") else "fp32"
    if precision not in PRECISIONS:
        raise ValueError(f"precision: {precision!r} is unknown; expected one of {PRECISIONS} or null")
    return precision


def _check_precision(section: str, precision: str | None) -> None:
    if precision is not None and precision not in PRECISIONS:
        raise ValueError(
            f"{section}.precision: {precision!r} is unknown; expected one of {PRECISIONS} or null"
        )


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation hyperparameters of one run of the training loop (AdamW + warmup + schedule)."""

    steps: int
    lr: float
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = 0.1
    warmup_fraction: float = 0.1
    schedule: str = "cosine"
    grad_clip: float | None = 1.0
    precision: str = "fp32"  # one of PRECISIONS (resolved: not null)
    checkpoint_every: int = _cadence(CHECKPOINT_EVERY)
    checkpoint_seconds: float | None = _cadence(CHECKPOINT_SECONDS)  # null: by steps only
    log_every: int = _cadence(LOG_EVERY)
    decay_steps: int | None = field(default=None, metadata=WHEN_SET)  # schedule wsd: the last steps' decay
    decay_shape: str = field(default="linear", metadata=WHEN_SET)  # schedule wsd: DECAY_SHAPES
    # muP: width / base width; the hidden matrices' learning rate is lr / this (None: standard)
    mup_width_mult: float | None = field(default=None, metadata=WHEN_SET)

    @property
    def warmup_steps(self) -> int:
        return int(round(self.warmup_fraction * self.steps))

    def fingerprint(self) -> str:
        """Hash of what determines the numbers (not logging/checkpoint cadence)."""
        return _digest(
            {
                f.name: getattr(self, f.name)
                for f in fields(self)
                if roles.in_identity(f, getattr(self, f.name))
            }
        )

    def branch_key(self) -> str:
        """Hash of what a run started from another run's state must share with it: everything that
        determines the numbers but the length and the schedule after the warmup (a WSD decay
        branched from its stable run: pipeline/train/loop.py `branch_from`)."""
        after_warmup = {"steps", "schedule", "warmup_fraction", "decay_steps", "decay_shape"}
        d = {f.name: getattr(self, f.name) for f in fields(self) if changes_numbers(type(self), f.name)}
        return _digest({k: v for k, v in d.items() if k not in after_warmup} | {"warmup": self.warmup_steps})


def _digest(d: dict) -> str:
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def warmup_fraction_of(warmup_fraction: float, warmup_steps: int | None, total_steps: int) -> float:
    """The warmup as a fraction of the run (what the training loop takes): warmup_steps / steps
    (at most the whole run) when warmup_steps is set, else warmup_fraction."""
    if warmup_steps is None:
        return warmup_fraction
    return min(warmup_steps, total_steps) / total_steps


@dataclass(frozen=True)
class PretrainConfig:
    """Hyperparameters of one pre-training run (config `pretrain:`; the grid comes as wildcards)."""

    OTHER_KEYS: ClassVar[dict[str, str]] = {
        "presets": "wildcard {model}",
        "budgets": "wildcard {budget}",
        "seeds": "wildcard {pretrain_seed}",
        "allow_repeat": "a start-up check (a budget beyond the training split)",
        "threads": "job threads (cannot change a number)",
        "ranks": "processes per job, resources.ranks (FSDP2; changes no number beyond float rounding)",
        "token_shards": "pre-tokenized training data: rule pretrain's inputs (pipeline/data/token_shards.py)",
        "text_files": "text to tokenize into shards: rule tokenize_shard's, then pretrain's inputs",
        "stable_twins": "WSD: which checkpoints the sweep has (rule pretrain_stable_twin), not a run's",
    }

    seq_len: int
    batch_size: int
    lr: float
    betas: tuple[float, float]
    weight_decay: float
    warmup_fraction: float
    warmup_steps: int | None = None  # when set, replaces warmup_fraction
    grad_clip: float | None = 1.0
    precision: str | None = None  # PRECISIONS; null: bf16-mixed on CUDA, fp32 elsewhere
    activation_checkpointing: bool = field(default=False, metadata=EXECUTION)  # recompute per layer
    # per-layer torch.compile (pipeline/models/compile.py); None: on for CUDA, off elsewhere
    compile: bool | None = field(default=None, metadata=EXECUTION)
    checkpoint_every: int = _cadence(CHECKPOINT_EVERY)
    checkpoint_seconds: float | None = _cadence(CHECKPOINT_SECONDS)  # null: by steps only
    log_every: int = _cadence(LOG_EVERY)
    schedule: str = field(default="cosine", metadata=WHEN_SET)  # PRETRAIN_SCHEDULES
    decay_fraction: float = field(default=0.2, metadata=WHEN_SET)  # wsd: each budget's last steps' share
    decay_shape: str = field(default="linear", metadata=WHEN_SET)  # wsd: DECAY_SHAPES
    parameterization: str = field(default="standard", metadata=WHEN_SET)  # PARAMETERIZATIONS

    def __post_init__(self) -> None:
        _check_precision("pretrain", self.precision)
        if self.parameterization not in PARAMETERIZATIONS:
            raise ValueError(
                f"pretrain.parameterization: {self.parameterization!r} is unknown; "
                f"expected one of {PARAMETERIZATIONS}"
            )
        if self.schedule not in PRETRAIN_SCHEDULES:
            raise ValueError(
                f"pretrain.schedule: {self.schedule!r} is unknown; expected one of {PRETRAIN_SCHEDULES}"
            )
        if self.decay_shape not in DECAY_SHAPES:
            raise ValueError(
                f"pretrain.decay_shape: {self.decay_shape!r} is unknown; expected one of {DECAY_SHAPES}"
            )
        if not 0 < self.decay_fraction <= 1:
            raise ValueError(
                f"pretrain.decay_fraction: {self.decay_fraction}; expected a share of the run in (0, 1]"
            )
        if self.schedule == "wsd" and self.warmup_steps is None:
            raise ValueError(
                "pretrain.warmup_steps: schedule wsd needs the warmup in steps (every budget branches "
                "from one stable run, so every budget warms up alike); set it, e.g. to 10% of the "
                "smallest budget's steps"
            )

    def train_config(
        self, steps: int, device: str = "cpu", mup_width_mult: float | None = None
    ) -> TrainConfig:
        """The loop's config of a run of `steps` steps on `device`: cosine to zero at the budget, or
        WSD (warmup, the peak rate, a decay to zero over the last `decay_fraction` of the steps).
        `mup_width_mult`: the model's width over its base width, under muP."""
        decay = self.decay_steps(steps) if self.schedule == "wsd" else None
        return self._loop_config(steps, device, self.schedule, decay, mup_width_mult)

    def stable_config(
        self, steps: int, device: str = "cpu", mup_width_mult: float | None = None
    ) -> TrainConfig:
        """The loop's config of WSD's stable run up to step `steps`: warmup, then the peak rate.
        Every budget's decay branches from its state (TrainConfig.branch_key)."""
        return self._loop_config(steps, device, "constant_with_warmup", None, mup_width_mult)

    def _loop_config(
        self, steps: int, device: str, schedule: str, decay_steps: int | None, mup_width_mult: float | None
    ) -> TrainConfig:
        if (self.parameterization == "mup") != (mup_width_mult is not None):
            raise ValueError(
                f"pretrain.parameterization {self.parameterization}: the width multiplier is {mup_width_mult}"
            )
        return TrainConfig(
            steps=steps,
            lr=self.lr,
            betas=tuple(self.betas),
            weight_decay=self.weight_decay,
            warmup_fraction=warmup_fraction_of(self.warmup_fraction, self.warmup_steps, steps),
            schedule=schedule,
            grad_clip=self.grad_clip,
            precision=resolve_precision(self.precision, device),
            checkpoint_every=self.checkpoint_every,
            checkpoint_seconds=self.checkpoint_seconds,
            log_every=self.log_every,
            decay_steps=decay_steps,
            decay_shape=self.decay_shape if decay_steps is not None else "linear",
            mup_width_mult=mup_width_mult,
        )

    def decay_steps(self, steps: int) -> int:
        """WSD: the steps of a run of `steps` that decay (at least one)."""
        return max(1, int(round(self.decay_fraction * steps)))

    def branch_step(self, budget: int) -> int:
        """WSD: the step at which the decay of `budget` leaves the stable run (its state there is the
        stable job's output); checked: after the warmup."""
        steps = steps_for_budget(budget, self.batch_size, self.seq_len)
        start = steps - self.decay_steps(steps)
        if self.warmup_steps is not None and start < min(self.warmup_steps, steps):
            raise ValueError(
                f"pretrain.decay_fraction: the decay of budget {budget:,} ({self.decay_steps(steps)} of its "
                f"{steps} steps) would start at step {start}, inside the warmup ({self.warmup_steps} steps, "
                "pretrain.warmup_steps); expected warmup + decay <= the budget's steps: lower either or "
                "raise the budget"
            )
        return start


@dataclass(frozen=True)
class FinetuneConfig:
    """Hyperparameters of one fine-tuning run (config `finetune:`, Table 4; the grid values come as
    wildcards)."""

    OTHER_KEYS: ClassVar[dict[str, str]] = {
        "enabled": "whether the study fine-tunes",
        "tasks": "wildcard {task}",
        "task_data": "rule task_data's params",
        "learning_rates": "wildcard {lr}",
        "lambdas": "wildcard {lam}",
        "methods": "wildcard {method}: each sets the METHOD fields (params, proximal, replay, linearized)",
        "seeds": "wildcard {seed}",
        "seeds_at": "which runs exist: every rate, or the tuned rate only (the targets)",
        "grid_per_job": "how runs are grouped into jobs (rule finetune_grid; changes no number)",
        "select_metric": "what the tuned-LR analysis selects on (rule finetune_analysis's params)",
        "threads": "job threads (cannot change a number)",
        "ranks": "processes per job, resources.ranks (FSDP2; changes no number beyond float rounding)",
    }

    epochs: int = 4
    max_steps: int | None = None  # cap on optimiser steps (CPU runs); None: `epochs` full epochs
    batch_size: int = 64
    # gradient accumulation: forward/backward this many at a time
    micro_batch_size: int | None = field(default=None, metadata=UNRECORDED)
    # LM tasks' packed chunk length / classification and chat context; None: the model's
    seq_len: int | None = field(default=None, metadata=BASE_EVAL)
    schedule: str = "cosine"
    warmup_fraction: float = 0.1
    warmup_steps: int | None = None  # when set, replaces warmup_fraction (Table 2: 20 steps)
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.0
    grad_clip: float | None = 1.0
    eval_batch_size: int = field(default=64, metadata=BASE_EVAL)
    # LM and chat tasks: validation/test documents up to this many tokens
    eval_max_tokens: int | None = field(default=None, metadata=BASE_EVAL)
    precision: str | None = None  # PRECISIONS; null: bf16-mixed on CUDA, fp32 elsewhere
    activation_checkpointing: bool = field(default=False, metadata=EXECUTION)  # recompute per layer
    # per-layer torch.compile (pipeline/models/compile.py); None: on for CUDA, off elsewhere
    compile: bool | None = field(default=None, metadata=EXECUTION)
    checkpoint_every: int = _cadence(CHECKPOINT_EVERY)
    checkpoint_seconds: float | None = _cadence(CHECKPOINT_SECONDS)  # null: by steps only
    log_every: int = _cadence(LOG_EVERY)
    collective_timeout_s: int = field(default=COLLECTIVE_TIMEOUT_S, metadata=EXECUTION)
    # what is trained: "all" | "output" | {"modules": [name patterns]} | {"lora": {rank, alpha, ...}}
    params: str | dict = field(default="all", metadata=METHOD)
    proximal: str = field(default="coupled", metadata=METHOD)  # one of PROXIMAL
    # share of each batch's rows drawn from the pre-training corpus's training split
    replay_fraction: float = field(default=0.0, metadata=METHOD)
    # train the tangent model f(θ_pre) + J (θ − θ_pre) instead of f(θ) (pipeline/train/linearized.py)
    linearized: bool = field(default=False, metadata=METHOD)
    # WiSE-FT: θ_pre + α(θ_ft − θ_pre) is evaluated at each α (null: not evaluated)
    wise_ft_alphas: tuple[float, ...] | None = None
    # the linearization gap along θ_ft − θ_pre on this many held-out tokens of each of the
    # pre-training corpus and the task (0: not measured)
    linearization_tokens: int = 0

    def __post_init__(self) -> None:
        if self.proximal not in PROXIMAL:
            raise ValueError(
                f"finetune.methods.*.proximal: {self.proximal!r} is unknown; expected one of {PROXIMAL}"
            )
        if not 0 <= self.replay_fraction < 1:
            raise ValueError(f"finetune.methods.*.replay_fraction: {self.replay_fraction} is outside [0, 1)")
        if self.wise_ft_alphas is not None and not {0.0, 1.0} <= {float(a) for a in self.wise_ft_alphas}:
            raise ValueError(
                f"finetune.wise_ft_alphas: {list(self.wise_ft_alphas)} must contain 0 (θ_pre) and 1 (θ_ft)"
            )
        check_params(self.params)
        if self.schedule not in SCHEDULES:
            raise ValueError(f"finetune.schedule: {self.schedule!r} is unknown; expected one of {SCHEDULES}")
        if self.epochs < 1 or (self.max_steps is not None and self.max_steps < 1):
            raise ValueError("finetune.epochs and finetune.max_steps must be >= 1")
        if self.warmup_steps is not None and self.warmup_steps < 0:
            raise ValueError(f"finetune.warmup_steps must be >= 0 or null, got {self.warmup_steps}")
        _check_precision("finetune", self.precision)

    def whole_model_keys(self) -> list[str]:
        """The settings on that need the whole model in one process (not a sharded job), by key:
        the tangent model's forward is a `torch.func.jvp` through `functional_call`, which FSDP2's
        sharded parameters do not go through."""
        on = {"finetune.methods.*.linearized": self.linearized}
        return [key for key, needed in on.items() if needed]

    def warmup_fraction_of(self, total_steps: int) -> float:
        """The warmup as a fraction of a run of `total_steps` (warmup_steps, when set, wins)."""
        return warmup_fraction_of(self.warmup_fraction, self.warmup_steps, total_steps)

    def train_config(self, steps: int, lr: float, device: str = "cpu") -> TrainConfig:
        """The loop's config of a run of `steps` steps at learning rate `lr` (a grid value) on `device`."""
        return TrainConfig(
            steps=steps,
            lr=lr,
            betas=tuple(self.betas),
            weight_decay=self.weight_decay,
            warmup_fraction=self.warmup_fraction_of(steps),
            schedule=self.schedule,
            grad_clip=self.grad_clip,
            precision=resolve_precision(self.precision, device),
            checkpoint_every=self.checkpoint_every,
            checkpoint_seconds=self.checkpoint_seconds,
            log_every=self.log_every,
        )

    def recorded(self) -> dict:
        """The hyperparameters a result row records (`extra`): all but EXECUTION and UNRECORDED."""
        keep = {f.name for f in fields(self) if roles.is_recorded(f)}
        return {k: v for k, v in asdict(self).items() if k in keep}


def check_params(params: str | dict) -> None:
    """`finetune.methods.*.params` is "all", "output", {"modules": [...]} or {"lora": {...}}."""
    if isinstance(params, str):
        if params not in PARAMS:
            raise ValueError(
                f"finetune.methods.*.params: {params!r} is unknown; expected one of {PARAMS} or a mapping"
            )
        return
    if len(params) != 1 or next(iter(params)) not in ("modules", "lora"):
        raise ValueError(
            f"finetune.methods.*.params: {params!r}; expected {{modules: [name patterns]}} or "
            "{lora: {rank, ...}}"
        )


def method_fields() -> tuple[str, ...]:
    """The FinetuneConfig fields a fine-tuning method sets (finetune.methods.<name>)."""
    return tuple(f.name for f in fields(FinetuneConfig) if roles.tagged(f, "method"))


def changes_numbers(cls: type, name: str) -> bool:
    """Whether field `name` of `cls` can change a number (EXECUTION fields cannot)."""
    return roles.changes_numbers(roles.field_named(cls, name))


def hyperparameters(cls: type, section: dict, base_eval_only: bool = False) -> dict:
    """A rule's `params:` for the run config `cls`: every field that can change a number, from the
    config section or its default (base_eval_only: the BASE_EVAL fields only). Keys of the section
    that are not fields (OTHER_KEYS) and EXECUTION fields are left out, and `when_set` fields at
    their defaults (pipeline/fields.py: the results made before such a field existed stay valid)."""
    out = {}
    for f in fields(cls):
        if not roles.changes_numbers(f) or (base_eval_only and not roles.tagged(f, "base_eval")):
            continue
        if f.name in section:
            value = section[f.name]
        elif f.default is not MISSING:
            value = f.default
        else:
            raise KeyError(f"config key {f.name!r} is required")
        if roles.in_identity(f, value):
            out[f.name] = value
    return out


def execution(cls: type, section: dict) -> dict:
    """The EXECUTION fields of `cls` from a config section (or their defaults): a job reads them
    from the config, not from params, so changing them reruns nothing."""
    return {f.name: section.get(f.name, f.default) for f in fields(cls) if not roles.changes_numbers(f)}


# Table 2's other settings as `finetune:` config keys (config/instruct.yaml applies them): batch
# 256 conversations (reach it with micro_batch_size), cosine, 20 warmup steps, AdamW, weight
# decay 0. Table 2 gives no epoch count: 2, as the TULU v1 recipe the paper's TULU comes from
# (Wang et al., 2023, open-instruct), with the pipeline's early stopping over epochs on the ID
# validation loss. AdamW betas, gradient clipping and the context are not in Table 2: the
# transformers / open-instruct defaults (0.9, 0.999), 1.0 and the model's context.
INSTRUCT_FINETUNE: dict[str, object] = {
    "learning_rates": "instruct",
    "batch_size": 256,
    "schedule": "cosine",
    "warmup_steps": 20,
    "weight_decay": 0.0,
    "epochs": 2,
    "max_steps": None,
    "betas": [0.9, 0.999],
    "grad_clip": 1.0,
    "seq_len": None,
}


def steps_for_budget(budget: int, batch_size: int, seq_len: int) -> int:
    """Optimiser steps that fit in a token budget; a budget below one batch is an error."""
    per_step = batch_size * seq_len
    if budget < per_step:
        raise ValueError(
            f"pretrain.budgets: token budget {budget} is smaller than one batch "
            f"({batch_size} x {seq_len} = {per_step} tokens)"
        )
    return budget // per_step


def check_repeat(budget: int, trained: int, available: int, allow_repeat: bool, split: str) -> None:
    """A budget beyond the training split would repeat data (the paper's budgets never repeat C4):
    an error naming both sizes, unless `pretrain.allow_repeat`. trained: the tokens the budget's run
    trains on (whole steps); available: the split's tokens in whole training chunks (what a run
    covers without visiting one twice)."""
    if trained > available and not allow_repeat:
        raise ValueError(
            f"pretrain.budgets: budget {budget:,} tokens exceeds the training split ({split}: "
            f"{available:,} tokens in training chunks; {trained / available:.2f} epochs); lower the "
            "budget, use a larger corpus, or set pretrain.allow_repeat: true to repeat data"
        )


def chunked_tokens(n_tokens: int, seq_len: int) -> int:
    """Tokens of a split of `n_tokens` in whole training chunks of `seq_len` (+1 target) tokens."""
    return (n_tokens - 1) // seq_len * seq_len
