"""Where a job's model lives: whole in this process (`Whole`), or sharded over the job's ranks with
FSDP2 (`Sharded`). The one place the two differ: the training loop, early stopping and the
fine-tuning job ask the placement, never "is this sharded?". The choice is made where a job
starts: in the rule's own process (`Whole`), or under torchrun (`Sharded`, any rank count).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch

from pipeline.models.loading import load_checkpoint
from pipeline.models.losses import fused_head
from pipeline.ranks import SINGLE, Ranks
from pipeline.train.distributed import full_copy, full_like, load_into_shards, local, reshard, shard_model
from pipeline.train.precision import compute_context, fp32_output_layer
from pipeline.train.recompute import enable_activation_checkpointing

if TYPE_CHECKING:
    from pipeline.models.checkpoints import CheckpointSpec


Build = Callable[[torch.nn.Module, object], torch.nn.Module]  # (the loaded model, the tokenizer) -> model


def _as_is(model: torch.nn.Module, tokenizer: object) -> torch.nn.Module:
    return model


@dataclass(frozen=True)
class Whole:
    """The whole model in this one process."""

    ranks: Ranks = SINGLE
    # a micro-batch that scores nothing is skipped (sharded ranks must run it: they gather together)
    keeps_unscored: ClassVar[bool] = False
    # code that needs the whole model in one process after training (the curvature line) can run
    holds_whole_model: ClassVar[bool] = True

    def load_model(
        self,
        spec: CheckpointSpec,
        path: str | None,
        device: str,
        precision: str,
        recompute: bool,
        build: Build = _as_is,
    ):
        """(model, tokenizer) in float32 (master) weights on `device` (AdamW on bf16 weights loses
        small updates); `recompute`: activation checkpointing per decoder layer; `build`: what to
        make of the loaded model and its tokenizer (the model to train, e.g. wrapped in LoRA adapters)."""

        model, tokenizer, _, _ = load_checkpoint(spec, path, device, dtype=torch.float32)
        _recompute(model, recompute)
        return build(model, tokenizer), tokenizer

    def place(self, model: torch.nn.Module, precision: str) -> None:
        """Place a model built in this process (pre-training): whole, as it is."""

    def compute(self, precision: str, device: torch.device):
        """The context of a forward pass: bf16 autocast for bf16-mixed."""

        return compute_context(precision, device)

    def prepare_output(self, model: torch.nn.Module, precision: str) -> None:
        """Logits in float32 for a model trained through `model(...).logits` (no fused head)."""

        if fused_head(model) is None and precision != "fp32":
            fp32_output_layer(model)

    def local(self, t: torch.Tensor) -> torch.Tensor:
        """This process's part of a parameter: all of it."""
        return t

    def full_like(self, part: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """The whole tensor whose part in this process is `part`, as parameter `like` is split: `part`."""
        return part

    def settle(self, model: torch.nn.Module) -> None:
        """After a forward without backward (an evaluation): nothing to free."""

    @contextlib.contextmanager
    def whole(self, model: torch.nn.Module, dtype: torch.dtype) -> Iterator[torch.nn.Module]:
        """The model whole in `dtype`, in eval mode: itself when it already is that, else a copy."""
        if next(model.parameters()).dtype == dtype:
            yield model.eval()
            return

        with _released(full_copy(model, dtype)) as copy:
            yield copy


@dataclass(frozen=True)
class Sharded(Whole):
    """Parameters, gradients and optimizer state sharded over `ranks` with FSDP2 (a process group
    of any size, started by torchrun: pipeline/train/distributed.py)."""

    keeps_unscored: ClassVar[bool] = True
    holds_whole_model: ClassVar[bool] = False

    def load_model(
        self,
        spec: CheckpointSpec,
        path: str | None,
        device: str,
        precision: str,
        recompute: bool,
        build: Build = _as_is,
    ):
        """(model, tokenizer) sharded, the checkpoint read once (by rank 0) for the whole job;
        `build` runs on every rank before sharding (rank 0's values of what it adds are broadcast)."""

        def prepare(model: torch.nn.Module, tokenizer: object) -> torch.nn.Module:
            _recompute(model, recompute)
            return build(model, tokenizer)

        return load_into_shards(
            spec, path, device, self.ranks, lambda m: shard_model(m, precision), build=prepare
        )

    def place(self, model: torch.nn.Module, precision: str) -> None:
        """Shard a model every rank built alike (pre-training: the same seed): each keeps its shards."""
        shard_model(model, precision)

    def compute(self, precision: str, device: torch.device):
        """Nothing: FSDP2's MixedPrecisionPolicy casts the parameters itself."""
        return contextlib.nullcontext()

    def prepare_output(self, model: torch.nn.Module, precision: str) -> None:
        """Nothing: the output layer has its own float32 FSDP2 policy (shard_model), and the fused
        head runs inside its forward (pipeline.models.losses.FusedHead)."""

    def local(self, t: torch.Tensor) -> torch.Tensor:

        return local(t)

    def full_like(self, part: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """Gathered from every rank's shard (a collective)."""
        return full_like(part, like)

    def settle(self, model: torch.nn.Module) -> None:
        """Free the layers FSDP2 gathered for a forward without backward."""

        reshard(model)

    @contextlib.contextmanager
    def whole(self, model: torch.nn.Module, dtype: torch.dtype) -> Iterator[torch.nn.Module]:
        """A whole copy in `dtype` on every rank, gathered one tensor at a time (a collective)."""

        with _released(full_copy(model, dtype)) as copy:
            yield copy


WHOLE = Whole()


def _recompute(model: torch.nn.Module, recompute: bool) -> None:
    if recompute:
        enable_activation_checkpointing(model)


@contextlib.contextmanager
def _released(copy: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """`copy`, its memory given back afterwards."""
    try:
        yield copy
    finally:
        del copy
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
