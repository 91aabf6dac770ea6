"""Checkpoint sources and corpus sources other than the defaults, on local data in the real formats."""

import json

import pandas as pd
import pytest
import torch

from pipeline.data.corpus import brown_to_text, load_hf, split_of
from pipeline.models.checkpoints import CheckpointSpec, hub_checkpoints, study_checkpoints
from pipeline.models.loading import load_checkpoint
from pipeline.sweeps.cells import Grid
from pipeline.sweeps.perturb_grid import perturbation_grid


def test_local_checkpoint_without_recorded_init_uses_config_init(tiny_model, tokenizer, tmp_path, moby_docs):
    """A save_pretrained directory (as downloaded models are) loads; init std comes from its config."""
    ckpt = tmp_path / "ckpt"
    tiny_model.save_pretrained(ckpt)
    tokenizer.save_pretrained(ckpt)
    spec = CheckpointSpec("mine", "local", "olmo2", 1000, path=str(ckpt))
    model, tok, stds, source = load_checkpoint(spec, None)
    assert source == "config"
    assert stds["lm_head.weight"] == pytest.approx(0.02) and stds["model.norm.weight"] == 0.0
    for (n, a), (_, b) in zip(model.named_parameters(), tiny_model.named_parameters()):
        assert torch.equal(a, b), n

    corpus = tmp_path / "corpus.parquet"
    pd.DataFrame(
        {
            "doc_id": ["a", "b"],
            "split": ["validation"] * 2,
            "text": [moby_docs[5].text[:1500], moby_docs[6].text[:1500]],
        }
    ).to_parquet(corpus)
    rows = perturbation_grid(
        Grid(spec, str(ckpt), [2.0], [0], "t", tmp_path / "cells"),
        corpus,
        {"split": "validation", "batch_size": 8, "max_tokens": None, "seq_len": 64},
    )
    df = pd.DataFrame(rows)
    assert set(df["modification"]) == {"none", "gaussian"}
    assert json.loads(df["extra"].iloc[0])["init_std_source"] == "config"
    ppl = df[df["metric"] == "ppl"].set_index("modification")["value"]
    assert ppl["gaussian"] != ppl["none"]


def test_missing_local_directory_is_a_clear_error(tmp_path):
    spec = CheckpointSpec("gone", "local", "x", 10, path=str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="not a model directory"):
        load_checkpoint(spec, None)


def test_checkpoint_sources_from_config():
    cfg = {
        "study": "s",
        "checkpoints": {"source": "sweep"},
        "pretrain": {"presets": ["tiny"], "budgets": [10, 20], "seeds": [0, 3]},
    }
    specs = study_checkpoints(cfg)
    assert [s.name for s in specs] == ["tiny-10-s0", "tiny-20-s0", "tiny-10-s3", "tiny-20-s3"]
    assert [s.pretrain_seed for s in specs] == [0, 0, 3, 3]
    assert specs[-1].path == "results/s/pretrain/tiny/seed3/20"
    assert specs[-1].row_fields("s")["pretrain_seed"] == 3  # every row of the run carries its seed
    hub = hub_checkpoints(
        "allenai/OLMo-1B-hf", [{"revision": "step10000-tokens41B", "tokens": 41_000_000_000}]
    )
    assert (
        hub[0].name == "allenai--OLMo-1B-hf--step10000-tokens41B" and hub[0].revision == "step10000-tokens41B"
    )
    with pytest.raises(ValueError, match="positive token count"):
        CheckpointSpec("x", "hub", "m", 0)


def test_hf_corpus_path_reads_a_local_dataset_in_c4_format(tmp_path, moby_docs):
    import datasets

    rows = {
        "text": [d.text for d in moby_docs[:5]],
        "timestamp": ["2019-04-25T12:57:54Z"] * 5,
        "url": [f"https://example.org/{i}" for i in range(5)],
    }
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "c4-en-validation"))
    docs = load_hf(str(tmp_path / "c4-en-validation"), "en", "validation", "text", max_documents=3)
    assert [d.text for d in docs] == rows["text"][:3]
    with pytest.raises(ValueError, match="no column 'content'"):
        load_hf(str(tmp_path / "c4-en-validation"), "en", "validation", "content", None)


def test_document_split_is_deterministic_and_stable():
    fractions = {"validation": 0.1, "test": 0.1}
    ids = [f"doc{i}" for i in range(2000)]
    splits = [split_of(i, fractions) for i in ids]
    assert splits == [split_of(i, fractions) for i in ids]
    share = pd.Series(splits).value_counts(normalize=True)
    assert share["validation"] == pytest.approx(0.1, abs=0.03) and share["test"] == pytest.approx(
        0.1, abs=0.03
    )


def test_brown_tags_are_stripped():
    tagged = (
        "\n\n\tThe/at jury/nn said/vbd ``/`` no/at evidence/nn ''/'' ,/, Friday/nr ./."
        "\n\n\tIt/pps ended/vbd ./."
    )
    assert brown_to_text(tagged) == 'The jury said "no evidence", Friday.\n\nIt ended.'
