"""Scores of the five VLM benchmarks, as lmms-eval defines them, and the VLM score.

Every reply is stripped first (lmms-eval's `Task.process_results` strips each generation). Sources,
all in EvolvingLMMs-Lab/lmms-eval:

- MME (`lmms_eval/tasks/mme/utils.py`): the reply parsed to yes / no / other (`mme_parse`, "brought
  from Otter Eval"); per image (its two questions share a `question_id`) acc = mean x 100 and
  acc+ = 100 if both are right; a subtask's score is the mean over its images of acc + acc+
  (0-200); `mme_perception_score` sums the perception subtasks present (0-2000 for the full MME),
  `mme_cognition_score` every other subtask (0-800).
- GQA, AI2D (`lmms_eval/api/metrics.py` `exact_match_hf_evaluate` with ignore_case and
  ignore_punctuation): lower-cased, `string.punctuation` deleted, then equal; AI2D first takes the
  letter of a reply that starts with "<capital letter>." (`ai2d/utils.py` MultiChoiceRegexFilter).
- POPE (`pope/utils.py`): the reply lower-cased and stripped must equal "yes" or "no" exactly
  ("Yes." is neither); precision = TP / (TP + FP) and recall = TP / (TP + FN) count only replies
  that are exactly "yes" / "no", accuracy counts any other reply as wrong; `pope_yes_ratio` is the
  share of *ground-truth* yes (not of predicted yes, as LLaVA's `llava/eval/eval_pope.py` reports).
- TextVQA (`textvqa/utils.py`, `_task_utils/vqa_eval_metric.py`): EvalAI's answer normalisation of
  the reply and each reference (`textvqa_normalise`), then the VQA accuracy: the mean over the 10
  references of min(1, matches among the other 9 / 3).

Each function returns every raw number as {metric: value}; lmms-eval's names for the headline
(`exact_match` is prefixed by its benchmark, e.g. `gqa_exact_match`), "<metric>/<part>" per
subtask or POPE split, and `n_items`.
"""

from __future__ import annotations

import math
import re
import string
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pipeline.multimodal.benchmarks import MME_PERCEPTION, MME_SUBTASK_MAX, POPE_SPLITS, VLM_BENCHMARKS

if TYPE_CHECKING:
    from pipeline.multimodal.eval_data import EvalItem


class ScoringError(ValueError):
    """Replies that do not fit the items (count, MME pairs): names the benchmark."""


def _replies(name: str, items: Sequence[EvalItem], replies: Sequence[str | None]) -> list[str]:
    if len(items) != len(replies):
        raise ScoringError(f"{name}: {len(replies)} replies for {len(items)} items")
    return [(r or "").strip() for r in replies]


# --- MME ---------------------------------------------------------------------------------------


def mme_parse(reply: str) -> str:
    """yes | no | other: lower-cased, stripped, periods deleted; "yes"/"no" as they are, "y"/"n" alone;
    otherwise "yes" if the first 4 characters contain "yes", else "no" if they contain "no"."""
    text = reply.lower().strip().replace(".", "")
    if text in ("yes", "no"):
        return text
    if len(text) == 1:
        return {"y": "yes", "n": "no"}.get(text, "other")
    head = text[:4]
    if "yes" in head:
        return "yes"
    return "no" if "no" in head else "other"


def mme_scores(items: Sequence[EvalItem], replies: Sequence[str | None]) -> dict[str, float]:
    """MME: per subtask `mme_score/<s>` (acc + acc+), `mme_acc/<s>`, `mme_acc_plus/<s>` (means over
    images), the perception and cognition sums and how many subtasks each has."""
    replies = _replies("mme", items, replies)
    by_image: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for item, reply in zip(items, replies):
        gold = item.answers[0].lower().strip().replace(".", "")
        category, qid = item.fields["category"], item.fields["question_id"]
        by_image[category][qid].append(1.0 if mme_parse(reply) == gold else 0.0)
    out: dict[str, float] = {}
    perception = cognition = 0.0
    n_perception = n_cognition = 0
    for category in sorted(by_image):
        accs, pluses = [], []
        for qid, scores in by_image[category].items():
            if len(scores) != 2:
                raise ScoringError(
                    f"mme: image {qid!r} ({category}) has {len(scores)} questions; MME pairs two"
                )
            accs.append(sum(scores) / 2 * 100.0)
            pluses.append(100.0 if sum(scores) == 2 else 0.0)
        score = sum(a + p for a, p in zip(accs, pluses)) / len(accs)
        out[f"mme_score/{category}"] = score
        out[f"mme_acc/{category}"] = sum(accs) / len(accs)
        out[f"mme_acc_plus/{category}"] = sum(pluses) / len(pluses)
        if category in MME_PERCEPTION:
            perception, n_perception = perception + score, n_perception + 1
        else:
            cognition, n_cognition = cognition + score, n_cognition + 1
    out["mme_perception_score"] = perception if n_perception else math.nan
    out["mme_cognition_score"] = cognition if n_cognition else math.nan
    out["mme_perception_subtasks"] = float(n_perception)
    out["mme_cognition_subtasks"] = float(n_cognition)
    out["n_items"] = float(len(items))
    return out


