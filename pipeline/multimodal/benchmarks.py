"""The five VLM benchmarks of the paper's VLM score (MME, GQA, AI2D, POPE, TextVQA): one record each,
as lmms-eval (EvolvingLMMs-Lab/lmms-eval, `lmms_eval/tasks/<name>/`) defines them.

Light (no torch / pandas / PIL at import): the workflow reads it at parse time. Reading a set from
local files and building its prompts is pipeline/multimodal/eval_data.py, scoring
pipeline/multimodal/scoring.py; docs/multimodal-data.md has the details and what differs from
LLaVA's own evaluation scripts (haotian-liu/LLaVA `llava/eval/`).

Hub ids: the lmms-lab datasets (`lmms-lab/MME`, ...). lmms-eval moved its task YAMLs to copies under
`lmms-lab-encoder/` (commit 4be7ee0, "migrate dataset paths to new orgs", July 2026); the records
keep the lmms-lab ids and name the copy in `lmms_eval_path`. Either downloads to the same schema.
"""

from __future__ import annotations

from dataclasses import dataclass

SHORT_ANSWER = "\nAnswer the question using a single word or phrase."  # lmms-eval's default post_prompt
LETTER_ANSWER = "\nAnswer with the option's letter from the given choices directly."  # AI2D's (mcq)
MME_REPLACED = " Please answer yes or no."  # removed from MME questions before the post_prompt

# lmms-eval's lmms_eval/tasks/mme/utils.py eval_type_dict
MME_PERCEPTION = (
    "existence",
    "count",
    "position",
    "color",
    "posters",
    "celebrity",
    "scene",
    "landmark",
    "artwork",
    "OCR",
)
MME_COGNITION = ("commonsense_reasoning", "numerical_calculation", "text_translation", "code_reasoning")
MME_SUBTASK_MAX = 200.0  # acc + acc+ of one subtask, each at most 100
POPE_SPLITS = ("adversarial", "popular", "random")  # POPE's `category` column / its Full config's splits


class VlmBenchmarkError(ValueError):
    """An unknown benchmark name or a bad benchmark file: names it and what was expected."""


@dataclass(frozen=True)
class VlmBenchmark:
    """One benchmark: where its data is on the hub, the columns read, the prompt and generation lmms-eval
    uses by default (`lmms_eval_specific_kwargs.default`, `generation_kwargs`), and its metrics."""

    name: str  # our key: mme | gqa | ai2d | pope | textvqa
    hub_path: str  # the lmms-lab dataset
    hub_name: str | None  # its config (None: default)
    split: str  # the split lmms-eval evaluates (`test_split`)
    columns: tuple[str, ...]  # the columns read (the reader checks them)
    post_prompt: str  # appended to the question (doc_to_text)
    max_new_tokens: int | None  # generation_kwargs.max_new_tokens; None: the YAML sets none
    metrics: tuple[str, ...]  # lmms-eval's metric names
    items: int  # questions in the published split
    lmms_eval_task: str  # the lmms-eval task
    lmms_eval_yaml: str  # its config under lmms_eval/tasks/
    lmms_eval_path: str  # the dataset_path of the current lmms-eval YAML
    images_name: str | None = None  # GQA: the config holding the images, joined on imageId == id
    stop: tuple[str, ...] = ()  # generation_kwargs.until (besides the end of sequence)


