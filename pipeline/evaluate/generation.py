"""Responses of a model to instructions (the AlpacaEval-style judged metric, Appendix B.3).

A prompt is the instruction as one user turn, rendered with the template instruction tuning trains
on (pipeline/data/chat.py: the tokenizer's own chat template, else the TULU format after the BOS
token) up to the assistant header. Prompts are generated in batches with transformers' `generate`,
left-padded (a decoder continues from the last position of every row) and ordered by length so a
batch wastes little padding; greedy, or sampled with temperature / top-p from a seeded generator.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import torch

from pipeline.data.chat import default_chat_spans, has_chat_template, prefix_token
from pipeline.data.tasks import ChatItem, Message

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GenerationConfig:
    """How responses are generated (every field changes the responses)."""

    max_new_tokens: int = 256
    batch_size: int = 8
    do_sample: bool = False  # False: greedy
    temperature: float = 0.7  # with do_sample
    top_p: float = 0.9  # with do_sample
    seed: int = 0  # with do_sample: the sampling generator's seed

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1 or self.batch_size < 1:
            raise ValueError("generation: max_new_tokens and batch_size must be >= 1")
        if self.do_sample and not (self.temperature > 0 and 0 < self.top_p <= 1):
            raise ValueError("generation: sampling needs temperature > 0 and 0 < top_p <= 1")


def prompt_ids(tokenizer, instruction: str) -> list[int]:
    """Token ids of one instruction as a user turn followed by the assistant header: what
    instruction tuning renders before an assistant reply (pipeline/data/chat.py)."""
    if has_chat_template(tokenizer):
        turn = [{"role": "user", "content": instruction}]
        text = tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=True)
        return tokenizer(text, add_special_tokens=False)["input_ids"]
    item = ChatItem((Message("user", instruction), Message("assistant", "")))
    text, spans = default_chat_spans(item, tokenizer.eos_token)
    return [prefix_token(tokenizer)] + tokenizer(text[: spans[0][0]], add_special_tokens=False)["input_ids"]


def stop_ids(model, tokenizer) -> list[int]:
    """Tokens that end a response: the tokenizer's EOS and the model's generation-config EOS ids."""
    ids = {tokenizer.eos_token_id}
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids |= set(configured) if isinstance(configured, list | tuple) else {configured}
    return sorted(i for i in ids if i is not None)


@torch.no_grad()
def generate_responses(model, tokenizer, instructions: list[str], cfg: GenerationConfig) -> list[dict]:
    """One row per instruction, in input order: the response text and its token count. A prompt
    that leaves less than max_new_tokens of the model's context keeps its end (logged). Logs the
    rate in new tokens/s and the ETA per batch."""
    context = model.config.max_position_embeddings
    room = context - cfg.max_new_tokens  # prompt tokens that fit beside the response
    if room < 1:
        raise ValueError(
            f"generation: max_new_tokens {cfg.max_new_tokens} leaves no room for a prompt "
            f"in the model's context of {context}"
        )
    prompts = [prompt_ids(tokenizer, x) for x in instructions]
    cut = sum(len(p) > room for p in prompts)
    if cut:  # keep each prompt's end: the instruction's last words and the assistant header
        log.warning(
            "%d of %d prompts longer than %d tokens keep their last %d", cut, len(prompts), room, room
        )
        prompts = [p[-room:] for p in prompts]
    order = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), i))
    device = next(model.parameters()).device
    pad, stops = tokenizer.pad_token_id, stop_ids(model, tokenizer)
    generator = torch.Generator(device=device).manual_seed(cfg.seed) if cfg.do_sample else None
    was_training, out = model.training, [None] * len(prompts)
    model.eval()
    t0, made = time.perf_counter(), 0
    for start in range(0, len(order), cfg.batch_size):
        rows = order[start : start + cfg.batch_size]
        width = max(len(prompts[i]) for i in rows)
        ids = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, i in enumerate(rows):  # left padding: every prompt ends at the last column
            ids[r, width - len(prompts[i]) :] = torch.tensor(prompts[i])
            mask[r, width - len(prompts[i]) :] = 1
        sampling = {"temperature": cfg.temperature, "top_p": cfg.top_p} if cfg.do_sample else {}
        if generator is not None:  # transformers samples from torch's global RNG: seed it per batch
            torch.manual_seed(int(torch.randint(2**31 - 1, (1,), generator=generator)))
        new = model.generate(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            max_new_tokens=cfg.max_new_tokens,
            pad_token_id=pad,
            eos_token_id=stops,
            do_sample=cfg.do_sample,
            **sampling,
        )[:, width:].cpu()
        for r, i in enumerate(rows):
            tokens = new[r].tolist()
            end = next((k for k, t in enumerate(tokens) if t in stops), len(tokens))
            out[i] = {"output": tokenizer.decode(tokens[:end], skip_special_tokens=True), "n_tokens": end}
            made += end
        elapsed = time.perf_counter() - t0
        done = start + len(rows)
        log.info(
            "generated %d/%d responses | %.1f new tok/s, ETA %.0fs",
            done,
            len(order),
            made / elapsed,
            elapsed / done * (len(order) - done),
        )
    model.train(was_training)
    return out