# --- exact match: GQA, AI2D --------------------------------------------------------------------

_NO_PUNCTUATION = str.maketrans("", "", string.punctuation)
_AI2D_LETTER = re.compile(r"^\s*([A-Z])\.")


def match_key(text: str, ignore_case: bool = True, ignore_punctuation: bool = True) -> str:
    """What exact_match compares: lower-cased (ignore_case), `string.punctuation` deleted
    (ignore_punctuation); whitespace is kept."""
    if ignore_case:
        text = text.lower()
    return text.translate(_NO_PUNCTUATION) if ignore_punctuation else text


def exact_match(
    prediction: str, reference: str, ignore_case: bool = True, ignore_punctuation: bool = True
) -> bool:
    """lmms-eval's exact_match of one pair (`match_key` of both, then equal)."""
    return match_key(prediction, ignore_case, ignore_punctuation) == match_key(
        reference, ignore_case, ignore_punctuation
    )


def gqa_scores(items: Sequence[EvalItem], replies: Sequence[str | None]) -> dict[str, float]:
    """GQA: the mean exact match of the reply and the answer."""
    replies = _replies("gqa", items, replies)
    hits = [exact_match(r, item.answers[0]) for item, r in zip(items, replies)]
    return {"gqa_exact_match": sum(hits) / len(hits) if hits else math.nan, "n_items": float(len(items))}


def ai2d_letter(reply: str) -> str:
    """The MultiChoiceRegexFilter: the letter of a reply starting with "<A-Z>." (leading space allowed),
    else the reply unchanged."""
    m = _AI2D_LETTER.match(reply)
    return m.group(1) if m else reply


def ai2d_scores(items: Sequence[EvalItem], replies: Sequence[str | None]) -> dict[str, float]:
    """AI2D: the mean exact match of the filtered reply and the answer's letter."""
    if len(items) != len(replies):
        raise ScoringError(f"ai2d: {len(replies)} replies for {len(items)} items")
    filtered = [ai2d_letter(r or "").strip() for r in replies]  # the filter sees the raw reply
    hits = [exact_match(r, item.answers[0]) for item, r in zip(items, filtered)]
    return {"ai2d_exact_match": sum(hits) / len(hits) if hits else math.nan, "n_items": float(len(items))}


# --- POPE --------------------------------------------------------------------------------------


def pope_counts(golds: Sequence[str], replies: Sequence[str]) -> dict[str, float]:
    """accuracy, precision, recall, f1_score and yes_ratio of (gold, reply) pairs, as pope/utils.py."""
    preds = [r.lower().strip() for r in replies]
    golds = [g.lower().strip() for g in golds]
    tp = sum(g == "yes" and p == "yes" for g, p in zip(golds, preds))
    fp = sum(g == "no" and p == "yes" for g, p in zip(golds, preds))
    fn = sum(g == "yes" and p == "no" for g, p in zip(golds, preds))
    n = len(golds)
    accuracy = sum(g == p for g, p in zip(golds, preds)) / n if n else math.nan
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    yes, no = golds.count("yes"), golds.count("no")
    return {
        "pope_accuracy": accuracy,
        "pope_precision": precision,
        "pope_recall": recall,
        "pope_f1_score": f1,
        "pope_yes_ratio": yes / (yes + no) if yes + no else 0.0,
    }


def pope_scores(items: Sequence[EvalItem], replies: Sequence[str | None]) -> dict[str, float]:
    """POPE: the metrics over all items (lmms-eval's `pope` task), per split (`<metric>/<split>`, the
    `pope_adv` / `pope_pop` / `pope_random` tasks), and `pope_f1_mean`, F1 averaged over the splits
    present (LLaVA-1.5's POPE number)."""
    replies = _replies("pope", items, replies)
    golds = [item.answers[0] for item in items]
    out = pope_counts(golds, replies)
    f1s = []
    for split in POPE_SPLITS:
        idx = [i for i, item in enumerate(items) if item.fields.get("category") == split]
        if not idx:
            continue
        part = pope_counts([golds[i] for i in idx], [replies[i] for i in idx])
        out.update({f"{k}/{split}": v for k, v in part.items()})
        f1s.append(part["pope_f1_score"])
    out["pope_f1_mean"] = sum(f1s) / len(f1s) if f1s else out["pope_f1_score"]
    out["n_items"] = float(len(items))
    return out


# --- TextVQA -----------------------------------------------------------------------------------

