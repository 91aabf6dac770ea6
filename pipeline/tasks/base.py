"""What a fine-tuning job needs from its task, whatever the task is: the one interface the training
code (pipeline/train/) calls. A task loads and batches its data, prepares the checkpoint it is
trained from, computes its in-domain metrics and any rows of its own; its record in the job
(`TaskSpec`) says what it is made of. Implementations: pipeline/tasks/text.py (language modelling,
classification, chat) and pipeline/tasks/llava.py (LLaVA's stage 2); pipeline/tasks/registry.py
names them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from pipeline.ranks import Ranks

BatchFn = Callable[[int], dict]


class Settings(Protocol):
    """What a task reads of its run's settings (pipeline/train/config.py FinetuneConfig has them)."""

    seq_len: int | None  # tokens of a training sequence (None: the model's context)
    eval_batch_size: int
    eval_max_tokens: int | None  # held-out documents (conversations) up to this many tokens


class FinetuneTask(ABC):
    """One fine-tuning task as a job trains and evaluates it."""

    name: str
    metrics: tuple[str, ...]  # the in-domain metrics `evaluate` returns, as row names
    replays: bool = True  # its batches take replayed pre-training rows (finetune.replay_fraction)
    packed: bool = False  # its batches are packed text: tokens trained = steps x batch x max_len

    def build(self, model: torch.nn.Module, tokenizer: Any) -> torch.nn.Module:
        """The loader's hook, on every rank before sharding: the model this task trains, from the
        checkpoint's model and the job's tokenizer (LLaVA: the tokenizer gains its image token, the
        model its embedding row, tower and projector)."""
        return model

    def max_len(self, model: torch.nn.Module, cfg: Settings) -> int:
        """Tokens of a training sequence: finetune.seq_len, capped by the model's context."""
        ctx = context(model)
        return min(cfg.seq_len or ctx, ctx)

    @abstractmethod
    def train_batches(self, tokenizer: Any, max_len: int, rows: int, seed: int) -> tuple[BatchFn, int]:
        """(batch_fn, steps per epoch) of `rows` rows of the training split per step."""

    @abstractmethod
    def eval_data(self, tokenizer: Any, max_len: int, cfg: Settings) -> dict[str, Any]:
        """The held-out splits' data, by split (validation first)."""

    @abstractmethod
    def evaluate(self, model: torch.nn.Module, data: Any, tokenizer: Any, cfg: Settings) -> dict[str, float]:
        """The in-domain metrics (`metrics`) of `model` on one split's data."""

    def gap_data(self, evals: dict[str, Any]) -> dict[str, Any]:
        """Held-out windows of the task for the linearization gap, by split (none by default)."""
        return {}

    def model_rows(self, model: torch.nn.Module, tokenizer: Any, common: dict, ranks: Ranks) -> list[dict]:
        """Rows of the fine-tuned model that only this task computes (LLaVA: its benchmarks)."""
        return []

    def language_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """The causal LM the out-of-domain evaluations read (LLaVA: the one inside)."""
        return model


def context(model: torch.nn.Module) -> int:
    """The model's context (a multimodal model's: its language model's)."""
    return getattr(model.config, "text_config", model.config).max_position_embeddings
