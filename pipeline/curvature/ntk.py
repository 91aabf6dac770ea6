"""Rule ntk: the empirical neural tangent kernel of one checkpoint on one fine-tuning task
("Linearization Explains Fine-Tuning in Large Language Models", Section 4): can a kernel statistic
of a checkpoint, cheap next to a fine-tuning grid, predict how it fine-tunes?

Per example i of the task's training split (n = curvature.ntk_examples, the first in file order):
s_i = the mean log-likelihood of its scored tokens (an LM window; a classification item's gold
answer; a conversation's assistant tokens). K = G Gᵀ over every parameter, computed per parameter
group (each decoder layer, the embeddings, the output layer, the final norm) in memory-bounded blocks
(`group_kernels`). Rows (modification none, eval_data the task, split train): K's λ_max, λ_min,
trace, effective rank; per σ = scale · tr K / n: κ(K + σI) and the kernel-ridge training residual
on the residual targets r = 0 − s (a perfect fit has log-likelihood 0), per example; per group g
besides the first decoder layer (the paper's trained set {layer 0}): tr S_g, λ_max(S_g), η, the
ratio Algorithm 2 ranks by and the ridge risk ratio with g added (extra: group, sigma_scale).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from pipeline.curvature.linearization import (
    group_kernels,
    kernel_stats,
    ridge_residual,
    spectral_perturbation,
)
from pipeline.data.batches import IGNORE_INDEX, pad_masked_batch, pad_scored_batch
from pipeline.data.chat import encode_chats
from pipeline.data.encode import encode_classification, read_task, split_of_task
from pipeline.data.heldout import build_eval_set
from pipeline.data.tokenizer import encode_documents
from pipeline.models.loading import dtype_name, load_checkpoint
from pipeline.models.trained_params import selected
from pipeline.tables import metric_row

if TYPE_CHECKING:
    from pipeline.curvature.config import CurvatureConfig
    from pipeline.models.checkpoints import CheckpointSpec

log = logging.getLogger(__name__)
LAYER = re.compile(r"\.layers\.(\d+)\.")


def parameter_group(name: str) -> str:
    """A parameter's group: `layer<i>` for decoder layer i, else its module's name (embed_tokens,
    lm_head, norm)."""
    m = LAYER.search(f".{name}")
    return f"layer{m.group(1)}" if m else name.rsplit(".", 2)[-2]


def task_examples(task, tokenizer, max_len: int, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The first n training examples of a task as (input_ids, labels) rows of one."""
    docs = split_of_task(task, "train")
    if task.kind == "lm":  # the first n rolling windows, tokenizing only the documents they need
        prefix = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
        tokens: list[list[int]] = []
        while len(tokens) < len(docs) and sum(-(-len(t) // max_len) for t in tokens) < n:
            tokens += encode_documents(tokenizer, [docs[len(tokens)]])
        data = build_eval_set(tokens, docs[: len(tokens)], prefix, max_len, tokenizer.pad_token_id)
        out = [(data.inputs[i : i + 1], data.labels[i : i + 1]) for i in range(len(data.inputs))]
    elif task.kind == "classification":
        enc = encode_classification(tokenizer, docs, max_len)
        out = []
        for i in range(min(n, len(enc.prompts))):
            seq, k = enc.sequence(i, int(enc.labels[i]))
            b = pad_scored_batch([seq], [k], tokenizer.pad_token_id)
            out.append((b["input_ids"], b["labels"]))
    else:
        enc = encode_chats(tokenizer, docs, max_len, name=f"{task.name}/train")
        out = []
        for i in range(min(n, len(enc))):
            b = pad_masked_batch([enc.ids[i]], [enc.scored[i]], tokenizer.pad_token_id)
            out.append((b["input_ids"], b["labels"]))
    if len(out) < n:
        raise ValueError(
            f"curvature.ntk_examples: {n} is more than task {task.name!r}'s training split holds "
            f"({len(out)} examples at context {max_len})"
        )
    return out[:n]


def ntk_rows(
    spec: CheckpointSpec,
    path: str | None,
    tasks: Mapping[str, str | Path],
    max_len: int | None,
    cfg: CurvatureConfig,
    study: str,
    device: str = "cpu",
    methods: Mapping[str, str | dict] | None = None,
    seed: int = 0,
) -> list[dict]:
    """The NTK rows of one checkpoint on each task (`tasks`: name -> task table), the checkpoint
    loaded once (module docstring); with `methods` (fine-tuning method -> what it trains, for the
    methods that do not train every parameter), also the kernel of what each method trains
    (`method_kernel_rows`; LoRA adapters drawn with `seed`)."""
    model, tokenizer, _, _ = load_checkpoint(spec, path, device, dtype=torch.float32)
    model.eval()
    ctx = model.config.max_position_embeddings
    rows = []
    for task_name, task_path in tasks.items():
        examples = task_examples(
            read_task(task_name, task_path), tokenizer, min(max_len or ctx, ctx), cfg.ntk_examples
        )
        common = dict(**spec.row_fields(study), eval_data=task_name, split="train")
        on = TaskExamples(f"{spec.name} on {task_name}", examples, common, cfg, device)
        rows += _task_rows(model, on)
        for method, params in (methods or {}).items():
            with selected(model, params, seed) as trained:
                rows += method_kernel_rows(trained, on, method)
    return rows


def _kernels(
    model: torch.nn.Module,
    examples: list[tuple[torch.Tensor, torch.Tensor]],
    cfg: CurvatureConfig,
    device: str,
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """({group: S_g}, s): the kernel of each group of `model`'s trained parameters (requires_grad)
    on the examples' mean log-likelihoods s, in blocks of `curvature.ntk_block_gib`."""
    groups: dict[str, dict[str, torch.Tensor]] = {}
    for param_name, p in model.named_parameters():
        if p.requires_grad:
            groups.setdefault(parameter_group(param_name), {})[param_name] = p.detach()

    def scalar(params, i: int) -> torch.Tensor:
        x, y = (t.to(device) for t in examples[i])
        logits = torch.func.functional_call(model, dict(params), (x,)).logits
        return -F.cross_entropy(
            logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1), ignore_index=IGNORE_INDEX
        )

    return group_kernels(scalar, groups, cfg.ntk_examples, cfg.ntk_block_gib * 2**30)


def _spectrum_rows(
    kernel: torch.Tensor, s: torch.Tensor, common: dict, cfg: CurvatureConfig, extra: dict
) -> tuple[list[dict], dict]:
    """K's λ_max, λ_min, trace, effective rank, the mean log-likelihood, and per σ scale κ(K + σI)
    and the kernel-ridge training residual per example; and the stats themselves."""
    n = cfg.ntk_examples
    stats = kernel_stats(kernel, cfg.ntk_sigma_scales)
    rows = [
        metric_row(**common, metric=f"ntk_{k}", value=stats[k], extra=extra)
        for k in ("lambda_max", "lambda_min", "trace", "effective_rank")
    ]
    rows.append(metric_row(**common, metric="ntk_mean_loglik", value=float(s.mean()), extra=extra))
    for scale in cfg.ntk_sigma_scales:
        sigma = scale * stats["trace"] / n
        at = extra | {"sigma_scale": float(scale)}
        rows.append(metric_row(**common, metric="ntk_kappa", value=stats[f"kappa@{scale:g}"], extra=at))
        risk = ridge_residual(kernel, -s, sigma)["risk"] / n  # targets 0: a perfect fit
        rows.append(metric_row(**common, metric="ntk_ridge_risk", value=risk, extra=at))
    return rows, stats


@dataclass(frozen=True)
class TaskExamples:
    """One task's examples as a kernel is computed on them: their name in the log, the rows' common
    fields, the curvature settings and the device."""

    name: str
    examples: list[tuple[torch.Tensor, torch.Tensor]]
    common: dict
    cfg: CurvatureConfig
    device: str


def method_kernel_rows(model: torch.nn.Module, on: TaskExamples, method: str) -> list[dict]:
    """The spectrum rows (`_spectrum_rows`) of the kernel over what a fine-tuning method trains
    (`model` as the method selects it: its trainable parameters), modification = the method. LoRA
    at initialisation has B = 0, so only B's gradients count: K = Σ_modules G_W Aᵀ A G_Wᵀ, the
    kernel of the adapters a run of that seed starts from."""
    t0, cfg = time.perf_counter(), on.cfg
    kernels, s = _kernels(model, on.examples, cfg, on.device)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    extra = {"examples": cfg.ntk_examples, "parameters": trained, "dtype": dtype_name(model)}
    rows, stats = _spectrum_rows(sum(kernels.values()), s, on.common | {"modification": method}, cfg, extra)
    _log_kernel(
        f"{on.name}, {method}", cfg.ntk_examples, trained, len(kernels), time.perf_counter() - t0, stats
    )
    return rows


def _log_kernel(name: str, n: int, parameters: int, groups: int, seconds: float, stats: dict) -> None:
    log.info(
        "%s: NTK of %d examples over %d parameters in %d groups (%.1f s): λ_max %.4g, λ_min %.4g, "
        "effective rank %.2f, κ %s",
        name,
        n,
        parameters,
        groups,
        seconds,
        stats["lambda_max"],
        stats["lambda_min"],
        stats["effective_rank"],
        {f"σ={k.split('@')[1]}·trK/n": round(v, 2) for k, v in stats.items() if k.startswith("kappa@")},
    )


def _task_rows(model: torch.nn.Module, on: TaskExamples) -> list[dict]:
    """The NTK rows of `model` (every parameter) on one task's examples: the spectrum rows and,
    per group besides the first decoder layer, Algorithm 2's quantities."""
    t0, cfg, common, name = time.perf_counter(), on.cfg, on.common, on.name
    kernels, s = _kernels(model, on.examples, cfg, on.device)
    n = cfg.ntk_examples
    parameters = sum(p.numel() for p in model.parameters())
    base_extra = {"examples": n, "parameters": parameters, "dtype": dtype_name(model)}
    common = common | {"modification": "none"}
    kernel = sum(kernels.values())
    rows, stats = _spectrum_rows(kernel, s, common, cfg, base_extra)
    first = next(g for g in kernels if g.startswith("layer"))
    for scale in cfg.ntk_sigma_scales:
        sigma = scale * stats["trace"] / n
        extra = base_extra | {"sigma_scale": float(scale)}
        for g, sg in kernels.items():
            eig = torch.linalg.eigvalsh(sg)
            group_extra = extra | {"group": g, "base_group": first}
            rows += [
                metric_row(**common, metric="ntk_group_trace", value=float(eig.sum()), extra=group_extra),
                metric_row(**common, metric="ntk_group_lambda_max", value=float(eig[-1]), extra=group_extra),
            ]
            if g == first:
                continue
            found = spectral_perturbation(kernels[first], sg, -s, sigma)
            rows += [
                metric_row(**common, metric="ntk_group_eta", value=found["eta"], extra=group_extra),
                metric_row(**common, metric="ntk_group_ratio", value=found["ratio"], extra=group_extra),
                metric_row(
                    **common,
                    metric="ntk_group_risk_ratio",
                    value=found["risk_with"] / found["risk_base"],
                    extra=group_extra,
                ),
            ]
    _log_kernel(name, n, parameters, len(kernels), time.perf_counter() - t0, stats)
    return rows
