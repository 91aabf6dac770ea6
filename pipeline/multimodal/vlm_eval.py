"""A LLaVA model on the five VLM benchmarks and its loss on held-out conversations.

Answers: each item's prompt (lmms-eval's `doc_to_text`) as the user turn after "<image>\\n" in the
v1 template, up to "ASSISTANT:" (what lmms-eval's `llava_hf` asks), greedy, at most the benchmark's
generation length (lmms-eval's, capped by `max_new_tokens`), batched with left padding and the
batch's images; several ranks share the batches (pipeline/ranks.py) and every rank returns all
answers. Scores: pipeline/multimodal/scoring.py (lmms-eval's definitions) and the VLM score. Rows:
`eval_data` the benchmark (every raw number of its score), and `vlm` (the VLM score and its five
parts), split `eval`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import torch

from pipeline.data.batches import IGNORE_INDEX
from pipeline.data.chat import prefix_token
from pipeline.evaluate.generation import left_padded
from pipeline.models.losses import fused_head
from pipeline.multimodal.benchmarks import max_new_tokens
from pipeline.multimodal.conversation import v1_prompt
from pipeline.multimodal.llava import IMAGE_TOKEN
from pipeline.multimodal.scoring import score, vlm_parts, vlm_score
from pipeline.ranks import SINGLE, Ranks, map_shared
from pipeline.sweeps.lr_search import SELECTIONS
from pipeline.tables import metric_row

if TYPE_CHECKING:
    from pipeline.multimodal.eval_data import EvalItem
    from pipeline.multimodal.tower import Preprocess

log = logging.getLogger(__name__)
# the VLM score's rows are what finetune.select_metric: vlm_score selects on (eval_data `vlm`, split
# `eval`: the split label of every VLM benchmark row, the sets scored as published)
SCORE = SELECTIONS["vlm_score"]
SPLIT, VLM = SCORE.split, SCORE.eval_data


def prompt_ids(tokenizer, item: EvalItem, image_token: int, image_tokens: int) -> list[int]:
    """BOS, then the v1 text of "<image>\\n{prompt}" up to "ASSISTANT:", the image expanded."""
    text = v1_prompt(f"{IMAGE_TOKEN}\n{item.prompt}")
    before, after = text.split(IMAGE_TOKEN)
    ids = [prefix_token(tokenizer)] + tokenizer(before, add_special_tokens=False)["input_ids"]
    return ids + [image_token] * image_tokens + tokenizer(after, add_special_tokens=False)["input_ids"]


@torch.no_grad()
def answer(
    model,
    tokenizer,
    items: Sequence[EvalItem],
    preprocess: Preprocess,
    image_token: int,
    image_tokens: int,
    new_tokens: int,
    batch_size: int,
    ranks: Ranks = SINGLE,
) -> list[str]:
    """Greedy replies to `items` (module docstring), in item order, on every rank."""
    device = next(model.parameters()).device
    stops = sorted({tokenizer.eos_token_id})
    prompts = [prompt_ids(tokenizer, it, image_token, image_tokens) for it in items]
    context = getattr(model.config, "text_config", model.config).max_position_embeddings
    longest = max(map(len, prompts), default=0)
    if longest + new_tokens > context:
        raise ValueError(
            f"multimodal.eval_max_new_tokens: {items[0].benchmark} prompts of up to {longest} tokens (the v1 "
            f"template, {image_tokens} image tokens) and {new_tokens} new tokens exceed the model's context "
            f"of {context}"
        )
    order = sorted(range(len(items)), key=lambda i: (len(prompts[i]), i))
    batches = [order[s : s + batch_size] for s in range(0, len(order), batch_size)]
    t0, done = time.perf_counter(), [0]

    def run(mine: list[list[int]]) -> list[list[str]]:
        out = []
        for rows in mine:
            ids, mask = left_padded([prompts[i] for i in rows], tokenizer.pad_token_id)
            pixels = preprocess([items[i].pil() for i in rows])
            new = model.generate(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                pixel_values=pixels.to(device, next(model.parameters()).dtype),
                max_new_tokens=new_tokens,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=stops,
            )[:, ids.shape[1] :].cpu()
            replies = []
            for row in new.tolist():
                end = next((k for k, t in enumerate(row) if t in stops), len(row))
                replies.append(tokenizer.decode(row[:end], skip_special_tokens=True))
            out.append(replies)
            done[0] += len(rows)
            rate = done[0] / (time.perf_counter() - t0)
            log.info("answered %d items (%.1f items/s)", done[0], rate)
        return out

    was_training = model.training
    model.eval()
    answered = map_shared(batches, run, ranks)
    model.train(was_training)
    replies: list[str] = [""] * len(items)
    for rows, part in zip(batches, answered, strict=True):
        for i, reply in zip(rows, part, strict=True):
            replies[i] = reply
    return replies


def benchmark_rows(
    model,
    tokenizer,
    sets: Mapping[str, Sequence[EvalItem]],
    preprocess: Preprocess,
    image_token: int,
    image_tokens: int,
    max_tokens: int,
    batch_size: int,
    common: dict,
    ranks: Ranks = SINGLE,
) -> tuple[list[dict], dict[str, dict[str, float]]]:
    """(rows, {benchmark: score}) of the model on each benchmark set, and the VLM score's rows."""
    rows, scores = [], {}
    for name, items in sets.items():
        t0 = time.perf_counter()
        replies = answer(
            model,
            tokenizer,
            items,
            preprocess,
            image_token,
            image_tokens,
            min(max_new_tokens(name, max_tokens), max_tokens),
            batch_size,
            ranks,
        )
        scores[name] = score(name, items, replies)
        log.info(
            "%s: the first replies %s (answers %s)",
            name,
            replies[:3],
            [list(it.answers[:1]) for it in items[:3]],
        )
        rows += [
            metric_row(**common, eval_data=name, split=SPLIT, metric=m, value=v)
            for m, v in scores[name].items()
        ]
        log.info(
            "%s: %d items in %.1f s: %s",
            name,
            len(items),
            time.perf_counter() - t0,
            {m: round(v, 3) for m, v in scores[name].items() if "/" not in m},
        )
    if len(scores) == len(sets) and scores:
        parts = vlm_parts(scores)
        rows += [
            metric_row(**common, eval_data=VLM, split=SPLIT, metric=f"vlm_{k}", value=v)
            for k, v in parts.items()
        ]
        total = vlm_score(scores)
        rows.append(metric_row(**common, eval_data=VLM, split=SPLIT, metric=SCORE.metric, value=total))
        log.info("VLM score %.2f (parts %s)", total, {k: round(v, 2) for k, v in parts.items()})
    return rows, scores


