"""One LLaVA stage as the training code sees a task: how the checkpoint becomes the model to train,
its batches, its held-out conversations, its benchmark rows, and the language model inside it.

- stage 1 (`plain` captions): the projector trains, the language model and the tower are frozen;
- stage 2 (`v1` instructions, a fine-tuning task): the projector and the language model train
  from the stage-1 projector, the tower stays frozen (LLaVA-1.5's defaults).

`build` is the loader's hook (pipeline/train/placement.py): it gives the job's tokenizer its `<image>`
token (pipeline/multimodal/llava.py, `prepare`) and builds the LLaVA model around the checkpoint's.
It runs on every rank of a sharded job before sharding: a rank that builds on the meta device builds
the tower and the projector there too, and receives rank 0's values.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from pipeline.multimodal.config import TEMPLATE_STAGE, VlmConfig
from pipeline.multimodal.conversation import V1_CHAT_TEMPLATE, encode_conversations
from pipeline.multimodal.llava import add_image_token, build_llava, language_model, resize_rows, save_hf
from pipeline.multimodal.tower import Preprocess, patch_tokens
from pipeline.multimodal.vlm_batches import ConversationSampler, evaluation_batches
from pipeline.multimodal.vlm_data import read_vlm_data, split_stage2
from pipeline.multimodal.vlm_eval import benchmark_rows, conversation_loss

if TYPE_CHECKING:
    from pipeline.multimodal.vlm_data import VlmData
    from pipeline.ranks import Ranks

log = logging.getLogger(__name__)
PROJECTOR = "model.multi_modal_projector."  # the projector's parameter names start so
TOWER = "model.vision_tower."


@dataclass
class VlmTask:
    """A LLaVA stage over a study's LLaVA data (module docstring)."""

    name: str  # the fine-tuning task's name (stage 2) or "llava_stage1"
    stage: str  # stage1 | stage2
    data: VlmData
    tower_dir: Path
    cfg: VlmConfig
    projector: Path | None = None  # stage 2: the stage-1 projector's weights
    projector_seed: int = 0  # stage 1: the new projector's initialisation
    kind: str = "vlm"
    image_token: int | None = field(default=None, init=False)
    rows: int | None = field(default=None, init=False)  # embedding rows of the LLaVA model
    vocab_rows: int | None = field(default=None, init=False)  # the checkpoint's own

    @classmethod
    def open(
        cls,
        name: str,
        stage: str,
        data_json: str | Path,
        tower_dir: str | Path,
        cfg: VlmConfig,
        projector: str | Path | None = None,
        projector_seed: int = 0,
        benchmarks: bool = True,
    ) -> VlmTask:
        data = read_vlm_data(data_json, stage, cfg, benchmarks)
        return cls(
            name, stage, data, Path(tower_dir), cfg, Path(projector) if projector else None, projector_seed
        )

    @cached_property
    def preprocess(self) -> Preprocess:
        return Preprocess.load(self.tower_dir)

    @cached_property
    def image_tokens(self) -> int:
        from transformers import CLIPVisionConfig

        return patch_tokens(CLIPVisionConfig.from_pretrained(self.tower_dir))

    def prepare(self, tokenizer, embedding_rows: int) -> None:
        """Give `tokenizer` the image token; fix the model's embedding rows (same on every call)."""
        token, rows = add_image_token(tokenizer, embedding_rows, self.cfg.resize_embeddings)
        if self.image_token is not None and (token, rows) != (self.image_token, self.rows):
            raise RuntimeError(
                f"the image token moved: {(token, rows)} after {(self.image_token, self.rows)}"
            )
        self.image_token, self.rows, self.vocab_rows = token, rows, embedding_rows

    def build(self, lm: torch.nn.Module, tokenizer) -> torch.nn.Module:
        """The LLaVA model around the causal LM `lm` (the checkpoint's, on any device, meta included),
        what this stage trains marked trainable; `tokenizer` (the job's) gains the image token first."""
        from transformers import CLIPVisionConfig, CLIPVisionModel

        embedding = lm.get_input_embeddings().weight
        self.prepare(tokenizer, embedding.shape[0])
        device = embedding.device
        resize_rows(lm, self.rows)
        if device.type == "meta":
            with torch.device("meta"):
                tower = CLIPVisionModel(CLIPVisionConfig.from_pretrained(self.tower_dir))
        else:
            tower = CLIPVisionModel.from_pretrained(str(self.tower_dir), dtype=torch.float32).to(device)
        llava = build_llava(lm, tower.eval(), self.image_token, self.projector_seed)
        if self.projector is not None and device.type != "meta":
            state = torch.load(self.projector, map_location=device, weights_only=True)
            missing = [k for k in state if not k.startswith(PROJECTOR)]
            if missing:
                raise ValueError(f"{self.projector}: not a projector's weights ({missing[:3]})")
            llava.load_state_dict(state, strict=False)
        for n, p in llava.named_parameters():
            p.requires_grad_(n.startswith(PROJECTOR) if self.stage == "stage1" else not n.startswith(TOWER))
        return llava

    def _encode(self, records, tokenizer, max_len: int):
        enc = encode_conversations(
            records, tokenizer, TEMPLATE_STAGE[self.stage], self.image_token, self.image_tokens, max_len
        )
        if enc.dropped or enc.truncated:
            log.info(
                "%s: %d conversations encoded, %d cut at %d tokens, dropped %s",
                self.stage,
                len(enc),
                enc.truncated,
                max_len,
                enc.dropped,
            )
        return enc

    def max_len(self, context: int) -> int:
        """Tokens of a training sequence: multimodal.max_length, capped by the model's context."""
        return min(self.cfg.max_length, context)

    def _records(self) -> tuple[list, list]:
        if self.stage == "stage1":
            return self.data.records, []
        return split_stage2(self.data.records)

    def train_batches(
        self, tokenizer, context: int, rows: int, seed: int
    ) -> tuple[Callable[[int], dict], int]:
        """(batch_fn, steps per epoch) of `rows` conversations per step."""
        train, _ = self._records()
        enc = self._encode(train, tokenizer, self.max_len(context))
        sampler = ConversationSampler(
            enc, self.data.images, self.preprocess, rows, seed, tokenizer.pad_token_id
        )
        return sampler.batch, sampler.steps_per_epoch

    def eval_data(self, tokenizer, context: int, batch_size: int) -> dict[str, Callable[[], Iterator[dict]]]:
        """{"validation": every held-out conversation's batch} (stage 2)."""
        _, held = self._records()
        enc = self._encode(held, tokenizer, self.max_len(context))
        sampler = ConversationSampler(enc, self.data.images, self.preprocess, 1, 0, tokenizer.pad_token_id)
        return {"validation": evaluation_batches(sampler, batch_size)}

    @staticmethod
    def validation(model: torch.nn.Module, batches: Callable[[], Iterator[dict]]) -> dict[str, float]:
        return conversation_loss(model, batches)

    def benchmark_rows(self, model, tokenizer, common: dict, ranks: Ranks) -> list[dict]:
        """The five benchmarks' rows and the VLM score's."""
        rows, _ = benchmark_rows(
            model,
            tokenizer,
            self.data.eval_sets,
            self.preprocess,
            self.image_token,
            self.image_tokens,
            self.cfg.eval_max_new_tokens,
            self.cfg.eval_batch_size,
            common,
            ranks,
        )
        return rows

    def save_hf(self, llava: torch.nn.Module, tokenizer, out_dir: str | Path) -> None:
        """The LLaVA model in transformers' format with its tokenizer, image processor and v1 template."""
        save_hf(llava, tokenizer, self.preprocess, out_dir, V1_CHAT_TEMPLATE)

    def language_model(self, llava: torch.nn.Module) -> torch.nn.Module:
        """The causal LM inside (its own rows only): what the out-of-domain evaluations read."""
        return language_model(llava, self.vocab_rows)
