"""LLaVA's stage 2 as a fine-tuning task (pipeline/multimodal/vlm_task.py holds the stage itself): the
checkpoint becomes a LLaVA model around a frozen tower and the stage-1 projector, it trains on
conversations, its held-out conversations are its in-domain metrics, and after training it answers
the five VLM benchmarks before the language model inside it is handed to the out-of-domain
evaluations."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipeline.fields import NEITHER, names
from pipeline.multimodal.config import VlmConfig
from pipeline.multimodal.vlm_task import VlmTask
from pipeline.tasks.base import BatchFn, FinetuneTask, context

if TYPE_CHECKING:
    import torch

    from pipeline.ranks import Ranks
    from pipeline.tasks.base import Settings


@dataclass(frozen=True)
class LlavaTaskSpec:
    """A LLaVA task in a job's record: its data (rule vlm_data), tower, stage-1 projector, settings,
    and where the trained model is saved in transformers' format (None: not saved)."""

    name: str
    data: str
    tower: str
    projector: str
    config: VlmConfig
    hf_dir: str | None = None
    kind: str = "llava"

    @classmethod
    def record(cls, params: dict, config: dict) -> LlavaTaskSpec:
        """The record from a job's params (what changes numbers, and where a saved model goes) and
        the study's `multimodal:` section (how it executes: changing that reruns nothing)."""
        section = config.get("multimodal") or {}
        execution = {k: section[k] for k in names(VlmConfig, NEITHER) if k in section}
        settings = VlmConfig(**params["config"], **execution)
        hf_dir = params["hf_dir"] if settings.save_hf else None
        return cls(**{**params, "config": settings, "hf_dir": hf_dir})

    def open(self) -> LlavaTask:
        return LlavaTask(self)


class LlavaTask(FinetuneTask):
    """Stage 2 on a checkpoint (module docstring)."""

    metrics = ("ppl", "loss", "loss_other_image")  # held-out conversations; benchmarks: `model_rows`
    replays = False  # a conversation batch carries images: pre-training text rows do not fit it

    def __init__(self, spec: LlavaTaskSpec):
        self.name, self.hf_dir = spec.name, spec.hf_dir
        self.stage = VlmTask.open(
            spec.name, "stage2", spec.data, spec.tower, spec.config, projector=spec.projector
        )

    def build(self, model: torch.nn.Module, tokenizer: Any) -> torch.nn.Module:
        return self.stage.build(model, tokenizer)

    def max_len(self, model: torch.nn.Module, cfg: Settings) -> int:
        return self.stage.max_len(context(model))  # multimodal.max_length, not finetune.seq_len

    def train_batches(self, tokenizer: Any, max_len: int, rows: int, seed: int) -> tuple[BatchFn, int]:
        return self.stage.train_batches(tokenizer, max_len, rows, seed)

    def eval_data(self, tokenizer: Any, max_len: int, cfg: Settings) -> dict[str, Any]:
        return self.stage.eval_data(tokenizer, max_len, cfg.eval_batch_size)

    def evaluate(self, model: torch.nn.Module, data: Any, tokenizer: Any, cfg: Settings) -> dict[str, float]:
        return self.stage.validation(model, data)

    def model_rows(self, model: torch.nn.Module, tokenizer: Any, common: dict, ranks: Ranks) -> list[dict]:
        rows = self.stage.benchmark_rows(model, tokenizer, common, ranks)
        if self.hf_dir and ranks.main:
            self.stage.save_hf(model, tokenizer, self.hf_dir)
        return rows

    def language_model(self, model: torch.nn.Module) -> torch.nn.Module:
        return self.stage.language_model(model)
