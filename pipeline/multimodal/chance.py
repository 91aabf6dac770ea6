"""Chance levels of the VLM benchmarks and of the VLM score: what a model that ignores the image gets.

Two blind guessers, each scored with the benchmarks' own definitions (pipeline/multimodal/scoring.py):

- uniform: the expected score of a uniform guess among the answers a question admits: yes / no (MME,
  POPE), the options' letters (AI2D), the answers of its question template in the set (GQA: the
  distinct answers of items of the same template, by exact-match normalisation), every reference in
  the set (TextVQA). Computed in closed form (MME: acc 50 and acc+ 25 per image, 75 per subtask;
  POPE: accuracy and recall 1/2, precision the share of yes, F1 from those two);
- majority: the most common gold answer of each question template, given as every reply and scored
  (MME, POPE: per subtask / split, where yes and no tie: "always yes", which gives POPE's balanced
  splits F1 2/3 and MME acc 50, acc+ 0); ties go to "yes", then to the first in sorted order;
- best: per benchmark the better of the two parts, and their mean: the bar a VLM score must clear.

`templates` names each item's template (the toy builder knows them); without it, an MME / POPE item's
template is its subtask / split and every other item of a set shares one.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pipeline.multimodal.benchmarks import MME_PERCEPTION, POPE_SPLITS
from pipeline.multimodal.scoring import SCORERS, match_key, textvqa_normalise, vlm_parts, vlm_score

if TYPE_CHECKING:
    from pipeline.multimodal.eval_data import EvalItem


def _templates(name: str, items: Sequence[EvalItem], given: Sequence[str] | None) -> list[str]:
    if given is not None:
        if len(given) != len(items):
            raise ValueError(f"{name}: {len(given)} templates for {len(items)} items")
        return list(given)
    if name in ("mme", "pope"):
        return [item.fields.get("category", "") for item in items]
    return [""] * len(items)


def _uniform(name: str, items: Sequence[EvalItem], templates: list[str]) -> dict[str, float]:
    n = float(len(items))
    if name == "mme":
        categories = sorted({item.fields["category"] for item in items})
        out = {f"mme_score/{c}": 75.0 for c in categories}
        out |= {f"mme_acc/{c}": 50.0 for c in categories} | {f"mme_acc_plus/{c}": 25.0 for c in categories}
        n_p = sum(c in MME_PERCEPTION for c in categories)
        n_c = len(categories) - n_p
        return out | {
            "mme_perception_score": 75.0 * n_p if n_p else math.nan,
            "mme_cognition_score": 75.0 * n_c if n_c else math.nan,
            "mme_perception_subtasks": float(n_p),
            "mme_cognition_subtasks": float(n_c),
            "n_items": n,
        }
    if name == "pope":

        def guess(golds: list[str]) -> dict[str, float]:
            yes = sum(g.lower().strip() == "yes" for g in golds) / len(golds)
            f1 = 2 * yes * 0.5 / (yes + 0.5) if yes else 0.0
            return {
                "pope_accuracy": 0.5,
                "pope_precision": yes,
                "pope_recall": 0.5 if yes else 0.0,
                "pope_f1_score": f1,
                "pope_yes_ratio": yes,
            }

        out = guess([item.answers[0] for item in items])
        f1s = []
        for split in POPE_SPLITS:
            part = [item.answers[0] for item in items if item.fields.get("category") == split]
            if part:
                g = guess(part)
                out |= {f"{k}/{split}": v for k, v in g.items()}
                f1s.append(g["pope_f1_score"])
        return out | {"pope_f1_mean": sum(f1s) / len(f1s) if f1s else out["pope_f1_score"], "n_items": n}
    if name == "ai2d":
        p = [1.0 / len(item.fields["options"].split("\n")) for item in items]
        return {"ai2d_exact_match": sum(p) / n, "n_items": n}
    if name == "gqa":
        admits: dict[str, set[str]] = defaultdict(set)
        for item, t in zip(items, templates):
            admits[t].add(match_key(item.answers[0]))
        p = [1.0 / len(admits[t]) for t in templates]
        return {"gqa_exact_match": sum(p) / n, "n_items": n}
    # textvqa: a uniform guess among every normalised reference of the set; a guess scores only if it
    # is one of the item's own references: min(1, matches among the other 9 / 3) averaged
    vocab = {textvqa_normalise(a) for item in items for a in item.answers}
    total = 0.0
    for item in items:
        refs = [textvqa_normalise(a) for a in item.answers]
        for v in set(refs):
            total += sum(min(1.0, (refs.count(v) - (r == v)) / 3) for r in refs) / len(refs)
    return {"textvqa_exact_match": total / len(vocab) / n, "n_items": n}


def _majority(name: str, items: Sequence[EvalItem], templates: list[str]) -> dict[str, float]:
    counts: dict[str, Counter] = defaultdict(Counter)
    for item, t in zip(items, templates):
        counts[t][item.answers[0]] += 1
    # the most common answer; ties to "yes" (POPE's F1 favours it), then to the first in sorted order
    best = {
        t: sorted(c.items(), key=lambda kv: (-kv[1], kv[0].lower().strip() != "yes", kv[0]))[0][0]
        for t, c in counts.items()
    }
    return SCORERS[name](items, [best[t] for t in templates])


def chance_levels(
    sets: Mapping[str, Sequence[EvalItem]], templates: Mapping[str, Sequence[str]] | None = None
) -> dict[str, dict]:
    """{"uniform" | "majority": {benchmark: raw numbers, "vlm_parts": ..., "vlm_score": ...}} for the
    given sets, and with all five sets {"best": {"vlm_parts": the better part, "vlm_score": their mean}}."""
    out: dict[str, dict] = {}
    for guesser, fn in (("uniform", _uniform), ("majority", _majority)):
        res: dict = {}
        for name, items in sets.items():
            res[name] = fn(name, items, _templates(name, items, (templates or {}).get(name)))
        if set(SCORERS) <= set(sets):
            res["vlm_parts"] = vlm_parts(res)
            res["vlm_score"] = vlm_score(res)
        out[guesser] = res
    if "vlm_parts" in out["uniform"]:
        parts = {b: max(out["uniform"]["vlm_parts"][b], out["majority"]["vlm_parts"][b]) for b in SCORERS}
        out["best"] = {"vlm_parts": parts, "vlm_score": sum(parts.values()) / len(parts)}
    return out
