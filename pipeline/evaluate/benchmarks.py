"""The generalist benchmark suite through lm-evaluation-harness, on a model held in memory
(the tasks, their sources and the config: pipeline/evaluate/benchmark_registry.py).

The evaluation (`eval_benchmarks`) wraps the model in lm-eval's `HFLM` (no copy, no disk) and
runs every task in one `simple_evaluate` call. `limit` keeps the first items of each task in a
fixed hash order of the documents (the local tasks store their scored split in that order; for
`builtin` the order goes to lm-eval as `samples`), so the same items are scored for every model
and a smaller cap is a subset of a larger one.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from pipeline.evaluate.benchmark_data import hash_order, prepare_local_data
from pipeline.evaluate.benchmark_registry import (
    BENCHMARKS,
    FEWSHOT_SEED,
    TASKS_DIR,
    BenchmarkError,
    benchmark_settings,
    builtin_manager,
    validate_benchmark_tasks,
)
from pipeline.models.loading import dtype_name
from pipeline.ranks import SINGLE, Ranks, map_shared
from pipeline.tables import metric_row

log = logging.getLogger(__name__)


def capped_indices(docs: Iterable[Mapping], limit: int) -> list[int]:
    """The first `limit` documents in hash order, as sorted indices (lm-eval's `samples`).

    Independent of the model, seed and dataset order: every model is scored on the same items,
    and a smaller cap gives a subset of a larger one. (The local tasks store their evaluated
    split in hash order already, so lm-eval's plain `limit` does the same there.)
    """
    return sorted(hash_order(docs)[:limit])


def _number(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):  # lm-eval writes "N/A" where a stderr is undefined
        return math.nan


def _leaves(name: str, group_subtasks: Mapping[str, list[str]]) -> list[str]:
    if name not in group_subtasks:
        return [name]
    return [leaf for child in group_subtasks[name] for leaf in _leaves(child, group_subtasks)]


def eval_benchmarks(
    model,
    tokenizer,
    tasks: list[str],
    num_fewshot: int,
    limit: int | None,
    batch_size: int,
    source: str,
    seed: int,
    package_dir: str | Path,
    cache_dir: str | Path,
    ranks: Ranks = SINGLE,
) -> dict[str, dict[str, Any]]:
    """Evaluate one in-memory model on every task in one lm-eval `simple_evaluate` call.

    Returns {task: {acc, acc_stderr, acc_norm, acc_norm_stderr, n, split, dtype}} keyed by the
    configured (lm-eval standard) names; a metric the task does not define (acc_norm of BoolQ, COPA,
    Winogrande, MMLU, as in lm-eval) is NaN. `n` is the number of items scored (all leaf tasks of
    a group). `limit` caps the items of each (leaf) task, `seed` seeds the few-shot sampling and
    lm-eval's RNGs. The model keeps its device and dtype (log-softmax is taken in float32); its
    train/eval mode is restored afterwards.

    ranks: a job of several processes, each holding the whole model: every rank builds the same
    requests (lm-eval runs as one process, so the few-shot draws are one process's), scores its
    round-robin share of them and receives the others' scores; every rank returns the same
    results, those of one process.
    """
    names = validate_benchmark_tasks(tasks, source)
    if not names:
        return {}
    if isinstance(num_fewshot, bool) or not isinstance(num_fewshot, int) or num_fewshot < 0:
        raise BenchmarkError(f"num_fewshot must be an integer >= 0, got {num_fewshot!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise BenchmarkError(f"limit must be a positive integer or null, got {limit!r}")

    import torch
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    t0 = time.perf_counter()
    was_training = model.training
    with _QuietLmEval() as quiet:
        if source == "local":
            root = prepare_local_data(tasks, package_dir, cache_dir)
            manager = TaskManager(
                include_path=str(TASKS_DIR),
                include_defaults=False,
                metadata={"overtrain_data_dir": str(root)},
            )
        else:
            manager = builtin_manager()
        loaded = manager.load(names)
        leaf_tasks, groups = loaded["tasks"], loaded.get("groups") or {}
        top = [groups[n] if n in groups else leaf_tasks[n] for n in names]  # built once, evaluated as built
        samples = None
        if limit is not None and source == "builtin":  # local tasks store their split in hash order already
            samples = {
                n: capped_indices(t.eval_docs, limit)
                for n, t in leaf_tasks.items()
                if limit < len(t.eval_docs)
            } or None
        t_load = time.perf_counter() - t0
        try:
            lm = _short_context_hflm()(
                pretrained=model, tokenizer=tokenizer, batch_size=batch_size, softmax_dtype=torch.float32
            )
            lm.ranks = ranks
            t1 = time.perf_counter()
            out = simple_evaluate(
                model=lm,
                tasks=top,
                num_fewshot=num_fewshot,
                limit=limit if source == "local" else None,
                samples=samples,
                task_manager=manager,
                bootstrap_iters=1000,
                log_samples=False,
                random_seed=seed,
                numpy_random_seed=seed,
                torch_random_seed=seed,
                fewshot_random_seed=seed,
            )
            seconds = time.perf_counter() - t1
        finally:
            model.train(was_training)
    if quiet.truncated:
        log.warning(
            "lm-eval truncated %d requests' contexts from the left to the model's context of %d tokens",
            quiet.truncated,
            lm.max_length,
        )
    if lm.shifted:
        log.warning(
            "%d continuations were longer than the model's context of %d tokens: scored on their last %d "
            "tokens, the rest counted as context",
            lm.shifted,
            lm.max_length,
            lm.max_length,
        )

    # lm-eval returns its results where LOCAL_RANK is 0 only (every rank computed the same ones)
    part = {k: out.get(k) or {} for k in ("results", "n-samples", "group_subtasks")} if out else None
    out = next(p for p in ranks.all_gather(part) if p is not None)
    results, n_samples = out["results"], out["n-samples"]
    dtype = dtype_name(model)  # what the scores were computed in
    group_subtasks = out["group_subtasks"]
    summary: dict[str, dict[str, Any]] = {}
    total = 0
    for task, name in zip(tasks, names):
        r = results[name]
        leaves = _leaves(name, group_subtasks)
        n = sum(int(n_samples[leaf]["effective"]) for leaf in leaves)
        split = BENCHMARKS[task].eval_split if source == "local" else _eval_split(leaf_tasks[leaves[0]])
        summary[task] = {
            "acc": _number(r.get("acc,none")),
            "acc_stderr": _number(r.get("acc_stderr,none")),
            "acc_norm": _number(r.get("acc_norm,none")),
            "acc_norm_stderr": _number(r.get("acc_norm_stderr,none")),
            "n": n,
            "split": split,
            "dtype": dtype,
        }
        total += n
        s = summary[task]
        log.info(
            "benchmark %s (%s, %d-shot, %s split): %d items, acc %.4f ± %.4f, acc_norm %.4f ± %.4f",
            task,
            name,
            num_fewshot,
            split,
            n,
            s["acc"],
            s["acc_stderr"],
            s["acc_norm"],
            s["acc_norm_stderr"],
        )
    log.info(
        "benchmarks: %d tasks, %d items in %.1f s (%.1f items/s; lm-eval batches all tasks' requests "
        "together, so there is no per-task time) + %.1f s loading the tasks",
        len(tasks),
        total,
        seconds,
        total / max(seconds, 1e-9),
        t_load,
    )
    return summary


class _QuietLmEval(logging.Filter):
    """Counts and hides lm-eval's repeated messages: one warning per truncated request, and one
    per local task about `custom_dataset` keyword arguments (which we pass as metadata)."""

    LOGGERS = ("lm_eval.models.huggingface", "lm_eval.api.task")

    def __init__(self):
        super().__init__()
        self.truncated = 0

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        if "exceeds model's maximum length" in msg:
            self.truncated += 1
            return False
        return "Custom kwargs can be passed to `--metadata`" not in msg

    def __enter__(self):
        for name in self.LOGGERS:
            logging.getLogger(name).addFilter(self)
        return self

    def __exit__(self, *exc):
        for name in self.LOGGERS:
            logging.getLogger(name).removeFilter(self)


@lru_cache(maxsize=1)
def _short_context_hflm():
    """lm-eval's HFLM, except that (1) a continuation longer than the model's context (possible
    only for toy models: a HellaSwag ending can exceed 64 tokens) is scored on its last
    `max_length` tokens, its head moved into the context, instead of failing lm-eval's assertion;
    (2) with `ranks` of several processes, the model calls are shared over them (`map_shared`)
    while lm-eval itself runs as one process on each (its own data parallelism splits the
    documents by rank, which changes the few-shot draws)."""
    from lm_eval.models.huggingface import HFLM

    class ShortContextHFLM(HFLM):
        shifted = 0
        ranks: Ranks = SINGLE

        def _shared(self, method: Callable, requests: list, *args, **kwargs) -> list:
            def work(mine: list) -> list:
                return method(mine, *args, **kwargs) if mine else []

            return map_shared(requests, work, self.ranks)

        def loglikelihood(self, requests, *args, **kwargs):
            return self._shared(super().loglikelihood, requests, *args, **kwargs)

        def loglikelihood_rolling(self, requests, *args, **kwargs):
            return self._shared(super().loglikelihood_rolling, requests, *args, **kwargs)

        def generate_until(self, requests, *args, **kwargs):
            return self._shared(super().generate_until, requests, *args, **kwargs)

        def _loglikelihood_tokens(self, requests, *args, **kwargs):
            fixed = []
            for key, context_enc, continuation_enc in requests:
                over = len(continuation_enc) - self.max_length
                if over > 0:
                    self.shifted += 1
                    context_enc, continuation_enc = (
                        context_enc + continuation_enc[:over],
                        continuation_enc[over:],
                    )
                fixed.append((key, context_enc, continuation_enc))
            return super()._loglikelihood_tokens(fixed, *args, **kwargs)

    return ShortContextHFLM


def _eval_split(task) -> str:
    cfg = task.config
    return cfg.test_split or cfg.validation_split or "unknown"


def benchmark_rows(
    results: Mapping[str, Mapping[str, Any]],
    *,
    bench_source: str,
    num_fewshot: int,
    limit: int | None,
    **fields: Any,
) -> list[dict[str, Any]]:
    """Tidy metric rows (`pipeline.tables.metric_row`) of `eval_benchmarks` results.

    One row per task and number: `eval_data` = `benchmark:<task>`, `metric` = acc, acc_stderr,
    acc_norm, acc_norm_stderr (undefined metrics are skipped), `split` = the evaluated split;
    `extra` gets source, num_fewshot, limit, n (items scored) and the weights' dtype. `fields` are
    the job's other columns (study, checkpoint, modification, gamma, seed, extra, ...).
    """

    extra = fields.pop("extra", None) or {}
    if isinstance(extra, str):
        extra = json.loads(extra)
    rows = []
    for task, r in results.items():
        for metric in ("acc", "acc_stderr", "acc_norm", "acc_norm_stderr"):
            value = r.get(metric, math.nan)
            if value is None or (isinstance(value, float) and math.isnan(value)):
                continue
            rows.append(
                metric_row(
                    **fields,
                    eval_data=f"benchmark:{task}",
                    split=r.get("split"),
                    metric=metric,
                    value=float(value),
                    extra={
                        **extra,
                        "benchmark_source": bench_source,
                        "num_fewshot": num_fewshot,
                        "limit": limit,
                        "n": int(r["n"]),
                        "dtype": r.get("dtype"),
                    },
                )
            )
    return rows


def eval_configured(model, tokenizer, cfg: Mapping, ranks: Ranks = SINGLE) -> dict[str, dict[str, Any]]:
    """`eval_benchmarks` with a study's `eval.benchmarks` settings (see `benchmark_config`)."""
    return eval_benchmarks(
        model,
        tokenizer,
        seed=FEWSHOT_SEED,
        package_dir=cfg["package_dir"],
        cache_dir=cfg["cache_dir"],
        ranks=ranks,
        **benchmark_settings(cfg),
    )


def configured_rows(
    results: Mapping[str, Mapping[str, Any]], cfg: Mapping, **fields: Any
) -> list[dict[str, Any]]:
    """`benchmark_rows` with a study's `eval.benchmarks` settings recorded in `extra`."""
    return benchmark_rows(
        results, bench_source=cfg["source"], num_fewshot=cfg["num_fewshot"], limit=cfg["limit"], **fields
    )
