"""Instruction tuning (Section 2, Appendix B.2, Table 2): conversations rendered with a chat
template and tokenized with a mask of the assistant tokens, the only tokens the loss sees.

Template. The tokenizer's own `chat_template` when it has one; otherwise DEFAULT_CHAT_TEMPLATE,
the TULU format of open-instruct (Wang et al., 2023, the paper's TULU source; our sweep's BPE
tokenizers have no template):

    <|user|>\\n{user}\\n<|assistant|>\\n{assistant}{eos}\\n<|user|>\\n...

preceded by the tokenizer's BOS token (EOS where it has none), as every document the pipeline
trains on.

Assistant mask. `apply_chat_template(return_assistant_tokens_mask=True)` needs `{% generation %}`
markers that most templates lack, so the spans are found by rendering incrementally: for the
assistant turn i, render(messages[:i], add_generation_prompt=True) ends right before the reply
and render(messages[:i+1]) right after its end-of-turn marker; the reply's content must occur
between them. Scored are the content and what follows it up to the end of that rendering
without trailing whitespace, i.e. the content plus the end-of-turn token(s) ("</s>",
"<|im_end|>", "<|eot_id|>", ...): the model learns to stop. Character spans become token spans
by tokenizing the prefix before each boundary: where the whole text's tokens begin with the
prefix's tokens (the usual case: with byte-level BPE a template marker, newline or special
token ends a pre-token), the whole text's tokenization is used; otherwise the conversation is
tokenized segment by segment and the ids concatenated, so the mask is exact either way
(`EncodedChats.resegmented` counts those).

Sequences longer than the context keep their first `max_len + 1` tokens (inputs and shifted
targets) with their mask; a conversation with no assistant token left is dropped (counted).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pipeline.data.batches import EpochOrder, pad_masked_batch
from pipeline.data.task_items import ChatItem, TaskError

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

# open-instruct's "tulu" template (open_instruct/dataset_transformation.py CHAT_TEMPLATES["tulu"]).
DEFAULT_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ '<|system|>\n' + message['content'] + '\n' }}"
    "{% elif message['role'] == 'user' %}{{ '<|user|>\n' + message['content'] + '\n' }}"
    "{% elif message['role'] == 'assistant' %}"
    "{% if not loop.last %}{{ '<|assistant|>\n' + message['content'] + eos_token + '\n' }}"
    "{% else %}{{ '<|assistant|>\n' + message['content'] + eos_token }}{% endif %}"
    "{% endif %}"
    "{% if loop.last and add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
    "{% endfor %}"
)
_TOKENIZE_CHUNK = 4096  # texts per call of the (Rust, batched) tokenizer


def has_chat_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def prefix_token(tokenizer) -> int:
    return tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id


def default_chat_spans(item: ChatItem, eos_token: str) -> tuple[str, list[tuple[int, int]]]:
    """(text, assistant character spans) of DEFAULT_CHAT_TEMPLATE, without rendering Jinja."""
    text, spans = "", []
    last = len(item.messages) - 1
    for j, m in enumerate(item.messages):
        if m.role == "assistant":
            text += "<|assistant|>\n"
            start = len(text)
            text += m.content + eos_token
            spans.append((start, len(text)))
            text += "\n" if j < last else ""
        else:
            text += f"<|{m.role}|>\n{m.content}\n"
    return text, spans


def template_chat_spans(tokenizer, item: ChatItem, where: str = "") -> tuple[str, list[tuple[int, int]]]:
    """(text, assistant character spans) of the tokenizer's own chat template, by incremental rendering."""
    messages = item.as_dicts()

    def render(msgs: list[dict], generation: bool) -> str:
        try:
            out = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=generation)
        except Exception as e:  # jinja2 TemplateError, raise_exception(...) in the template, ...
            raise TaskError(
                f"{where}: the tokenizer's chat template cannot render this conversation "
                f"({type(e).__name__}: {e})"
            ) from None
        if not isinstance(out, str):
            raise TaskError(
                f"{where}: apply_chat_template(tokenize=False) returned {type(out).__name__}, expected str"
            )
        return out

    full = render(messages, False)
    spans: list[tuple[int, int]] = []
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        before, upto = render(messages[:i], True), render(messages[: i + 1], False)
        if not upto.startswith(before) or not full.startswith(upto):
            raise TaskError(
                f"{where}: the tokenizer's chat template does not render conversations incrementally "
                f"(the rendering of the first {i} messages is not a prefix of the rendering of the first "
                f"{i + 1}, or that of the whole); cannot find the assistant tokens. "
                "Use a tokenizer without chat_template for the default TULU format"
            )
        k = upto.rfind(m["content"], len(before))  # the last occurrence: never inside a role header
        if k < 0:
            raise TaskError(
                f"{where}: the chat template's rendering of assistant message {i} "
                "does not contain its content verbatim"
            )
        end = max(len(upto.rstrip()), k + len(m["content"]))
        if spans and k < spans[-1][1]:
            raise TaskError(f"{where}: assistant spans of the chat template overlap (message {i})")
        spans.append((k, end))
    return full, spans