# EvalAI's answer processor (lmms_eval/tasks/_task_utils/vqa_eval_metric.py, from facebookresearch/mmf
# and the VQA evaluation code): contractions without their apostrophes -> the written form.
_CONTRACTIONS_BY_FORM: dict[str, tuple[str, ...]] = {
    "ain't": ("aint",),
    "aren't": ("arent",),
    "can't": ("cant",),
    "could've": ("couldve",),
    "couldn't": ("couldnt",),
    "couldn't've": ("couldn'tve", "couldnt've"),
    "didn't": ("didnt",),
    "doesn't": ("doesnt",),
    "don't": ("dont",),
    "hadn't": ("hadnt",),
    "hadn't've": ("hadnt've", "hadn'tve"),
    "hasn't": ("hasnt",),
    "haven't": ("havent",),
    "he'd": ("hed",),
    "he'd've": ("hed've", "he'dve"),
    "he's": ("hes",),
    "how'd": ("howd",),
    "how'll": ("howll",),
    "how's": ("hows",),
    "I'd've": ("Id've", "I'dve"),  # capitalised keys never match: the text is lower-cased first
    "I'm": ("Im",),
    "I've": ("Ive",),
    "isn't": ("isnt",),
    "it'd": ("itd",),
    "it'd've": ("itd've", "it'dve"),
    "it'll": ("itll",),
    "let's": ("let's",),
    "ma'am": ("maam",),
    "mightn't": ("mightnt",),
    "mightn't've": ("mightnt've", "mightn'tve"),
    "might've": ("mightve",),
    "mustn't": ("mustnt",),
    "must've": ("mustve",),
    "needn't": ("neednt",),
    "not've": ("notve",),
    "o'clock": ("oclock",),
    "oughtn't": ("oughtnt",),
    "'ow's'at": ("ow's'at", "'ows'at", "'ow'sat"),
    "shan't": ("shant",),
    "she'd've": ("shed've", "she'dve"),
    "she's": ("she's",),
    "should've": ("shouldve",),
    "shouldn't": ("shouldnt",),
    "shouldn't've": ("shouldnt've", "shouldn'tve"),
    "somebodyd": ("somebody'd",),  # sic: the processor maps this one the other way
    "somebody'd've": ("somebodyd've", "somebody'dve"),
    "somebody'll": ("somebodyll",),
    "somebody's": ("somebodys",),
    "someone'd": ("someoned",),
    "someone'd've": ("someoned've", "someone'dve"),
    "someone'll": ("someonell",),
    "someone's": ("someones",),
    "something'd": ("somethingd",),
    "something'd've": ("somethingd've", "something'dve"),
    "something'll": ("somethingll",),
    "that's": ("thats",),
    "there'd": ("thered",),
    "there'd've": ("thered've", "there'dve"),
    "there're": ("therere",),
    "there's": ("theres",),
    "they'd": ("theyd",),
    "they'd've": ("theyd've", "they'dve"),
    "they'll": ("theyll",),
    "they're": ("theyre",),
    "they've": ("theyve",),
    "'twas": ("twas",),
    "wasn't": ("wasnt",),
    "we'd've": ("wed've", "we'dve"),
    "we've": ("weve",),
    "weren't": ("werent",),
    "what'll": ("whatll",),
    "what're": ("whatre",),
    "what's": ("whats",),
    "what've": ("whatve",),
    "when's": ("whens",),
    "where'd": ("whered",),
    "where's": ("wheres",),
    "where've": ("whereve",),
    "who'd": ("whod",),
    "who'd've": ("whod've", "who'dve"),
    "who'll": ("wholl",),
    "who's": ("whos",),
    "who've": ("whove",),
    "why'll": ("whyll",),
    "why're": ("whyre",),
    "why's": ("whys",),
    "won't": ("wont",),
    "would've": ("wouldve",),
    "wouldn't": ("wouldnt",),
    "wouldn't've": ("wouldnt've", "wouldn'tve"),
    "y'all": ("yall",),
    "y'all'll": ("yall'll", "y'allll"),
    "y'all'd've": ("yall'd've", "y'alld've", "y'all'dve"),
    "you'd": ("youd",),
    "you'd've": ("youd've", "you'dve"),
    "you'll": ("youll",),
    "you're": ("youre",),
    "you've": ("youve",),
}
CONTRACTIONS: dict[str, str] = {v: form for form, variants in _CONTRACTIONS_BY_FORM.items() for v in variants}
NUMBER_WORDS = {
    "none": "0",
    "zero": "0",
    "one": "1",
    "two": "2",
    "three": "3",
    "four": "4",
    "five": "5",
    "six": "6",
    "seven": "7",
    "eight": "8",
    "nine": "9",
    "ten": "10",
}
ARTICLES = ("a", "an", "the")
_PUNCTUATIONS = (
    ";",
    "/",
    "[",
    "]",
    '"',
    "{",
    "}",
    "(",
    ")",
    "=",
    "+",
    "\\",
    "_",
    "-",
    ">",
    "<",
    "@",
    "`",
    ",",
    "?",
    "!",
)
# sic: "(?!<=\d)" is a lookahead that never fails here, so a period is deleted unless a digit follows;
# the processor passes re.UNICODE (32) where `sub` takes its count, so at most 32 periods go
_PERIOD_STRIP = re.compile(r"(?!<=\d)(\.)(?!\d)")
_PERIOD_COUNT = int(re.UNICODE)
_COMMA_STRIP = re.compile(r"(?<=\d)(\,)+(?=\d)")


