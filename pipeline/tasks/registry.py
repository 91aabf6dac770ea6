"""The kinds of fine-tuning task, declared once: a job's task record names its kind (`SPECS`), and
opens as the task it describes. Adding a kind is its implementation with its record, its entry here
and its tests; the training code (pipeline/train/) sees only `FinetuneTask`."""

from __future__ import annotations

from pipeline.tasks.llava import LlavaTaskSpec
from pipeline.tasks.text import TextTaskSpec

TaskSpec = TextTaskSpec | LlavaTaskSpec
SPECS: dict[str, type] = {"text": TextTaskSpec, "llava": LlavaTaskSpec}  # a record's `kind` -> its type


def task_record(params: dict, config: dict) -> TaskSpec:
    """A job's task record from its rule's `params.task` (with its `kind`) and the study's config."""
    return SPECS[params["kind"]].record(params, config)
