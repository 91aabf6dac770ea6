"""One judge job: every model of a (checkpoint, task) -- each fine-tuning run, and the checkpoint
before fine-tuning -- judged against the reference run on the instruction set; its annotations
and its metric rows (eval_data `alpaca_eval`, split `eval`; values are fractions). The workflow's
stage is rules/alpaca_eval.smk, named for the metric; this package is named for the judge."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from pipeline.judge import winrate
from pipeline.judge.annotate import Lazy, annotate, judge_identity
from pipeline.judge.backends import check_endpoint, hf_local_backend, load_judge_model, openai_backend
from pipeline.judge.config import EVAL_DATA, EVAL_SPLIT, JudgeConfig
from pipeline.tables import METRIC_COLUMNS, metric_row

log = logging.getLogger(__name__)

IDENTITY = [
    c for c in METRIC_COLUMNS if c not in ("extra", "eval_data", "split", "metric", "value", "diverged")
]


def pairs_against(reference: pd.DataFrame, model: pd.DataFrame) -> pd.DataFrame:
    """Per instruction: output_1 the reference's response, output_2 the model's, with the model's
    identity; both tables must answer the same instructions."""
    if set(reference["index"]) != set(model["index"]):
        raise ValueError(
            f"{model['generator'].iloc[0]!r} and the reference answered different instructions: "
            "regenerate both from the same instruction set"
        )
    ref = reference.set_index("index")[["output", "generator"]].rename(
        columns={"output": "output_1", "generator": "generator_1"}
    )
    pairs = model.rename(columns={"output": "output_2", "generator": "generator_2"}).join(ref, on="index")
    return pairs


def judge_backend(cfg: JudgeConfig, evaluator: dict, device: str):
    """The completion function of the configured backend (an unreachable endpoint fails here,
    before any annotation)."""
    if cfg.backend == "openai":
        check_endpoint(cfg)
        return openai_backend(cfg, evaluator)
    model, tokenizer = load_judge_model(cfg, device)
    return hf_local_backend(cfg, evaluator, model, tokenizer)


def judge_models(
    reference: str | Path,
    models: Sequence[str | Path],
    params: dict,
    cache_path: str | Path,
    task: str,
    device: str = "cpu",
) -> tuple[pd.DataFrame, list[dict]]:
    """(annotations of every model, metric rows) of one task's judge job. params: the judge rule's
    (workflow/params.py judge_params): the judge, the reference run, whether bases are judged."""
    cfg = JudgeConfig(**{k: v for k, v in params["judge"].items() if k not in ("evaluator", "template")})
    evaluator, identity = params["judge"]["evaluator"], judge_identity(params["judge"])
    ref = pd.read_parquet(reference)
    pairs = pd.concat([pairs_against(ref, pd.read_parquet(m)) for m in models], ignore_index=True)
    backend = Lazy(lambda: judge_backend(cfg, evaluator, device))  # built only for uncached pairs
    annotations = annotate(pairs, cfg, evaluator, identity, backend, cache_path)
    annotations = annotations.assign(judge=cfg.name, annotator=cfg.annotator, judge_identity=identity)
    rows = []
    reference_label = ref["generator"].iloc[0]
    for label, group in annotations.groupby("generator_2", sort=True):
        summary = winrate.summarize(group, is_reference=label == reference_label, lc=cfg.length_controlled)
        first = group.iloc[0]
        who = {c: None if c not in group.columns or pd.isna(first[c]) else first[c] for c in IDENTITY}
        who["task"] = task  # a base model is judged against this task's reference
        extra = {"judge": cfg.name, "annotator": cfg.annotator, "reference": reference_label}
        rows += [
            metric_row(**who, eval_data=EVAL_DATA, split=EVAL_SPLIT, metric=m, value=v, extra=extra)
            for m, v in summary.items()
            if v is not None
        ]
        log.info(
            "%s vs %s: %s",
            label,
            reference_label,
            json.dumps({k: v for k, v in summary.items()}, default=str),
        )
    return annotations, rows