def _punctuation(text: str) -> str:
    out = text
    for p in _PUNCTUATIONS:
        if (p + " " in text or " " + p in text) or _COMMA_STRIP.search(text) is not None:
            out = out.replace(p, "")
        else:
            out = out.replace(p, " ")
    return _PERIOD_STRIP.sub("", out, count=_PERIOD_COUNT)


def _digits_articles(text: str) -> str:
    words = [NUMBER_WORDS.get(w, w) for w in text.lower().split()]
    words = [CONTRACTIONS.get(w, w) for w in words if w not in ARTICLES]
    return " ".join(words)


def textvqa_normalise(text: str) -> str:
    """EvalAI's answer processing: lower-case, "," and "?" deleted and "'s" split off, newlines and
    tabs to spaces, punctuation deleted or spaced, periods deleted unless before a digit, number words
    to digits, articles dropped, contractions given their apostrophes."""
    text = text.lower().replace(",", "").replace("?", "").replace("'s", " 's").strip()
    text = text.replace("\n", " ").replace("\t", " ").strip()
    return _digits_articles(_punctuation(text))


def vqa_accuracy(reply: str, answers: Sequence[str]) -> float:
    """The VQA accuracy of one reply: for each reference, min(1, matches among the other references / 3),
    averaged (after `textvqa_normalise` of the reply and the references)."""
    if not answers:
        raise ScoringError("textvqa: an item has no reference answers")
    pred = textvqa_normalise(reply)
    refs = [textvqa_normalise(a) for a in answers]
    accs = [min(1.0, sum(r == pred for j, r in enumerate(refs) if j != i) / 3) for i in range(len(refs))]
    return sum(accs) / len(accs)


def textvqa_scores(items: Sequence[EvalItem], replies: Sequence[str | None]) -> dict[str, float]:
    """TextVQA: the mean VQA accuracy (lmms-eval's `exact_match` of textvqa_val)."""
    replies = _replies("textvqa", items, replies)
    accs = [vqa_accuracy(r, item.answers) for item, r in zip(items, replies)]
    return {"textvqa_exact_match": sum(accs) / len(accs) if accs else math.nan, "n_items": float(len(items))}


# --- all five and the VLM score ----------------------------------------------------------------

SCORERS = {
    "mme": mme_scores,
    "gqa": gqa_scores,
    "ai2d": ai2d_scores,
    "pope": pope_scores,
    "textvqa": textvqa_scores,
}


def score(name: str, items: Sequence[EvalItem], replies: Sequence[str | None]) -> dict[str, float]:
    """The raw numbers of benchmark `name` for the replies to its items (in order)."""
    if name not in SCORERS:
        raise ScoringError(f"unknown VLM benchmark {name!r}; expected one of {', '.join(SCORERS)}")
    return SCORERS[name](items, replies)


def vlm_parts(scores: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Each benchmark's part of the VLM score, on 0-100 (benchmarks.VLM_SCORE_PARTS): MME perception
    over 200 per perception subtask present, POPE's F1 averaged over its splits, the rest x 100."""
    missing = [b for b in VLM_BENCHMARKS if b not in scores]
    if missing:
        raise ScoringError(f"the VLM score needs all of {VLM_BENCHMARKS}; missing {missing}")
    mme = scores["mme"]
    return {
        "mme": mme["mme_perception_score"] / (MME_SUBTASK_MAX * mme["mme_perception_subtasks"]) * 100.0,
        "gqa": scores["gqa"]["gqa_exact_match"] * 100.0,
        "ai2d": scores["ai2d"]["ai2d_exact_match"] * 100.0,
        "pope": scores["pope"]["pope_f1_mean"] * 100.0,
        "textvqa": scores["textvqa"]["textvqa_exact_match"] * 100.0,
    }


def vlm_score(scores: Mapping[str, Mapping[str, float]]) -> float:
    """The VLM score: the mean of the five parts (`vlm_parts`). The paper says only "an average"; the
    normalisation is LLaVA-1.5's convention (docs/multimodal-data.md)."""
    parts = vlm_parts(scores)
    return sum(parts.values()) / len(parts)
