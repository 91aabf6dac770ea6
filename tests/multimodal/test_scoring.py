"""The five benchmarks' scores (pipeline.multimodal.scoring) on hand-computed cases, lmms-eval's
definitions; and the VLM score."""

from __future__ import annotations

import math

import pytest

from pipeline.multimodal.eval_data import EvalItem
from pipeline.multimodal.scoring import (
    ScoringError,
    ai2d_letter,
    ai2d_scores,
    exact_match,
    gqa_scores,
    mme_parse,
    mme_scores,
    pope_scores,
    score,
    textvqa_normalise,
    textvqa_scores,
    vlm_parts,
    vlm_score,
    vqa_accuracy,
)


def item(name: str, answers: tuple[str, ...], **fields: str) -> EvalItem:
    return EvalItem(name, "0", b"", "q", "q", answers, fields)


@pytest.mark.parametrize(
    ("reply", "label"),
    [
        ("yes", "yes"),
        ("Yes.", "yes"),  # periods deleted before the test
        ("NO", "no"),
        ("y", "yes"),
        ("N.", "no"),
        ("x", "other"),
        ("Yes, there is", "yes"),  # "yes" within the first 4 characters
        ("nope", "no"),
        ("Not at all", "no"),
        ("The answer is yes", "other"),  # "the " holds neither
        ("", "other"),
    ],
)
def test_mme_parse(reply, label):
    assert mme_parse(reply) == label


def test_mme_scores_per_image_acc_and_acc_plus():
    def pair(category: str, qid: str) -> list[EvalItem]:
        return [
            item("mme", ("Yes",), category=category, question_id=qid),
            item("mme", ("No",), category=category, question_id=qid),
        ]

    items = (
        pair("existence", "a")
        + pair("existence", "b")
        + pair("count", "c")
        + pair("numerical_calculation", "d")
    )
    replies = ["Yes", "No", "Yes", "Yes", "No", "Yes", "Yes.", "maybe"]
    out = mme_scores(items, replies)
    # existence: image a both right (100 + 100), image b one right (50 + 0): mean 125
    assert out["mme_score/existence"] == 125.0
    assert out["mme_acc/existence"] == 75.0 and out["mme_acc_plus/existence"] == 50.0
    assert out["mme_score/count"] == 0.0  # both wrong
    assert out["mme_score/numerical_calculation"] == 50.0  # "Yes." parses to yes; "maybe" is other
    assert out["mme_perception_score"] == 125.0 and out["mme_perception_subtasks"] == 2
    assert out["mme_cognition_score"] == 50.0 and out["mme_cognition_subtasks"] == 1
    with pytest.raises(ScoringError, match="image 'a' \\(existence\\) has 3 questions"):
        mme_scores([*items, item("mme", ("Yes",), category="existence", question_id="a")], [*replies, "yes"])


def test_mme_without_cognition_reports_nan():
    items = [
        item("mme", ("Yes",), category="OCR", question_id="x"),
        item("mme", ("No",), category="OCR", question_id="x"),
    ]
    out = mme_scores(items, ["yes", "no"])
    assert out["mme_perception_score"] == 200.0 and math.isnan(out["mme_cognition_score"])


def test_pope_exact_yes_no_and_its_counts():
    golds = ("yes", "yes", "no", "no", "yes")
    items = [item("pope", (g,), category="random") for g in golds]
    replies = ["Yes", "yes.", "no", "Yes", "No"]
    out = pope_scores(items, replies)
    # "yes." is neither yes nor no: wrong for accuracy, absent from precision and recall
    assert out["pope_accuracy"] == pytest.approx(2 / 5)
    assert out["pope_precision"] == pytest.approx(1 / 2)  # TP 1 (item 1), FP 1 (item 4)
    assert out["pope_recall"] == pytest.approx(1 / 2)  # TP 1, FN 1 (item 5)
    assert out["pope_f1_score"] == pytest.approx(1 / 2)
    assert out["pope_yes_ratio"] == pytest.approx(3 / 5)  # of the ground truth, not of the replies
    assert out["pope_f1_score/random"] == out["pope_f1_score"] and out["pope_f1_mean"] == out["pope_f1_score"]
    # MME's parser would take "yes." as yes
    assert mme_parse("yes.") == "yes"


def test_pope_splits_and_their_mean_f1():
    items = [item("pope", (g,), category=c) for c in ("adversarial", "popular") for g in ("yes", "no")]
    out = pope_scores(items, ["yes", "yes", "yes", "no"])
    assert out["pope_f1_score/adversarial"] == pytest.approx(2 / 3)  # precision 1/2, recall 1
    assert out["pope_f1_score/popular"] == pytest.approx(1.0)
    assert out["pope_f1_mean"] == pytest.approx((2 / 3 + 1) / 2)
    assert out["pope_precision"] == pytest.approx(2 / 3)  # over all four: TP 2, FP 1
    assert "pope_f1_score/random" not in out


