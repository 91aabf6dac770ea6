"""The text tasks, one class per kind of task table (pipeline/data/encode.py): language modelling
(packed chunks, rolling-window perplexity), classification (prompt + verbalized label, the paper's
class perplexity and accuracy) and chat (whole conversations, the loss on the assistant's tokens)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipeline.data.chat import ChatSampler, encode_chats
from pipeline.data.encode import ExampleSampler, encode_classification, lm_sampler, read_task, split_of_task
from pipeline.data.heldout import lm_eval_set
from pipeline.evaluate.tasks import eval_task
from pipeline.tasks.base import BatchFn, FinetuneTask

if TYPE_CHECKING:
    import torch

    from pipeline.data.task_items import Task
    from pipeline.tasks.base import Settings


@dataclass(frozen=True)
class TextTaskSpec:
    """A text task in a job's record: its table (rule task_data) and where its tokens are shared."""

    name: str
    table: str
    token_cache: str | None = None  # an LM task's tokenized training split, shared by the study's jobs
    kind: str = "text"

    @classmethod
    def record(cls, params: dict, config: dict) -> TextTaskSpec:
        """The record from a job's params (a text task executes as its params say)."""
        return cls(**params)

    def open(self) -> TextTask:
        """The task of the table's kind (TEXT_KINDS), its splits read."""
        task = read_task(self.name, self.table)
        if task.kind not in TEXT_KINDS:
            raise ValueError(
                f"task {self.name!r}: kind {task.kind!r} of {self.table} is not one of {sorted(TEXT_KINDS)}"
            )
        return TEXT_KINDS[task.kind](task, self.token_cache)


class TextTask(FinetuneTask):
    """What the three text kinds share: a task table's splits, evaluated by `eval_task`."""

    def __init__(self, task: Task, token_cache: str | None = None):
        self.task, self.name, self.token_cache = task, task.name, token_cache

    def split(self, name: str) -> list:
        return split_of_task(self.task, name)

    def evaluate(self, model: torch.nn.Module, data: Any, tokenizer: Any, cfg: Settings) -> dict[str, float]:
        return eval_task(model, data, tokenizer.pad_token_id, cfg.eval_batch_size)

    def _enough(self, n: int, rows: int) -> None:
        if n < rows:
            raise ValueError(
                f"finetune.batch_size {rows} (task rows per batch) is larger than task {self.name!r}'s "
                f"training split ({n} items)"
            )


class LMTask(TextTask):
    """Language modelling: packed training chunks, rolling-window perplexity (and bits per byte)."""

    metrics = ("ppl", "loss", "bpb")
    packed = True

    def train_batches(self, tokenizer: Any, max_len: int, rows: int, seed: int) -> tuple[BatchFn, int]:
        sampler, per_epoch = lm_sampler(tokenizer, self.split("train"), max_len, rows, seed, self.token_cache)
        return sampler.batch, per_epoch

    def eval_data(self, tokenizer: Any, max_len: int, cfg: Settings) -> dict[str, Any]:
        return {
            s: lm_eval_set(tokenizer, self.split(s), max_len, cfg.eval_max_tokens)
            for s in ("validation", "test")
        }

    def gap_data(self, evals: dict[str, Any]) -> dict[str, Any]:
        return {"validation": evals["validation"]}


class ClassificationTask(TextTask):
    """Prompt + verbalized label, the loss on the label's tokens; class perplexity and accuracy."""

    metrics = ("ppl", "loss", "accuracy")

    def train_batches(self, tokenizer: Any, max_len: int, rows: int, seed: int) -> tuple[BatchFn, int]:
        enc = encode_classification(tokenizer, self.split("train"), max_len)
        self._enough(len(enc.prompts), rows)
        sampler = ExampleSampler(enc, rows, seed, tokenizer.pad_token_id)
        return sampler.batch, sampler.steps_per_epoch

    def eval_data(self, tokenizer: Any, max_len: int, cfg: Settings) -> dict[str, Any]:
        return {s: encode_classification(tokenizer, self.split(s), max_len) for s in ("validation", "test")}


class ChatTask(TextTask):
    """Whole conversations, the loss on the assistant's tokens; their perplexity held out."""

    metrics = ("ppl", "loss")

    def train_batches(self, tokenizer: Any, max_len: int, rows: int, seed: int) -> tuple[BatchFn, int]:
        enc = encode_chats(tokenizer, self.split("train"), max_len, name=f"{self.name}/train")
        self._enough(len(enc), rows)
        sampler = ChatSampler(enc, rows, seed, tokenizer.pad_token_id)
        return sampler.batch, sampler.steps_per_epoch

    def eval_data(self, tokenizer: Any, max_len: int, cfg: Settings) -> dict[str, Any]:
        return {
            s: encode_chats(tokenizer, self.split(s), max_len, cfg.eval_max_tokens, f"{self.name}/{s}")
            for s in ("validation", "test")
        }


TEXT_KINDS: dict[str, type[TextTask]] = {"lm": LMTask, "classification": ClassificationTask, "chat": ChatTask}
