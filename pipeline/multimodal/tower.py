"""The vision tower of the LLaVA setting: a CLIP vision encoder, frozen in both stages.

- `hub`: a pre-trained CLIP vision encoder by model id and revision (LLaVA-1.5's is
  openai/clip-vit-large-patch14-336), read from the hub cache (offline: only from it).
- `toy`: a tiny CLIP trained contrastively by the pipeline on the toy corpus's training (image,
  caption) pairs (Radford et al., 2021: the symmetric InfoNCE loss of transformers' `CLIPModel`),
  its vision half kept. This keeps LLaVA's structure offline: an encoder pre-trained apart from the
  language model, frozen, and a new projector between the two.

A tower directory holds a `CLIPVisionModel` (`save_pretrained`) and `preprocess.json`, what
`Preprocess` needs: LLaVA-1.5's `image_aspect_ratio: pad` (the image padded to a square with the
mean colour, llava/mm_utils.py `expand2square`), then CLIP's resize, rescale and normalise.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from pipeline.data.tokenizer import load_tokenizer
from pipeline.io import atomic_path
from pipeline.multimodal.config import VlmConfig
from pipeline.multimodal.images import load_image, mean_fill, pad_to_square
from pipeline.multimodal.vlm_data import read_vlm_data

if TYPE_CHECKING:
    from PIL import Image

    from pipeline.multimodal.config import TowerConfig

log = logging.getLogger(__name__)
PREPROCESS = "preprocess.json"
CLIP_MEAN = (
    0.48145466,
    0.4578275,
    0.40821073,
)  # OpenAI CLIP's image statistics (transformers' OPENAI_CLIP_*)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass(frozen=True)
class Preprocess:
    """Pixels a CLIP tower reads: pad to a square with the mean colour, resize (bicubic) to `size`,
    scale to [0, 1], normalise by `mean` and `std` per channel. Equal to transformers'
    `CLIPImageProcessor` on a square image (tests/multimodal/test_tower.py)."""

    size: int
    mean: tuple[float, float, float] = CLIP_MEAN
    std: tuple[float, float, float] = CLIP_STD

    def __call__(self, images: Sequence[Image.Image]) -> torch.Tensor:
        """(n, 3, size, size) float32 pixel values."""
        from PIL import Image as PILImage

        fill = mean_fill(self.mean)
        out = np.empty((len(images), 3, self.size, self.size), dtype=np.float32)
        mean, std = np.asarray(self.mean, np.float32), np.asarray(self.std, np.float32)
        for i, img in enumerate(images):
            square = pad_to_square(img.convert("RGB"), fill)
            if square.size != (self.size, self.size):
                square = square.resize((self.size, self.size), PILImage.Resampling.BICUBIC)
            pixels = np.asarray(square, dtype=np.float32) / 255.0
            out[i] = ((pixels - mean) / std).transpose(2, 0, 1)
        return torch.from_numpy(out)

    def save(self, directory: str | Path) -> None:
        with atomic_path(Path(directory) / PREPROCESS) as tmp:
            tmp.write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, directory: str | Path) -> Preprocess:
        d = json.loads((Path(directory) / PREPROCESS).read_text())
        return cls(d["size"], tuple(d["mean"]), tuple(d["std"]))


def patch_tokens(config) -> int:
    """Image tokens a CLIP vision config gives LLaVA: (image_size / patch_size)² (the CLS dropped)."""
    return (config.image_size // config.patch_size) ** 2


def load_tower(directory: str | Path, device: str | torch.device = "cpu"):
    """(CLIPVisionModel in float32, eval mode, frozen; its Preprocess) from a tower directory."""
    from transformers import CLIPVisionModel

    tower = CLIPVisionModel.from_pretrained(str(directory), dtype=torch.float32).to(device).eval()
    tower.requires_grad_(False)
    return tower, Preprocess.load(directory)


def hub_tower(cfg: TowerConfig, out_dir: str | Path) -> dict:
    """Save a hub CLIP vision tower (cfg.model_id at cfg.revision, from cfg.cache_dir; offline: the
    cache only) into `out_dir` as a tower directory; its record. An absent model is an error naming
    the key and the cache."""
    from transformers import CLIPVisionModel

    try:
        tower = CLIPVisionModel.from_pretrained(
            cfg.model_id,
            revision=cfg.revision,
            cache_dir=cfg.cache_dir,
            local_files_only=cfg.offline,
            dtype=torch.float32,
        )
    except OSError as e:
        where = f"the hub cache {cfg.cache_dir or '(default)'}" + (" (offline)" if cfg.offline else "")
        raise FileNotFoundError(
            f"multimodal.tower.model_id: {cfg.model_id}@{cfg.revision} is not in {where}: download it "
            f"where the network allows (huggingface-cli download {cfg.model_id} --revision {cfg.revision}) "
            f"({type(e).__name__}: {e})"
        ) from None
    image_size = tower.config.image_size
    return _save(tower, Preprocess(image_size), out_dir, {"source": "hub", "model_id": cfg.model_id})


def _save(tower, preprocess: Preprocess, out_dir: str | Path, record: dict) -> dict:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tower.save_pretrained(out)
    preprocess.save(out)
    record = record | {"image_tokens": patch_tokens(tower.config), "parameters": tower.num_parameters()}
    with atomic_path(out / "tower.json") as tmp:
        tmp.write_text(json.dumps(record, indent=1))
    return record


def _width(cfg: TowerConfig) -> dict:
    """What the toy CLIP's vision and text encoders share: width, MLP, heads and projection."""
    return dict(
        hidden_size=cfg.hidden,
        intermediate_size=4 * cfg.hidden,
        num_attention_heads=cfg.heads,
        projection_dim=cfg.projection_dim,
    )


