"""Does a toy LLaVA read its image? Accuracy per question type on the toy benchmarks' held-out images,
beside the accuracy of always giving that type's most frequent answer.

The VLM score mixes five benchmarks and POPE's F1 swings with the model's yes/no bias; per question
type (the question with its digits and quoted words masked) the answer either beats the type's
majority answer or it does not. Reads a stage-2 model saved by `multimodal.save_hf: true` and the
study's LLaVA data (the same items and greedy replies as the job's benchmark rows).

usage: python bench/vlm_question_types.py results/vlm-demo \\
           results/vlm-demo/finetune/small-4000000-s0/llava/sft/lr0.03_lam0_seed0.hf [--min-items 8]
"""

from __future__ import annotations

import argparse
import re
from collections import Counter, defaultdict
from pathlib import Path

import torch
from transformers import AutoTokenizer, LlavaForConditionalGeneration

from pipeline.layout import VLM_DATA, VLM_TOWER
from pipeline.multimodal.config import VlmConfig
from pipeline.multimodal.scoring import exact_match
from pipeline.multimodal.tower import Preprocess, patch_tokens
from pipeline.multimodal.vlm_data import read_vlm_data
from pipeline.multimodal.vlm_eval import answer


def question_type(question: str) -> str:
    first = question.split("\n")[0]
    return re.sub(r'"[^"]*"', '"…"', re.sub(r"\d+", "#", first))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("study", type=Path, help="the study's results directory (its data/vlm/)")
    ap.add_argument("model", type=Path, help="a stage-2 model saved in transformers' format")
    ap.add_argument("--min-items", type=int, default=8, help="question types with fewer items are left out")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = LlavaForConditionalGeneration.from_pretrained(args.model).eval()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    preprocess = Preprocess.load(args.study / VLM_TOWER)
    tokens = patch_tokens(model.config.vision_config)
    data = read_vlm_data(args.study / VLM_DATA, "stage2", VlmConfig(), benchmarks=True)
    print(
        f"{args.model}: accuracy per question type on held-out images "
        "(lmms-eval's exact match: case and punctuation ignored)"
    )
    print(f"{'benchmark':9s} {'question type':58s} {'items':>5s} {'model':>6s} {'majority':>8s}")
    for name, items in data.eval_sets.items():
        replies = answer(model, tokenizer, items, preprocess, model.config.image_token_id, tokens, 8, 32)
        right: dict[str, list[bool]] = defaultdict(list)
        truths: dict[str, Counter] = defaultdict(Counter)
        for item, reply in zip(items, replies, strict=True):
            kind = question_type(item.question)
            right[kind].append(exact_match(reply.strip(), item.answers[0]))
            truths[kind][item.answers[0].lower()] += 1
        for kind, hits in sorted(right.items(), key=lambda kv: -len(kv[1])):
            if len(hits) >= args.min_items:
                majority = truths[kind].most_common(1)[0][1] / len(hits)
                print(
                    f"{name:9s} {kind[:58]:58s} {len(hits):5d} {sum(hits) / len(hits):6.2f} {majority:8.2f}"
                )


if __name__ == "__main__":
    main()
