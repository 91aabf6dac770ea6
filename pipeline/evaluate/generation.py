"""Responses of a model to instructions (the AlpacaEval-style judged metric, Appendix B.3).

A prompt is the instruction as one user turn, rendered with the template instruction tuning trains
on (pipeline/data/chat.py: the tokenizer's own chat template, else the TULU format after the BOS
token) up to the assistant header. Prompts are generated in batches with transformers' `generate`,
left-padded (a decoder continues from the last position of every row) and ordered by length so a
batch wastes little padding; greedy, or sampled with temperature / top-p from a seeded generator.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from pathlib import Path

import torch

from pipeline.data.chat import default_chat_spans, has_chat_template, prefix_token
from pipeline.data.task_items import ChatItem, Message
from pipeline.evaluate.generation_config import GenerationConfig
from pipeline.io import write_parquet
from pipeline.models.loading import dtype_name
from pipeline.ranks import SINGLE, Ranks, map_shared

log = logging.getLogger(__name__)


Turns = str | list[dict]  # an instruction (one user turn), or {role, content} messages


def prompt_ids(tokenizer, turns: Turns) -> list[int]:
    """Token ids of an instruction (one user turn) or of messages, followed by the assistant
    header: what instruction tuning renders before an assistant reply (pipeline/data/chat.py)."""
    messages = [{"role": "user", "content": turns}] if isinstance(turns, str) else turns
    if has_chat_template(tokenizer):
        plain = [{"role": m["role"], "content": m["content"]} for m in messages]
        text = tokenizer.apply_chat_template(plain, tokenize=False, add_generation_prompt=True)
        return tokenizer(text, add_special_tokens=False)["input_ids"]
    item = ChatItem(tuple(Message(m["role"], m["content"]) for m in messages) + (Message("assistant", ""),))
    text, spans = default_chat_spans(item, tokenizer.eos_token)
    return [prefix_token(tokenizer)] + tokenizer(text[: spans[-1][0]], add_special_tokens=False)["input_ids"]


def left_padded(prompts: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input ids, attention mask) of prompts padded on the left: every prompt ends in the last
    column, where a decoder's next-token logits are read."""
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for r, p in enumerate(prompts):
        ids[r, width - len(p) :], mask[r, width - len(p) :] = torch.tensor(p), 1
    return ids, mask


def stop_ids(model, tokenizer) -> list[int]:
    """Tokens that end a response: the tokenizer's EOS and the model's generation-config EOS ids."""
    ids = {tokenizer.eos_token_id}
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids |= set(configured) if isinstance(configured, list | tuple) else {configured}
    return sorted(i for i in ids if i is not None)


@torch.no_grad()
def generate_responses(
    model, tokenizer, instructions: list[Turns], cfg: GenerationConfig, ranks: Ranks = SINGLE
) -> list[dict]:
    """One row per instruction (or message list), in input order: the response text and its token
    count. A prompt that leaves less than max_new_tokens of the model's context keeps its end
    (logged). Logs the rate in new tokens/s and the ETA per batch.

    ranks: a job of several processes, each holding the whole model: the batches (the same ones
    one process makes) are dealt over the ranks and every rank returns all rows, so the responses
    are one process's, token for token (greedy), whatever the rank count.
    """
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
    batches = [order[s : s + cfg.batch_size] for s in range(0, len(order), cfg.batch_size)]
    # transformers samples from torch's global RNG: one seed per batch, drawn in batch order
    draw = torch.Generator().manual_seed(cfg.seed)
    jobs = [(rows, int(torch.randint(2**31 - 1, (1,), generator=draw))) for rows in batches]
    was_training = model.training
    model.eval()
    progress = _Progress(sum(len(batches[i]) for i in ranks.share(len(batches))), ranks)

    def run(mine: list[tuple[list[int], int]]) -> list[list[dict]]:
        return [
            _generate_batch(model, tokenizer, [prompts[i] for i in b], seed, cfg, progress)
            for b, seed in mine
        ]

    answered = map_shared(jobs, run, ranks)
    model.train(was_training)
    out: list = [None] * len(prompts)
    for (rows, _), answers in zip(jobs, answered, strict=True):
        for i, answer in zip(rows, answers, strict=True):
            out[i] = answer
    return out


