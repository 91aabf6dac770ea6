"""LLaVA around a causal LM (pipeline/multimodal/llava.py): with no image its logits are the causal
LM's, and the LM taken back out is the causal LM (OLMo tied, OLMo-2, Llama; with and without an
added image-token row); a stage-1 step moves the projector only; the projector a stage-1 job saves
loads bit for bit; the image token's expansion and the label mask; the saved model reloads."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from transformers import (
    CLIPVisionModel,
    LlamaConfig,
    LlamaForCausalLM,
    LlavaForConditionalGeneration,
    Olmo2Config,
    Olmo2ForCausalLM,
    OlmoConfig,
    OlmoForCausalLM,
)

from pipeline.data.batches import IGNORE_INDEX
from pipeline.multimodal.config import TowerConfig
from pipeline.multimodal.conversation import SYSTEM_V1, encode_conversations
from pipeline.multimodal.llava import (
    IMAGE_TOKEN,
    VocabularyError,
    add_image_token,
    build_llava,
    language_model,
    resize_rows,
    save_hf,
)
from pipeline.multimodal.llava_json import LlavaRecord
from pipeline.multimodal.tower import Preprocess, patch_tokens, toy_vision_config
from pipeline.train.config import TrainConfig
from pipeline.train.loop import train

SMALL = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)


def causal_lm(kind: str, vocab: int, tied: bool) -> torch.nn.Module:
    torch.manual_seed(0)
    cls, cfg = {
        "olmo": (OlmoForCausalLM, OlmoConfig),
        "olmo2": (Olmo2ForCausalLM, Olmo2Config),
        "llama": (LlamaForCausalLM, LlamaConfig),
    }[kind]
    ids = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
    model = cls(cfg(vocab_size=vocab, max_position_embeddings=64, tie_word_embeddings=tied, **SMALL, **ids))
    return model.eval()


def tiny_tower() -> CLIPVisionModel:
    torch.manual_seed(1)
    cfg = TowerConfig(hidden=16, layers=3, heads=2, patch_size=8, projection_dim=16)
    return CLIPVisionModel(toy_vision_config(cfg, image_size=16)).eval()


@pytest.mark.parametrize(
    "kind, tied, rows",
    [("olmo", True, 0), ("olmo2", False, 0), ("llama", False, 1), ("olmo", True, 1)],
    ids=["olmo-tied", "olmo2", "llama-new-row", "olmo-tied-new-row"],
)
def test_no_image_gives_the_causal_lm_and_the_lm_comes_back(kind, tied, rows):
    vocab = 100
    lm = causal_lm(kind, vocab, tied)
    reference = copy.deepcopy(lm)
    ids = torch.randint(3, vocab, (2, 12), generator=torch.Generator().manual_seed(2))
    want = reference(input_ids=ids).logits
    resize_rows(lm, vocab + rows)  # an added image-token row (Amber, the toy's BPE)
    llava = build_llava(lm, tiny_tower(), image_token=vocab + rows - 1, projector_seed=0)
    got = llava(input_ids=ids).logits
    assert torch.equal(got[..., :vocab], want)  # the added row only adds a logit
    back = language_model(llava, vocab_rows=vocab)
    assert type(back) is type(reference)
    assert torch.equal(back(input_ids=ids).logits, want)
    for (n, p), (m, q) in zip(back.named_parameters(), reference.named_parameters(), strict=True):
        assert n == m and torch.equal(p, q), n
    if tied:
        assert back.get_output_embeddings().weight is back.get_input_embeddings().weight


def test_the_image_token_takes_a_spare_row_or_needs_resizing(tokenizer):
    tok = copy.deepcopy(tokenizer)
    n = len(tok)
    assert add_image_token(copy.deepcopy(tok), n + 24, resize=False) == (n, n + 24)  # OLMo: spare rows
    assert add_image_token(copy.deepcopy(tok), n, resize=True) == (n, n + 1)  # Amber: one new row
    with pytest.raises(VocabularyError, match="multimodal.resize_embeddings: .* fill the model's"):
        add_image_token(copy.deepcopy(tok), n, resize=False)
    token, _ = add_image_token(tok, n, resize=True)
    assert tok(f"a {IMAGE_TOKEN} b", add_special_tokens=False)["input_ids"].count(token) == 1  # never split


def test_image_tokens_expand_and_only_replies_are_scored(tokenizer):
    tok = copy.deepcopy(tokenizer)
    token, _ = add_image_token(tok, len(tok), resize=True)
    record = LlavaRecord(
        "r1",
        "img",
        (
            ("user", f"{IMAGE_TOKEN}\nWhat is it?"),
            ("assistant", "a cat"),
            ("user", "And?"),
            ("assistant", "no"),
        ),
    )
    enc = encode_conversations([record], tok, "v1", token, image_tokens=4, max_len=200)
    ids, scored = enc.ids[0].tolist(), enc.scored[0].tolist()
    assert ids.count(token) == 4 and ids[ids.index(token) : ids.index(token) + 4] == [token] * 4
    replies = [tok.decode([t for t, s in zip(ids, scored) if s])]
    assert replies == [f" a cat{tok.eos_token} no{tok.eos_token}"]
    assert tok.decode(ids[1 : ids.index(token)]).startswith(SYSTEM_V1 + " USER: ")
    plain = encode_conversations(
        [LlavaRecord("c", "img", (("user", f"{IMAGE_TOKEN}\nDescribe."), ("assistant", "a dog")))],
        tok,
        "plain",
        token,
        4,
        200,
    )
    p_ids, p_scored = plain.ids[0].tolist(), plain.scored[0].tolist()
    assert p_ids[1:5] == [token] * 4 and tok.decode([t for t, s in zip(p_ids, p_scored) if s]) == "a dog\n"
    cut = encode_conversations([record], tok, "v1", token, image_tokens=4, max_len=5)  # the image cut
    assert len(cut) == 0 and cut.dropped == {"image cut by max_length": 1}
    with pytest.raises(ValueError, match="conversation 'bad': 0 image tokens, expected 4"):
        encode_conversations(
            [LlavaRecord("bad", "img", (("user", "no placeholder"), ("assistant", "x")))],
            tok,
            "v1",
            token,
            4,
            200,
        )


def _batch(llava, token: int) -> dict:
    n = patch_tokens(llava.config.vision_config)
    ids = torch.tensor([[1] + [token] * n + list(range(10, 20))] * 2)
    labels = ids.roll(-1, 1)
    labels[:, : n + 1] = IGNORE_INDEX
    pixels = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(3))
    return {"input_ids": ids, "labels": labels, "pixel_values": pixels}


def test_a_stage_one_step_moves_the_projector_only_and_it_reloads_bit_for_bit(tmp_path):
    lm = causal_lm("olmo2", 100, tied=False)
    resize_rows(lm, 101)
    llava = build_llava(lm, tiny_tower(), 100, projector_seed=0)
    for n, p in llava.named_parameters():
        p.requires_grad_(n.startswith("model.multi_modal_projector"))
    before = {n: p.detach().clone() for n, p in llava.named_parameters()}
    batch = _batch(llava, 100)
    cfg = TrainConfig(steps=2, lr=1e-2, weight_decay=0.0, log_every=10**6, checkpoint_every=10**6)
    train(llava, lambda step: batch, cfg)
    moved = {n for n, p in llava.named_parameters() if not torch.equal(p, before[n])}
    assert moved == {n for n in before if n.startswith("model.multi_modal_projector")}
    state = {k: v for k, v in llava.state_dict().items() if k.startswith("model.multi_modal_projector.")}
    torch.save(state, tmp_path / "projector.pt")
    again = build_llava(causal_lm("olmo2", 100, tied=False), tiny_tower(), 100, projector_seed=5)
    again.load_state_dict(torch.load(tmp_path / "projector.pt"), strict=False)
    for k, v in state.items():
        assert torch.equal(again.state_dict()[k], v)


def test_the_saved_model_reloads_with_equal_logits(tmp_path, tokenizer):
    tok = copy.deepcopy(tokenizer)
    lm = causal_lm("olmo2", len(tok), tied=False)
    token, rows = add_image_token(tok, len(tok), resize=True)
    resize_rows(lm, rows)
    llava = build_llava(lm, tiny_tower(), token, projector_seed=0)
    save_hf(llava, tok, Preprocess(16), tmp_path / "hf", template="{{ messages }}")
    loaded = LlavaForConditionalGeneration.from_pretrained(tmp_path / "hf").eval()
    batch = _batch(llava, token)
    with torch.no_grad():
        want = llava(input_ids=batch["input_ids"], pixel_values=batch["pixel_values"]).logits
        got = loaded(input_ids=batch["input_ids"], pixel_values=batch["pixel_values"]).logits
    assert torch.equal(got, want)


def test_the_other_image_loss_reads_the_image_and_leaves_text_alone():
    """conversation_loss's `loss_other_image`: each conversation shown its neighbour's image. Equal
    images or a text-only batch leave it equal to `loss`; different images move it."""
    from pipeline.multimodal.vlm_eval import conversation_loss

    lm = causal_lm("olmo2", 100, tied=False)
    resize_rows(lm, 101)
    llava = build_llava(lm, tiny_tower(), 100, projector_seed=0)
    batch = _batch(llava, 100)
    batch["input_ids"][1, -10:] += 20  # another conversation: swapping the two images now matters
    unscored = batch["labels"] == IGNORE_INDEX
    batch["labels"] = batch["input_ids"].roll(-1, 1).masked_fill(unscored, IGNORE_INDEX)
    same = {**batch, "pixel_values": batch["pixel_values"][:1].expand(2, -1, -1, -1)}
    text = {"input_ids": batch["input_ids"][:, -8:], "labels": batch["labels"][:, -8:]}
    out = conversation_loss(llava, lambda: iter([batch]))
    assert abs(out["loss_other_image"] - out["loss"]) > 1e-3
    with torch.no_grad():  # the fused head's scored positions give the model's own logits' loss
        logits = llava(input_ids=batch["input_ids"], pixel_values=batch["pixel_values"]).logits
    want = F.cross_entropy(
        logits.reshape(-1, logits.size(-1)), batch["labels"].reshape(-1), ignore_index=IGNORE_INDEX
    )
    assert out["loss"] == pytest.approx(float(want), rel=1e-5)
    for b in (same, text):
        out = conversation_loss(llava, lambda b=b: iter([b]))
        assert out["loss_other_image"] == pytest.approx(out["loss"], rel=1e-6)


def test_a_multimodal_batch_trains_through_the_fused_head_with_the_models_own_loss_and_gradients():
    """The training loop's fused head on a LLaVA batch: the body takes the images, only the scored
    rows reach the head, and loss and gradients equal those of the model's own logits."""
    from pipeline.models.losses import fused_head
    from pipeline.train.loop import _batch_loss, lm_loss

    lm = causal_lm("olmo2", 100, tied=False)
    resize_rows(lm, 101)
    llava = build_llava(lm, tiny_tower(), 100, projector_seed=0).train()
    batch = _batch(llava, 100)
    batch["labels"][:, :-3] = IGNORE_INDEX  # the reply only, as in a LLaVA conversation
    head = fused_head(llava)
    assert head is not None and head.body is llava.model  # the body that takes pixel_values

    def loss_and_grads(fn):
        llava.zero_grad()
        loss = fn()
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in llava.named_parameters() if p.grad is not None}

    got, got_g = loss_and_grads(lambda: _batch_loss(llava, head, batch))
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    want, want_g = loss_and_grads(lambda: lm_loss(llava(**inputs).logits, batch["labels"]))
    assert torch.allclose(got, want, rtol=1e-5)
    assert got_g.keys() == want_g.keys() and any(n.startswith("model.multi_modal_projector") for n in got_g)
    for n in want_g:
        assert torch.allclose(got_g[n], want_g[n], rtol=1e-4, atol=1e-7), n