@torch.no_grad()
def conversation_loss(model, batches: Callable[[], Iterator[dict[str, torch.Tensor]]]) -> dict[str, float]:
    """Mean next-token loss over the scored tokens of every held-out conversation (with its image),
    its perplexity, and `loss_other_image`: the same loss with each conversation of an image batch
    shown the next one's image (text-only conversations unchanged). How far it lies above `loss` is
    how much the model reads its image; equal means the answers come from the text alone."""
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    total, other, tokens = 0.0, 0.0, 0
    was_training = model.training
    model.eval()

    head = fused_head(model)  # only the scored positions through the output layer, where it allows

    def summed(batch: dict[str, torch.Tensor], pixels: torch.Tensor | None) -> float:
        extra = {} if pixels is None else {"pixel_values": pixels.to(device, dtype)}
        if head is not None:
            flat = batch["labels"].reshape(-1)
            scored = (flat != IGNORE_INDEX).nonzero().squeeze(1)
            ids = batch["input_ids"].to(device)
            return float(head.nll(ids, scored.to(device), flat[scored].to(device), summed=True, **extra))
        logits = model(input_ids=batch["input_ids"].to(device), **extra).logits.float()
        return float(
            torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.size(-1)),
                batch["labels"].to(device).reshape(-1),
                ignore_index=IGNORE_INDEX,
                reduction="sum",
            )
        )

    for batch in batches():
        pixels = batch.get("pixel_values")
        right = summed(batch, pixels)
        total += right
        other += summed(batch, pixels.roll(1, dims=0)) if pixels is not None and len(pixels) > 1 else right
        tokens += int((batch["labels"] != IGNORE_INDEX).sum())
    model.train(was_training)
    loss, loss_other = total / max(1, tokens), other / max(1, tokens)
    return {"loss": loss, "ppl": float(torch.exp(torch.tensor(loss))), "loss_other_image": loss_other}
