"""A causal LM wrapped as LLaVA (Liu et al., 2023; LLaVA-1.5) and unwrapped again, through
transformers' `LlavaForConditionalGeneration`: its language model is any registered text model
(OLMo with tied embeddings, OLMo-2, Llama for Amber), its vision tower a CLIP vision encoder, and
between them the two-layer GELU projector (`mlp2x_gelu`). LLaVA-1.5's defaults: the second-to-last
tower layer (`vision_feature_layer` -2) without its CLS token (`default`), one `<image>` token per
patch.

`build_llava` moves the causal LM's own modules into the LLaVA model (no copy, no new random
weights but the projector's), so with no image its logits are the causal LM's; `language_model`
moves them back into the causal-LM class (its logits again). The `<image>` token takes the
tokenizer's next id: a spare embedding row where the checkpoint has one (OLMo's 50,280 ids in
50,304 rows, OLMo-2's), else one new row (Amber, the toy's BPE) when `resize` is on, set to the
mean of the existing rows (never trained: image features overwrite it; its output row is the mean
output row); `language_model` drops an added row.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch

from pipeline.multimodal.tower import patch_tokens

log = logging.getLogger(__name__)
IMAGE_TOKEN = "<image>"


class VocabularyError(ValueError):
    """No room for the image token in the vocabulary: names the key."""


def add_image_token(tokenizer, embedding_rows: int, resize: bool) -> tuple[int, int]:
    """(the `<image>` token's id, the embedding rows the model needs): the tokenizer gains the token
    (a special token, never split) at its next id, which is a spare row when there is one."""
    if IMAGE_TOKEN in tokenizer.get_vocab():
        token = tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
        return token, max(embedding_rows, token + 1)
    token = len(tokenizer)
    if token >= embedding_rows and not resize:
        raise VocabularyError(
            f"multimodal.resize_embeddings: the tokenizer's {token} ids fill the model's {embedding_rows} "
            f"embedding rows, so {IMAGE_TOKEN} needs a new row; set multimodal.resize_embeddings: true"
        )
    tokenizer.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
    if tokenizer.convert_tokens_to_ids(IMAGE_TOKEN) != token:
        raise VocabularyError(f"the tokenizer gave {IMAGE_TOKEN} another id than its next one ({token})")
    return token, max(embedding_rows, token + 1)


@torch.no_grad()
def resize_rows(lm: torch.nn.Module, rows: int) -> None:
    """Grow the causal LM's input (and untied output) embeddings to `rows`, new rows = the mean row."""
    old = lm.get_input_embeddings().weight.shape[0]
    if rows == old:
        return
    lm.resize_token_embeddings(rows, mean_resizing=False)
    for emb in {
        id(m): m for m in (lm.get_input_embeddings(), lm.get_output_embeddings()) if m is not None
    }.values():
        if emb.weight.device.type != "meta":
            emb.weight[old:] = emb.weight[:old].mean(0)


def llava_config(lm_config, tower_config, image_token: int, image_tokens: int):
    """LLaVA-1.5's configuration around a text config and a CLIP vision config."""
    from transformers import LlavaConfig

    return LlavaConfig(
        vision_config=tower_config,
        text_config=lm_config,
        image_token_index=image_token,
        image_seq_length=image_tokens,
        projector_hidden_act="gelu",
        vision_feature_select_strategy="default",
        vision_feature_layer=-2,
        multimodal_projector_bias=True,
        tie_word_embeddings=bool(getattr(lm_config, "tie_word_embeddings", False)),
    )


def build_llava(lm: torch.nn.Module, tower: torch.nn.Module, image_token: int, projector_seed: int):
    """`LlavaForConditionalGeneration` made of the causal LM's decoder and output layer, the tower
    (frozen) and a new projector drawn with `projector_seed` (on the CPU, then moved to the LM's
    device; a meta LM gives a meta model: a sharded job's other ranks, filled by broadcast)."""
    from transformers import LlavaForConditionalGeneration
    from transformers.models.llava.modeling_llava import LlavaMultiModalProjector

    config = llava_config(lm.config, tower.config, image_token, patch_tokens(tower.config))
    with torch.device("meta"):
        llava = LlavaForConditionalGeneration(config)
    device = lm.get_input_embeddings().weight.device
    with torch.random.fork_rng(devices=[]):  # drawn on the CPU: the same projector on every device
        torch.manual_seed(projector_seed)
        projector = LlavaMultiModalProjector(config).to(device)
    llava.model.vision_tower = tower.requires_grad_(False)
    llava.model.multi_modal_projector = projector
    llava.model.language_model = getattr(lm, lm.base_model_prefix)
    llava.lm_head = lm.get_output_embeddings()
    llava.generation_config = lm.generation_config
    attention = getattr(lm.config, "_attn_implementation", None)
    if attention is not None:
        llava.config.text_config._attn_implementation = attention
    return llava


def language_model(llava: torch.nn.Module, vocab_rows: int | None = None) -> torch.nn.Module:
    """The causal LM inside a LLaVA model, in its own class (the same modules, not a copy); with
    `vocab_rows`, embedding rows past it (an added image token's) dropped."""
    from transformers import AutoModelForCausalLM

    config = llava.config.text_config
    with torch.device("meta"):
        lm = AutoModelForCausalLM.from_config(config)
    setattr(lm, lm.base_model_prefix, llava.model.language_model)
    lm.lm_head = llava.lm_head
    lm.generation_config = llava.generation_config
    if vocab_rows is not None and vocab_rows < lm.get_input_embeddings().weight.shape[0]:
        lm.resize_token_embeddings(vocab_rows, mean_resizing=False)
    if config.tie_word_embeddings:
        lm.tie_weights()
    return lm


def save_hf(llava: torch.nn.Module, tokenizer, preprocess, out_dir: str | Path, template: str) -> None:
    """The model in transformers' format with its tokenizer, image processor and chat template:
    `LlavaForConditionalGeneration.from_pretrained` (and lmms-eval's `llava_hf`) read it back."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    llava.save_pretrained(out)
    tokenizer.chat_template = template
    tokenizer.save_pretrained(out)
    processor = {
        "image_processor_type": "CLIPImageProcessor",
        "do_resize": True,
        "size": {"shortest_edge": preprocess.size},
        "do_center_crop": True,
        "crop_size": {"height": preprocess.size, "width": preprocess.size},
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": list(preprocess.mean),
        "image_std": list(preprocess.std),
        "do_convert_rgb": True,
        "resample": 3,
    }
    (out / "preprocessor_config.json").write_text(json.dumps(processor, indent=1))