def toy_vision_config(cfg: TowerConfig, image_size: int):
    """The toy tower's CLIPVisionConfig: `image_size` / `cfg.patch_size` patches of width `cfg.hidden`."""
    from transformers import CLIPVisionConfig

    return CLIPVisionConfig(
        **_width(cfg), num_hidden_layers=cfg.layers, image_size=image_size, patch_size=cfg.patch_size
    )


def toy_clip(cfg: TowerConfig, image_size: int, vocab: int, eos: int, pad: int, context: int):
    """An untrained tiny CLIP (vision: `toy_vision_config`; text: the study's tokenizer, pooled at
    its EOS token)."""
    from transformers import CLIPConfig, CLIPModel, CLIPTextConfig

    vision = toy_vision_config(cfg, image_size)
    text = CLIPTextConfig(
        **_width(cfg),
        vocab_size=vocab,
        num_hidden_layers=cfg.text_layers,
        max_position_embeddings=context,
        eos_token_id=eos,
        pad_token_id=pad,
        bos_token_id=eos,
    )
    config = CLIPConfig(
        text_config=text.to_dict(), vision_config=vision.to_dict(), projection_dim=cfg.projection_dim
    )
    torch.manual_seed(cfg.seed)
    return CLIPModel(config)


def caption_batch(tokenizer, captions: Sequence[str], context: int) -> dict[str, torch.Tensor]:
    """Captions as CLIP text input: tokens then the EOS the text model pools at, right-padded."""
    ids = [
        t[: context - 1] + [tokenizer.eos_token_id]
        for t in tokenizer(list(captions), add_special_tokens=False)["input_ids"]
    ]
    width = max(map(len, ids))
    input_ids = torch.full((len(ids), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for r, t in enumerate(ids):
        input_ids[r, : len(t)], mask[r, : len(t)] = torch.tensor(t), 1
    return {"input_ids": input_ids, "attention_mask": mask}


def train_toy_tower(
    cfg: TowerConfig,
    images: Sequence[Image.Image],
    captions: Sequence[str],
    tokenizer,
    image_size: int,
    out_dir: str | Path,
) -> dict:
    """Train a tiny CLIP on (image, caption) pairs, keep its vision half as the tower in `out_dir`;
    its record, with the held-out retrieval accuracy (image → its caption among a batch, the last
    `cfg.heldout` pairs; chance 1 / batch) before and after training."""
    torch.manual_seed(cfg.seed)
    n_train = len(images) - cfg.heldout
    if n_train < cfg.batch_size:
        raise ValueError(
            f"multimodal.tower.toy.batch_size: {cfg.batch_size} is more than the {n_train} training pairs"
        )
    preprocess = Preprocess(image_size)
    pixels = preprocess(images)
    clip = toy_clip(
        cfg, image_size, len(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id, cfg.context
    )
    before = retrieval_accuracy(clip, pixels[n_train:], captions[n_train:], tokenizer, cfg)
    opt = torch.optim.AdamW(clip.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    warmup = max(1, int(cfg.warmup_fraction * cfg.steps))

    def lr_at(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, cfg.steps - warmup)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    order = torch.Generator().manual_seed(cfg.seed)
    t0, clip = time.perf_counter(), clip.train()
    for step in range(cfg.steps):
        idx = torch.randperm(n_train, generator=order)[: cfg.batch_size]
        text = caption_batch(tokenizer, [captions[i] for i in idx], cfg.context)
        loss = clip(**text, pixel_values=pixels[idx], return_loss=True).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(clip.parameters(), 1.0)
        opt.step()
        sched.step()
        if (step + 1) % max(1, cfg.steps // 10) == 0 or step + 1 == cfg.steps:
            rate = (step + 1) / (time.perf_counter() - t0)
            log.info(
                "tower: step %d/%d, contrastive loss %.4f (%.1f steps/s, ETA %.0f s)",
                step + 1,
                cfg.steps,
                float(loss.detach()),
                rate,
                (cfg.steps - step - 1) / rate,
            )
    after = retrieval_accuracy(clip.eval(), pixels[n_train:], captions[n_train:], tokenizer, cfg)
    chance = retrieval_chance(captions[n_train:], cfg.batch_size)
    log.info(
        "tower: held-out image -> caption retrieval top-1 %.3f before, %.3f after training (chance %.3f)",
        before,
        after,
        chance,
    )
    record = {"source": "toy", "retrieval_before": before, "retrieval_after": after, "steps": cfg.steps}
    record["retrieval_chance"] = chance
    return _save(_vision_half(clip), preprocess, out_dir, record)


def _vision_half(clip):
    """The CLIPVisionModel holding a CLIPModel's vision encoder (the same weights)."""
    from transformers import CLIPVisionModel

    tower = CLIPVisionModel(clip.config.vision_config)
    weights = {
        k.removeprefix("vision_model."): v
        for k, v in clip.state_dict().items()
        if k.startswith("vision_model.")
    }
    if not set(weights) <= set(tower.state_dict()):  # transformers versions whose tower wraps `vision_model`
        weights = {f"vision_model.{k}": v for k, v in weights.items()}
    tower.load_state_dict(weights)
    return tower.eval()


def retrieval_chance(captions: Sequence[str], batch_size: int) -> float:
    """The hit rate of a caption picked at random in each batch of `retrieval_accuracy` (captions
    repeat: a pick is right when its text is the image's own)."""
    hits = 0.0
    for s in range(0, len(captions), batch_size):
        batch = list(captions[s : s + batch_size])
        hits += sum(batch.count(c) / len(batch) for c in batch)
    return hits / max(1, len(captions))


@torch.no_grad()
def retrieval_accuracy(
    clip, pixels: torch.Tensor, captions: Sequence[str], tokenizer, cfg: TowerConfig
) -> float:
    """Top-1 image → caption retrieval within batches of `cfg.batch_size` held-out pairs (a hit: the
    retrieved caption's text is the image's own; captions repeat, e.g. "a handwritten digit 7")."""
    right = total = 0
    for s in range(0, len(captions), cfg.batch_size):
        batch = list(captions[s : s + cfg.batch_size])
        out = clip(
            **caption_batch(tokenizer, batch, cfg.context), pixel_values=pixels[s : s + cfg.batch_size]
        )
        picked = out.logits_per_image.argmax(-1).tolist()
        right += sum(batch[j] == batch[k] for j, k in enumerate(picked))
        total += len(batch)
    return right / max(1, total)


def toy_tower(
    cfg: TowerConfig, data_json: str | Path, tokenizer_path: str | Path, out_dir: str | Path
) -> dict:
    """Rule vlm_tower's toy job: the tiny CLIP trained on the study's stage-1 captions (training
    images only: the toy's splits keep evaluation images out of them), captions tokenized with
    `tokenizer_path` (a tokenizer.json or a checkpoint directory)."""

    data = read_vlm_data(data_json, "stage1", VlmConfig(), benchmarks=False)
    pairs = [r for r in data.records if r.image is not None]
    images = [load_image(r.image, data.images, f"record {r.id!r}") for r in pairs]
    captions = [next(text for role, text in r.turns if role == "assistant") for r in pairs]
    sizes = {im.size for im in images}
    if len(sizes) != 1:
        raise ValueError(
            f"the toy tower trains on square images of one size; the captions' images have {sizes}"
        )
    size = sizes.pop()[0]
    log.info("tower: a tiny CLIP on %d (image, caption) pairs of %dx%d images", len(pairs), size, size)
    return train_toy_tower(cfg, images, captions, load_tokenizer(tokenizer_path), size, out_dir)
