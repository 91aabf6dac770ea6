"""muP (pipeline/models/mup.py): the saved model computes what the trained one did, the base width
is standard parameterization, the learning rates per tensor, and the coordinate check (activations
flat across widths under muP, growing under standard parameterization; bench/bench_mup.py prints it)."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import Olmo2Config, Olmo2ForCausalLM

from pipeline.models.mup import attach, fold, init_weights, mup_of
from pipeline.train.config import TrainConfig
from pipeline.train.loop import make_optimizer

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.bench_mup import coordinate_check  # noqa: E402


def config(width: int, heads: int = 4) -> Olmo2Config:
    return Olmo2Config(
        vocab_size=64,
        hidden_size=width,
        num_hidden_layers=2,
        num_attention_heads=heads,
        intermediate_size=2 * width,
        max_position_embeddings=32,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )


def test_folding_keeps_the_function_and_the_base_width_is_standard():
    """Width 64 against base 32 with 4 heads each (head dim 16 vs 8: the attention scale is not the
    standard one): the logits of the trained form (hook, attention scale) equal the folded plain HF
    model's; at the base width every scaling is 1."""
    torch.manual_seed(0)
    model = Olmo2ForCausalLM(config(64))
    mup = mup_of(model.config, base_width=32, base_heads=4)
    assert mup.mult == 2 and mup.attention_scale == pytest.approx(8**0.5 / 16)
    init_weights(model, mup, 0.02, seed=0)
    assert float(model.model.layers[0].mlp.up_proj.weight.detach().std()) == pytest.approx(
        0.02 / 2**0.5, rel=0.05
    )
    assert float(model.lm_head.weight.detach().std()) == pytest.approx(0.02, rel=0.05)
    handle = attach(model, mup)
    ids = torch.arange(20).view(2, 10) % 64
    with torch.no_grad():
        trained = model(input_ids=ids).logits
        fold(model, mup, handle)
        folded = model(input_ids=ids).logits
    torch.testing.assert_close(folded, trained, rtol=1e-5, atol=1e-6)
    assert model.model.layers[0].self_attn.scaling == 16**-0.5  # a plain HF model again

    base = mup_of(config(32), 32, 4)
    assert base.mult == 1 and base.attention_scale == 8**-0.5


def test_hidden_matrices_learn_at_lr_over_the_width_multiplier():
    model = Olmo2ForCausalLM(config(64))
    opt = make_optimizer(model, TrainConfig(steps=10, lr=1e-2, mup_width_mult=4.0))
    by_lr: dict[float, set[int]] = {}
    for g in opt.param_groups:
        by_lr.setdefault(g["lr"], set()).update(id(p) for p in g["params"])
    assert set(by_lr) == {1e-2, 2.5e-3}
    assert id(model.model.layers[0].self_attn.q_proj.weight) in by_lr[2.5e-3]
    assert id(model.lm_head.weight) in by_lr[1e-2] and id(model.model.embed_tokens.weight) in by_lr[1e-2]
    standard = make_optimizer(model, TrainConfig(steps=10, lr=1e-2))
    assert [g["lr"] for g in standard.param_groups] == [1e-2, 1e-2]  # the groups as before muP existed


def test_coordinate_check_logits_stay_flat_under_mup_and_grow_under_standard():
    """Widths 32 ... 256 after 4 Adam steps at lr 0.01 on one batch: the logits' mean |x| at the widest
    over the narrowest."""
    torch.set_num_threads(1)
    tokens = np.random.default_rng(0).integers(0, 256, 8 * 65)
    widths = [32, 256]
    ratio = {}
    for param in ("standard", "mup"):
        check = coordinate_check(widths, param, tokens, steps=4, lr=1e-2, vocab=256)
        ratio[param] = check[256][-1]["logits"] / check[32][-1]["logits"]
    assert 0.5 < ratio["mup"] < 2.0 < 3.0 < ratio["standard"], json.dumps(ratio)  # here: 0.74 and 3.59


def test_a_mup_pretraining_run_saves_a_plain_checkpoint_with_mup_init_stds(
    tokenizer, tokenizer_dir, moby_docs, tmp_path
):
    """olmo-30m (width 384) under muP against olmo-15m (192): a few steps; the checkpoint loads as a
    plain HF model; init_std.json holds the muP stds as saved (hidden σ/√2, output layer σ/2 once the
    multiplier is folded in), which the Gaussian perturbation scales by; a preset without a base stops."""
    from pipeline.data.tokenizer import token_stream
    from pipeline.train.config import PretrainConfig
    from pipeline.train.pretrain import pretrain_run
    from pipeline.train.pretrain_job import PretrainJob

    torch.set_num_threads(1)
    tokens = tmp_path / "train.npy"
    np.save(tokens, token_stream(tokenizer, [d.text for d in moby_docs[:20]]))
    hp = dict(seq_len=32, batch_size=4, lr=3e-4, betas=[0.9, 0.95], weight_decay=0.1, warmup_fraction=0.1)
    cfg = PretrainConfig(**hp, parameterization="mup")
    common = dict(train_tokens=tokens, tokenizer_path=tokenizer_dir, budget=3 * 4 * 32, seed=0, cfg=cfg)
    summary = pretrain_run(
        PretrainJob(preset="olmo-30m", out=tmp_path / "out", state_path=tmp_path / "s", **common)
    )
    assert summary["parameterization"] == "mup" and summary["hyperparameters"]["mup_width_mult"] == 2.0
    stds = json.loads((tmp_path / "out" / "init_std.json").read_text())
    assert stds["lm_head.weight"] == pytest.approx(0.01, rel=0.02)
    assert stds["model.layers.0.self_attn.q_proj.weight"] == pytest.approx(0.02 / 2**0.5, rel=0.02)
    assert stds["model.embed_tokens.weight"] == pytest.approx(0.02, rel=0.02)
    saved = Olmo2ForCausalLM.from_pretrained(tmp_path / "out")
    assert all(a.self_attn.scaling == 64**-0.5 for a in saved.model.layers)
    with pytest.raises(
        ValueError, match="pretrain.parameterization: mup needs a base width, and preset 'tiny' has none"
    ):
        pretrain_run(PretrainJob(preset="tiny", out=tmp_path / "tiny", state_path=tmp_path / "t", **common))
