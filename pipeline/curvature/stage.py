"""The curvature stage's jobs: per checkpoint, the Gaussian lines and the sharpness (rule curvature);
per fine-tuning run, the line along θ_ft − θ_pre (called from inside the fine-tuning job, which holds
both models: no second load)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from pipeline.curvature.hessian import sharpness
from pipeline.curvature.lines import finetune_direction, line_rows, prepare, token_loss, trainable
from pipeline.data.batches import IGNORE_INDEX
from pipeline.data.heldout import EvalSet, build_eval_set, encode_leading, split_texts
from pipeline.models.loading import load_checkpoint
from pipeline.sweeps.noise import gaussian_direction
from pipeline.tables import metric_row

if TYPE_CHECKING:
    from pipeline.curvature.config import CurvatureConfig
    from pipeline.models.checkpoints import CheckpointSpec

log = logging.getLogger(__name__)

SHARPNESS_METRICS = (
    "hessian_trace",
    "hessian_trace_se",
    "hessian_trace_init_scaled",
    "hessian_trace_init_scaled_se",
    "hessian_top_eig",
)


def curvature_eval_set(
    model, tokenizer, corpus_path: str | Path, eval_cfg: dict, cfg: CurvatureConfig
) -> EvalSet:
    """The first windows of the held-out pre-training split, up to cfg.max_tokens scored tokens (at
    least one window): the perturbation stage's windows (`heldout_eval_set`: same documents, order
    and windowing), tokenizing only the documents needed."""
    ctx = model.config.max_position_embeddings
    max_len = min(eval_cfg.get("seq_len") or ctx, ctx)
    texts = split_texts(corpus_path, eval_cfg["split"])
    if not texts:
        raise ValueError(f"eval.split: the corpus has no documents in split {eval_cfg['split']!r}")
    docs = encode_leading(tokenizer, texts, cfg.max_tokens - 1)  # up to the first reaching max_tokens
    prefix = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    data = build_eval_set(docs, texts[: len(docs)], prefix, max_len, tokenizer.pad_token_id)
    counts = (data.labels != IGNORE_INDEX).sum(1).cumsum(0)
    k = max(1, int((counts <= cfg.max_tokens).sum()))
    return EvalSet(data.inputs[:k], data.labels[:k], int(counts[k - 1]), data.n_bytes, data.n_documents)


def checkpoint_curvature(
    spec: CheckpointSpec,
    path: str | None,
    corpus_path: str | Path,
    eval_cfg: dict,
    cfg: CurvatureConfig,
    study: str,
    device: str = "cpu",
) -> tuple[list[dict], list[dict]]:
    """(line rows of each Gaussian seed, sharpness metric rows) of one checkpoint.

    The sharpness is computed in float32 (3x faster on CPU than float64; its Monte Carlo error is
    far above float32 rounding), the lines in cfg.dtype (small-λ differences).
    """
    t0 = time.perf_counter()
    model, tokenizer, init_std, std_source = load_checkpoint(spec, path, device, dtype=torch.float32)
    prepare(model, "float32", spec.name)
    data = curvature_eval_set(model, tokenizer, corpus_path, eval_cfg, cfg)
    named = trainable(model)
    params = [p for _, p in named]
    scales = [float(init_std[n]) for n, _ in named]
    sharp = sharpness(
        token_loss(model, data, cfg.batch_size, torch.device(device)),
        params,
        scales,
        cfg.probes,
        cfg.power_iters,
    )
    t1 = time.perf_counter()
    prepare(model, cfg.dtype, spec.name)
    named = trainable(model)
    fields = spec.row_fields(study)
    common = {k: fields[k] for k in ("study", "checkpoint", "model", "budget")}
    directions = []
    for seed in cfg.seeds or ():
        eps = gaussian_direction(model, init_std, int(seed))
        vec = [eps[n].to(p.dtype) if n in eps else torch.zeros_like(p) for n, p in named]
        directions.append(({"direction": "gaussian", "seed": int(seed)}, vec))
    lines = line_rows(model, data, directions, cfg.grids("gaussian"), cfg, common)
    log.info(
        "%s (%d eval tokens): tr(H) %.4g ± %.2g, tr(DHD) %.4g ± %.2g, top eigenvalue %.4g | load + "
        "sharpness %.1f s, lines %.1f s",
        spec.name,
        data.n_tokens,
        sharp["hessian_trace"],
        sharp["hessian_trace_se"],
        sharp["hessian_trace_init_scaled"],
        sharp["hessian_trace_init_scaled_se"],
        sharp["hessian_top_eig"],
        t1 - t0,
        time.perf_counter() - t1,
    )
    extra = {
        "eval_tokens": data.n_tokens,
        "probes": cfg.probes,
        "power_iters": cfg.power_iters,
        "dtype": "float32",
        "init_std_source": std_source,
    }
    rows = [
        metric_row(
            **fields,
            modification="none",
            eval_data="pretrain",
            split=eval_cfg["split"],
            metric=m,
            value=sharp[m],
            extra=extra,
        )
        for m in SHARPNESS_METRICS
    ]
    return lines, rows


def finetune_line(
    model: torch.nn.Module,
    tokenizer,
    reference: Mapping[str, torch.Tensor],
    corpus_path: str | Path,
    eval_cfg: dict,
    cfg: CurvatureConfig,
    fields: Mapping,
    name: str,
) -> list[dict]:
    """Line rows along θ_ft − θ_pre of a fine-tuned `model` (θ_ft; left at θ_pre in `cfg.dtype` after)."""
    prepare(model, cfg.dtype, name)
    data = curvature_eval_set(model, tokenizer, corpus_path, eval_cfg, cfg)
    _, eps = finetune_direction(model, reference)
    common = {k: fields[k] for k in ("study", "checkpoint", "model", "budget")}
    line = {
        "direction": "finetune",
        **{k: fields[k] for k in ("seed", "task", "modification", "learning_rate", "lambda_reg")},
    }
    return line_rows(model, data, [(line, eps)], cfg.grids("finetune"), cfg, common)