def chat_spans(tokenizer, item: ChatItem, where: str = "") -> tuple[str, list[tuple[int, int]]]:
    """(text, assistant character spans) under the template `encode_chats` uses for `tokenizer`."""
    if has_chat_template(tokenizer):
        return template_chat_spans(tokenizer, item, where)
    return default_chat_spans(item, tokenizer.eos_token)


def _tokenize(tokenizer, texts: list[str]) -> list[list[int]]:
    out: list[list[int]] = []
    for start in range(0, len(texts), _TOKENIZE_CHUNK):
        out += tokenizer(texts[start : start + _TOKENIZE_CHUNK], add_special_tokens=False)["input_ids"]
    return out


@dataclass(frozen=True)
class EncodedChats:
    """Token ids of conversations and, per token, whether it is an assistant token (a target).

    ids[i][t] is predicted from ids[i][:t]; scored[i][t] marks the targets. At most
    `max_len + 1` tokens per conversation (a context of max_len inputs).
    """

    ids: list[np.ndarray]
    scored: list[np.ndarray]
    max_len: int
    template: str  # "default" | "tokenizer"
    dropped: int = 0  # conversations truncated to no assistant token
    resegmented: int = 0  # conversations tokenized segment by segment (see the module doc)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def n_scored(self) -> int:
        return int(sum(int(m.sum()) for m in self.scored))


def _encode_chunk(
    tokenizer, rendered: list[tuple[str, list[tuple[int, int]]]], prefix: list[int]
) -> tuple[list[tuple[list[int], np.ndarray]], int]:
    """([(ids, assistant mask)] of rendered conversations, how many were tokenized segment by segment)."""
    texts, bounds = [], []
    for text, spans in rendered:  # the whole text, and its prefix before every span boundary
        cuts = sorted({c for span in spans for c in span if 0 < c < len(text)})
        bounds.append(cuts)
        texts += [text] + [text[:c] for c in cuts]
    tokens = _tokenize(tokenizer, texts)
    out, reseg, pos = [], 0, 0
    for (text, spans), cuts in zip(rendered, bounds):
        whole, prefixes = tokens[pos], tokens[pos + 1 : pos + 1 + len(cuts)]
        pos += 1 + len(cuts)
        at = {0: 0, len(text): len(whole)}
        if all(whole[: len(p)] == p for p in prefixes):
            at.update({c: len(p) for c, p in zip(cuts, prefixes)})
            ids = whole
        else:  # a BPE merge crosses a boundary: tokenize segment by segment
            reseg += 1
            edges = [0, *cuts, len(text)]
            segments = [text[a:b] for a, b in zip(edges, edges[1:])]
            ids = []
            for c, piece in zip(edges[1:], _tokenize(tokenizer, segments)):
                ids += piece
                at[c] = len(ids)
        mask = np.zeros(len(prefix) + len(ids), dtype=bool)
        for a, b in spans:
            mask[len(prefix) + at[a] : len(prefix) + at[b]] = True
        out.append((prefix + ids, mask))
    return out, reseg