BENCHMARKS: dict[str, VlmBenchmark] = {
    b.name: b
    for b in (
        VlmBenchmark(
            "mme",
            hub_path="lmms-lab/MME",
            hub_name=None,
            split="test",
            columns=("question_id", "image", "question", "answer", "category"),
            post_prompt=SHORT_ANSWER,
            max_new_tokens=16,
            metrics=("mme_perception_score", "mme_cognition_score"),
            items=2374,
            lmms_eval_task="mme",
            lmms_eval_yaml="mme/mme.yaml",
            lmms_eval_path="lmms-lab-encoder/MME",
        ),
        VlmBenchmark(
            "gqa",
            hub_path="lmms-lab/GQA",
            hub_name="testdev_balanced_instructions",
            split="testdev",
            columns=("id", "imageId", "question", "answer"),
            post_prompt=SHORT_ANSWER,
            max_new_tokens=16,
            metrics=("exact_match",),
            items=12578,
            lmms_eval_task="gqa",
            lmms_eval_yaml="gqa/gqa.yaml",
            lmms_eval_path="lmms-lab-encoder/GQA",
            images_name="testdev_balanced_images",
        ),
        VlmBenchmark(
            "ai2d",
            hub_path="lmms-lab/ai2d",
            hub_name=None,
            split="test",
            columns=("question", "options", "answer", "image"),
            post_prompt=LETTER_ANSWER,
            max_new_tokens=16,
            metrics=("exact_match",),
            items=3088,
            lmms_eval_task="ai2d",
            lmms_eval_yaml="ai2d/ai2d.yaml",
            lmms_eval_path="lmms-lab-encoder/ai2d",
        ),
        VlmBenchmark(
            "pope",
            hub_path="lmms-lab/POPE",
            hub_name=None,
            split="test",
            columns=("question_id", "question", "answer", "image", "category"),
            post_prompt=SHORT_ANSWER,
            max_new_tokens=128,
            metrics=("pope_accuracy", "pope_precision", "pope_recall", "pope_f1_score", "pope_yes_ratio"),
            items=9000,
            lmms_eval_task="pope",
            lmms_eval_yaml="pope/pope.yaml",
            lmms_eval_path="lmms-lab-encoder/POPE",
        ),
        # no max_new_tokens in the YAML: the model's default applies (lmms-eval's llava_hf: 1024;
        # LLaVA's own llava/eval/model_vqa_loader.py: 128); it stops at "ASSISTANT:" or end of sequence
        VlmBenchmark(
            "textvqa",
            hub_path="lmms-lab/textvqa",
            hub_name=None,
            split="validation",
            columns=("question_id", "image_id", "question", "answers", "image"),
            post_prompt=SHORT_ANSWER,
            max_new_tokens=None,
            metrics=("exact_match",),
            items=5000,
            lmms_eval_task="textvqa_val",
            lmms_eval_yaml="textvqa/textvqa_val.yaml",
            lmms_eval_path="lmms-lab-encoder/textvqa",
            stop=("ASSISTANT:",),
        ),
    )
}
VLM_BENCHMARKS: tuple[str, ...] = tuple(BENCHMARKS)

# The VLM score (the paper: "an average of" the five; docs/multimodal-data.md): each benchmark's
# headline on a 0-100 scale, then their mean. A choice the paper does not state, LLaVA-1.5's own
# conventions: MME's perception score over its maximum (200 per perception subtask present: 2000
# for the full MME), POPE's F1 averaged over its three splits, the rest as percentages.
VLM_SCORE_PARTS: dict[str, str] = {
    "mme": "mme_perception_score / (200 x perception subtasks) x 100",
    "gqa": "exact_match x 100",
    "ai2d": "exact_match x 100",
    "pope": "mean over adversarial / popular / random of pope_f1_score x 100",
    "textvqa": "exact_match (VQA accuracy) x 100",
}


def benchmark(name: str) -> VlmBenchmark:
    """The record of a benchmark; VlmBenchmarkError naming the known ones."""
    if name not in BENCHMARKS:
        raise VlmBenchmarkError(f"unknown VLM benchmark {name!r}; expected one of {', '.join(BENCHMARKS)}")
    return BENCHMARKS[name]


def max_new_tokens(name: str, fallback: int) -> int:
    """The generation length of a benchmark: lmms-eval's, or `fallback` where its YAML sets none."""
    n = benchmark(name).max_new_tokens
    return fallback if n is None else n
