"""LLaVA's two conversation templates as token ids with the mask of the tokens the loss sees
(haotian-liu/LLaVA, llava/conversation.py and llava/train/train.py `preprocess_plain` /
`preprocess_v1`):

- `plain` (stage 1, the captions): the image, then the caption and "\\n"; the loss on the caption
  and "\\n" (the human turn is reduced to the image alone).
- `v1` (stage 2, the instructions; Vicuna v1):

      {system} USER: <image>\\n{question} ASSISTANT: {answer}{eos}USER: {question} ASSISTANT: ...

  the loss on each answer and the end-of-turn after it. LLaVA writes the end-of-turn as the text
  "</s>", Llama's EOS; here it is the tokenizer's own EOS token (OLMo's `<|endoftext|>`), so every
  backbone learns to stop.

Every sequence starts with the tokenizer's BOS (EOS where it has none), as every document the
pipeline trains on. `<image>` becomes `image_tokens` copies of the image token id, which the model
overwrites with the projected patch features. Pieces are tokenized one by one (a piece boundary is
a space, a newline or a special token, where byte-level BPE ends a pre-token anyway), so the mask is
exact. A sequence longer than `max_len` + 1 tokens keeps its first `max_len` + 1; one whose image
tokens would be cut, or with no scored token left, is dropped and counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from pipeline.data.chat import prefix_token
from pipeline.multimodal.llava import IMAGE_TOKEN

if TYPE_CHECKING:
    from pipeline.multimodal.llava_json import LlavaRecord

SYSTEM_V1 = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions."
)
TEMPLATES = ("plain", "v1")
# the v1 template as a chat template (a saved model's tokenizer: lmms-eval's llava_hf applies it);
# messages' content is text with "<image>" where the image goes
V1_CHAT_TEMPLATE = (
    '{{ "' + SYSTEM_V1 + '" }}'
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ ' USER: ' + message['content'] + ' ASSISTANT:' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + eos_token }}{% endif %}"
    "{% endfor %}"
)


@dataclass
class EncodedConversations:
    """Token ids and loss masks of conversations; `images[i]` is record i's image key (None: text)."""

    ids: list[np.ndarray] = field(default_factory=list)
    scored: list[np.ndarray] = field(default_factory=list)
    images: list[str | None] = field(default_factory=list)
    record_ids: list[str] = field(default_factory=list)
    truncated: int = 0  # kept with their end cut
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> conversations dropped

    def __len__(self) -> int:
        return len(self.ids)


def v1_prompt(question: str) -> str:
    """The v1 text of one user turn up to the reply (what generation continues from)."""
    return f"{SYSTEM_V1} USER: {question} ASSISTANT:"


def pieces(record: LlavaRecord, template: str, eos: str) -> list[tuple[str, bool]]:
    """(text, scored) pieces of a record in `template`."""
    if template == "plain":
        caption = next(text for role, text in record.turns if role == "assistant")
        return [(IMAGE_TOKEN if record.has_image else "", False), (caption + "\n", True)]
    if template != "v1":
        raise ValueError(f"conversation template {template!r}: expected one of {TEMPLATES}")
    out: list[tuple[str, bool]] = [(SYSTEM_V1, False)]
    for role, text in record.turns:
        if role == "user":
            out.append((f" USER: {text} ASSISTANT:", False))
        else:
            out.append((f" {text}", True))
            out.append((eos, True))
    return out


def _ids(tokenizer, text: str, image_token: int, image_tokens: int) -> list[int]:
    """Token ids of a piece; each `<image>` as `image_tokens` image-token ids."""
    out: list[int] = []
    for i, part in enumerate(text.split(IMAGE_TOKEN)):
        if i:
            out += [image_token] * image_tokens
        if part:
            out += tokenizer(part, add_special_tokens=False)["input_ids"]
    return out


def encode_conversations(
    records: Sequence[LlavaRecord],
    tokenizer,
    template: str,
    image_token: int,
    image_tokens: int,
    max_len: int,
) -> EncodedConversations:
    """Records in `template` as ids + loss masks (module docstring), at most `max_len` + 1 tokens."""
    enc = EncodedConversations()
    eos, start = tokenizer.eos_token, prefix_token(tokenizer)
    for record in records:
        ids, scored = [start], [False]
        for text, counts in pieces(record, template, eos):
            part = _ids(tokenizer, text, image_token, image_tokens)
            ids += part
            scored += [counts] * len(part)
        wanted = image_tokens if record.has_image else 0
        if ids.count(image_token) != wanted:
            raise ValueError(
                f"conversation {record.id!r}: {ids.count(image_token)} image tokens, expected {wanted} "
                f"({'one' if wanted else 'no'} {IMAGE_TOKEN} placeholder of {image_tokens} tokens)"
            )
        if len(ids) > max_len + 1:
            ids, scored = ids[: max_len + 1], scored[: max_len + 1]
            if ids.count(image_token) != wanted:
                enc.dropped["image cut by max_length"] = enc.dropped.get("image cut by max_length", 0) + 1
                continue
            enc.truncated += 1
        if not any(scored[1:]):
            enc.dropped["nothing scored"] = enc.dropped.get("nothing scored", 0) + 1
            continue
        enc.ids.append(np.asarray(ids, dtype=np.int64))
        enc.scored.append(np.asarray(scored, dtype=bool))
        enc.images.append(record.image)
        enc.record_ids.append(record.id)
    return enc