def encode_chats(
    tokenizer,
    items: Sequence[ChatItem],
    max_len: int,
    max_tokens: int | None = None,
    name: str = "chat",
) -> EncodedChats:
    """Render, tokenize and mask conversations; truncate to the context (see the module doc).

    max_tokens: keep the first conversations whose (truncated) tokens fit, at least one
    (evaluation sets, like `eval_max_tokens` for LM tasks); the rest are never tokenized.
    """
    if not items:
        raise TaskError(f"task {name}: no conversations to encode")
    if max_len < 2:
        raise TaskError(f"task {name}: a context of {max_len} tokens cannot hold a conversation")
    own = has_chat_template(tokenizer)
    prefix = [] if own else [prefix_token(tokenizer)]
    ids_out, scored_out, dropped, reseg, total, full = [], [], 0, 0, 0, False
    for start in range(0, len(items), _TOKENIZE_CHUNK):
        chunk = items[start : start + _TOKENIZE_CHUNK]
        rendered = [
            chat_spans(tokenizer, it, f"task {name}: conversation {start + i}") for i, it in enumerate(chunk)
        ]
        encoded, n_reseg = _encode_chunk(tokenizer, rendered, prefix)
        reseg += n_reseg
        for ids, mask in encoded:
            ids, mask = np.asarray(ids[: max_len + 1], dtype=np.int64), mask[: max_len + 1]
            mask[0] = False  # the first token is never a target
            if not mask.any():
                dropped += 1
                continue
            if max_tokens is not None and ids_out and total + len(ids) > max_tokens:
                full = True
                break
            total += len(ids)
            ids_out.append(ids)
            scored_out.append(mask)
        if full:
            break
    if not ids_out:
        raise TaskError(
            f"task {name}: no conversation has an assistant token within the first {max_len} tokens "
            f"({dropped} of {len(items)} truncated away); use a longer finetune.seq_len"
        )
    if dropped:
        log.warning(
            "task %s: %d conversations have no assistant token within %d tokens and are skipped",
            name,
            dropped,
            max_len,
        )
    if reseg:
        log.info(
            "task %s: %d conversations tokenized segment by segment "
            "(a BPE merge crosses an assistant span boundary)",
            name,
            reseg,
        )
    return EncodedChats(ids_out, scored_out, max_len, "tokenizer" if own else "default", dropped, reseg)


class ChatSampler:
    """Batches of whole conversations; the loss sees the assistant tokens only.

    Right padding after every scored position: with a causal mask no attention mask is needed.
    The step's loss is the mean over its assistant tokens (also under gradient accumulation).
    """

    def __init__(self, enc: EncodedChats, batch_size: int, seed: int, pad_token: int):
        self.enc, self.batch_size, self.pad = enc, batch_size, pad_token
        self.order = EpochOrder(len(enc), seed)
        self.steps_per_epoch = -(-len(enc) // batch_size)

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        idx = self.order.take(step * self.batch_size, self.batch_size)
        return pad_masked_batch([self.enc.ids[i] for i in idx], [self.enc.scored[i] for i in idx], self.pad)


def assistant_runs(ids: np.ndarray, scored: np.ndarray) -> list[list[int]]:
    """The contiguous runs of scored token ids of one conversation (one per assistant turn)."""
    runs, cur = [], []
    for t, s in zip(ids.tolist(), scored.tolist()):
        if s:
            cur.append(t)
        elif cur:
            runs.append(cur)
            cur = []
    return runs + ([cur] if cur else [])
