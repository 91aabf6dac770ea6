"""The offline multimodal toy's settings (`ToyDataConfig`) and the files its builder writes.

Light (no torch / numpy / pandas / PIL at import): the workflow reads it at parse time. The dataclass
owns the defaults and the cross-key checks; the config schema owns types and ranges
(docs/architecture.md, "One owner per config default"). What the toy is: docs/multimodal-data.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from pipeline.fields import NEITHER, meta

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