@pytest.mark.parametrize(
    ("prediction", "reference", "equal"),
    [
        ("Yes.", "yes", True),
        ("LEFT", "left", True),
        ("the cat", "cat", False),  # no article removal
        ("food & drink", "Food & Drink", True),
        ("food and drink", "food & drink", False),
        ("red ", "red", False),  # whitespace is kept (replies are stripped before)
    ],
)
def test_exact_match(prediction, reference, equal):
    assert exact_match(prediction, reference) is equal


def test_gqa_strips_replies():
    items = [item("gqa", ("left",)), item("gqa", ("3",)), item("gqa", ("yes",))]
    assert gqa_scores(items, [" Left\n", "three", "Yes."])["gqa_exact_match"] == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    ("reply", "right"),
    [
        ("B", True),
        ("B.", True),
        ("b", True),  # case ignored
        ("b.", True),  # not the filter's "[A-Z]." but punctuation is deleted
        (" B. a dog", True),  # the filter takes the letter
        ("(B)", True),
        ("B dog", False),
        ("The answer is B.", False),
        ("A.", False),
    ],
)
def test_ai2d_letter_match(reply, right):
    assert ai2d_scores([item("ai2d", ("B",))], [reply])["ai2d_exact_match"] == float(right)


def test_ai2d_filter():
    assert ai2d_letter(" C. blue") == "C" and ai2d_letter("c. blue") == "c. blue"


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("The Cat.", "cat"),
        ("two dogs", "2 dogs"),
        ("None", "0"),
        ("an apple", "apple"),
        ("dont", "don't"),
        ("Don't", "don't"),
        ("3.5", "3.5"),  # a period before a digit stays
        ("U.S.A.", "usa"),
        ("coca-cola", "coca cola"),  # "-" between words becomes a space
        ("coca - cola", "coca cola"),  # ... and is deleted when spaced
        ("what's", "what 's"),
        ("Hello, world?", "hello world"),
        ("\tyes\n", "yes"),
    ],
)
def test_textvqa_normalise(text, normalised):
    assert textvqa_normalise(text) == normalised


def test_vqa_accuracy_over_ten_leave_one_out_subsets():
    refs = ["cat"] * 3 + ["dog"] * 7
    # a "cat" reference sees 2 other cats (2/3), a "dog" reference sees 3 (1): (3 * 2/3 + 7) / 10
    assert vqa_accuracy("cat", refs) == pytest.approx(0.9)
    assert vqa_accuracy("The dog.", refs) == pytest.approx(1.0)
    assert vqa_accuracy("bird", refs) == 0.0
    # one "cat" among ten: that reference sees none, the nine others one each (1/3)
    assert vqa_accuracy("cat", ["cat"] + ["dog"] * 9) == pytest.approx(0.3)
    items = [item("textvqa", tuple(refs)), item("textvqa", ("two",) * 10)]
    assert textvqa_scores(items, ["cat", "2"])["textvqa_exact_match"] == pytest.approx((0.9 + 1.0) / 2)
    with pytest.raises(ScoringError, match="no reference answers"):
        vqa_accuracy("x", [])


def test_vlm_score_normalises_each_part():
    scores = {
        "mme": {"mme_perception_score": 1000.0, "mme_perception_subtasks": 10.0},
        "gqa": {"gqa_exact_match": 0.6},
        "ai2d": {"ai2d_exact_match": 0.7},
        "pope": {"pope_f1_mean": 0.8},
        "textvqa": {"textvqa_exact_match": 0.5},
    }
    assert vlm_parts(scores) == pytest.approx(
        {"mme": 50.0, "gqa": 60.0, "ai2d": 70.0, "pope": 80.0, "textvqa": 50.0}
    )
    assert vlm_score(scores) == pytest.approx(62.0)
    # a toy MME with 5 perception subtasks: 750 of 1000
    toy = scores | {"mme": {"mme_perception_score": 750.0, "mme_perception_subtasks": 5.0}}
    assert vlm_parts(toy)["mme"] == pytest.approx(75.0)
    with pytest.raises(ScoringError, match="missing \\['textvqa'\\]"):
        vlm_score({k: v for k, v in scores.items() if k != "textvqa"})


def test_score_checks_the_benchmark_and_the_reply_count():
    with pytest.raises(ScoringError, match="unknown VLM benchmark 'vqav2'"):
        score("vqav2", [], [])
    with pytest.raises(ScoringError, match="gqa: 0 replies for 1 items"):
        score("gqa", [item("gqa", ("x",))], [])
    assert score("gqa", [item("gqa", ("x",))], [None])["gqa_exact_match"] == 0.0