class _Progress:
    """Log lines with the rate in new tokens/s and the ETA over this rank's prompts."""

    def __init__(self, total: int, ranks: Ranks):
        self.total, self.ranks = total, ranks
        self.done, self.made, self.t0 = 0, 0, time.perf_counter()

    def add(self, prompts: int, tokens: int) -> None:
        self.done, self.made = self.done + prompts, self.made + tokens
        elapsed = time.perf_counter() - self.t0
        where = f" (rank {self.ranks.rank} of {self.ranks.world})" if self.ranks.several else ""
        log.info(
            "generated %d/%d responses%s | %.1f new tok/s, ETA %.0fs",
            self.done,
            self.total,
            where,
            self.made / elapsed,
            elapsed / self.done * (self.total - self.done),
        )


def _generate_batch(
    model, tokenizer, prompts: list[list[int]], seed: int, cfg: GenerationConfig, progress: _Progress
) -> list[dict]:
    """The responses to one batch of prompts (left-padded; sampled ones from `seed`)."""
    device = next(model.parameters()).device
    pad, stops = tokenizer.pad_token_id, stop_ids(model, tokenizer)
    ids, mask = left_padded(prompts, pad)
    width = ids.shape[1]
    sampling = {"temperature": cfg.temperature, "top_p": cfg.top_p} if cfg.do_sample else {}
    if cfg.do_sample:
        torch.manual_seed(seed)
    new = model.generate(
        input_ids=ids.to(device),
        attention_mask=mask.to(device),
        max_new_tokens=cfg.max_new_tokens,
        pad_token_id=pad,
        eos_token_id=stops,
        do_sample=cfg.do_sample,
        **sampling,
    )[:, width:].cpu()
    out = []
    for row in new.tolist():
        end = next((k for k, t in enumerate(row) if t in stops), len(row))
        out.append({"output": tokenizer.decode(row[:end], skip_special_tokens=True), "n_tokens": end})
    progress.add(len(out), sum(r["n_tokens"] for r in out))
    return out


def generator_label(identity: dict) -> str:
    """A model's name in the annotations: its checkpoint, and the fine-tuning run (if any)."""
    method = identity.get("modification")
    if method == "none":
        return f"{identity['checkpoint']} base"
    named = "" if method == "sft" else f" {method}"
    return (
        f"{identity['checkpoint']} {identity['task']}{named} lr{identity['learning_rate']:g} "
        f"lam{identity['lambda_reg']:g} seed{identity['seed']}"
    )


def write_responses(
    model,
    tokenizer,
    instructions: str | Path,
    cfg: GenerationConfig | dict,
    identity: dict,
    out: str | Path,
    ranks: Ranks = SINGLE,
) -> None:
    """The model's responses to the instruction table (pipeline/judge/instructions.py), one row per
    instruction with the model's identity (metric-table columns), the generation settings and the
    weights' dtype, so a judge can be rerun or swapped without generating again. Several ranks
    share the generation (`generate_responses`); rank 0 writes."""
    import pandas as pd

    cfg = cfg if isinstance(cfg, GenerationConfig) else GenerationConfig(**cfg)
    table = pd.read_parquet(instructions)
    responses = generate_responses(model, tokenizer, table["instruction"].tolist(), cfg, ranks)
    if not ranks.main:
        return
    df = table[["index", "instruction"]].assign(
        output=[r["output"] for r in responses],
        n_tokens=[r["n_tokens"] for r in responses],
        generator=generator_label(identity),
        generation=json.dumps(asdict(cfg), sort_keys=True),
        dtype=dtype_name(model),
        **identity,
    )
    write_parquet(out, df)
