"""What a fine-tuned model is measured on, as a list the job's settings select (`evaluators`): each
evaluator turns the trained run into metric rows. They run in four groups, in order:

- on the master weights as trained: ‖θ_ft − θ_pre‖₂;
- on the model as its task trained it, in the device's evaluation dtype: the in-domain metrics and
  the task's own rows (LLaVA: its benchmarks);
- on the language model the task hands over (LLaVA's: the one inside, its own embedding rows): the
  pre-training perplexity, the lm-eval suite, the responses for the judged metric;
- on the master weights again: WiSE-FT's interpolations, the linearization gap, and last the
  curvature stage's line along θ_ft − θ_pre (Appendix D: its own table, no metric rows; it leaves
  the model at θ_pre).

Every evaluation of the model runs on one whole model (`placement.whole`: the model itself when it
already is that, else a copy gathered on every rank), so a fine-tuned-minus-base difference holds no
precision change, and every row records the dtype (`extra.dtype`).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import torch

from pipeline.curvature.linearization import GAP_METRICS, finetuned_gap
from pipeline.curvature.lines import write_lines
from pipeline.curvature.stage import finetune_line
from pipeline.evaluate.benchmarks import configured_rows, eval_configured
from pipeline.evaluate.generation import write_responses
from pipeline.evaluate.perplexity import EVAL_METRICS, eval_perplexity
from pipeline.models.loading import dtype_name
from pipeline.ranks import SINGLE, Ranks
from pipeline.tables import metric_row
from pipeline.train.distributed import local
from pipeline.train.wise_ft import wise_ft

if TYPE_CHECKING:
    from collections.abc import Callable

    from pipeline.data.heldout import EvalSet
    from pipeline.train.finetune import Run
    from pipeline.train.finetune_job import FinetuneJob
    from pipeline.train.placement import Whole

log = logging.getLogger(__name__)


@dataclass
class Trained:
    """A trained run as the evaluators see it: the run, its job, where it lives, the evaluation dtype,
    the held-out pre-training windows and the rows' common fields."""

    run: Run
    job: FinetuneJob
    placement: Whole
    dtype: torch.dtype
    pretrain_data: EvalSet
    common: dict
    ident: dict[str, dict[str, float]] = field(default_factory=dict)  # in-domain results, by split


@torch.no_grad()
def weight_distance(
    model: torch.nn.Module, reference: dict[str, torch.Tensor], ranks: Ranks = SINGLE
) -> float:
    """‖θ − θ_ref‖₂ over all parameters, accumulated in float64 (sharded: over every rank's shards)."""
    total = torch.zeros((), dtype=torch.float64)
    for n, p in model.named_parameters():
        mine = local(p).detach()
        total += (mine.double() - reference[n].to(mine.device).double()).pow(2).sum().cpu()
    device = next(model.parameters()).device  # a collective's tensors live there (NCCL: on the GPU)
    return math.sqrt(float(ranks.all_sum(total.to(device))))


# --- on the task's model ----------------------------------------------------------------------------


def in_domain(t: Trained, model: torch.nn.Module) -> list[dict]:
    """The task's metrics on each held-out split."""
    run = t.run
    t.ident = {s: run.task.evaluate(model, d, run.tokenizer, run.cfg) for s, d in run.evals.items()}
    return [
        metric_row(**t.common, eval_data=run.task.name, split=split, metric=m, value=res[m])
        for split, res in t.ident.items()
        for m in run.task.metrics
    ]


def task_rows(t: Trained, model: torch.nn.Module) -> list[dict]:
    """The rows only the task computes (LLaVA: the five benchmarks and the VLM score)."""
    return t.run.task.model_rows(model, t.run.tokenizer, t.common, t.placement.ranks)


# --- on the language model --------------------------------------------------------------------------


def pretrain_perplexity(t: Trained, model: torch.nn.Module) -> list[dict]:
    corpus = t.job.corpus
    pre = eval_perplexity(model, t.pretrain_data, batch_size=corpus.batch_size)
    log.info("pre-training ppl %.3f", pre["ppl"])
    return [
        metric_row(**t.common, eval_data="pretrain", split=corpus.split, metric=m, value=pre[m])
        for m in EVAL_METRICS
    ]


def suite(t: Trained, model: torch.nn.Module) -> list[dict]:
    """The lm-eval suite's rows (every rank scores its share and returns the same rows)."""
    settings = asdict(t.job.suite)
    results = eval_configured(model, t.run.tokenizer, settings, t.placement.ranks)
    return configured_rows(results, settings, **t.common)


def responses(t: Trained, model: torch.nn.Module) -> list[dict]:
    """The responses to the instruction set for the judged metric (rank 0 writes them); no rows."""
    g = t.job.generation
    identity = {k: v for k, v in t.common.items() if k not in ("extra", "diverged")}
    write_responses(model, t.run.tokenizer, g.instructions, g.config, identity, g.output, t.placement.ranks)
    return []


# --- on the master weights --------------------------------------------------------------------------


def distance(t: Trained) -> list[dict]:
    value = weight_distance(t.run.model, t.run.reference, t.placement.ranks)
    log.info("‖θ_ft − θ_pre‖ %.4f", value)
    return [metric_row(**t.common, eval_data="weights", split=None, metric="distance_l2", value=value)]


def wise(t: Trained) -> list[dict]:
    """WiSE-FT (pipeline/train/wise_ft.py): pre-training and in-domain metrics of θ_pre + α(θ_ft −
    θ_pre) at each α, as metrics `wise_<metric>` with `extra.wise_alpha`. The master weights (this
    process's part of them) move along the line; each α is evaluated on the whole model in the
    evaluation dtype, as the fine-tuned model is."""
    run, job, placement = t.run, t.job, t.placement
    moved = {n: placement.local(p) for n, p in run.model.named_parameters() if p.requires_grad}
    split = job.corpus.split

    def evaluate() -> dict:
        with placement.whole(run.model, t.dtype) as whole:
            out = {("pretrain", split): eval_perplexity(whole, t.pretrain_data, job.corpus.batch_size)}
            return out | {
                (run.task.name, s): run.task.evaluate(whole, d, run.tokenizer, run.cfg)
                for s, d in run.evals.items()
            }

    rows = []
    for alpha, results in wise_ft(moved, run.reference, run.cfg.wise_ft_alphas, evaluate):
        for (eval_data, s), res in results.items():
            metrics = EVAL_METRICS if eval_data == "pretrain" else run.task.metrics
            fields = t.common | {"extra": {**t.common["extra"], "wise_alpha": float(alpha)}}
            rows += [
                metric_row(**fields, eval_data=eval_data, split=s, metric=f"wise_{m}", value=res[m])
                for m in metrics
            ]
        log.info(
            "WiSE-FT α %g: pre-training ppl %.3f, ID validation ppl %.3f",
            alpha,
            results[("pretrain", split)]["ppl"],
            results[(run.task.name, "validation")]["ppl"],
        )
    return rows


def real(run: Run) -> None:
    """A linearized run's model gets its real forward back (what the gap and the line look at)."""
    if run.unlinearize is not None:
        run.unlinearize()
        run.unlinearize = None


def linearization_gap(t: Trained) -> list[dict]:
    """The linearization gap along θ_ft − θ_pre (pipeline/curvature/linearization.py) on the held-out
    pre-training windows and the task's own held-out windows (`FinetuneTask.gap_data`): metrics
    `lin_*`. On the whole model in its float32 master weights (the real model: a linearized run is
    unlinearized first), θ_pre of the trained parameters whole beside it (a sharded job gathers both
    on every rank, each computing the same rows)."""
    run, placement = t.run, t.placement
    real(run)
    t0 = time.perf_counter()
    sets = {("pretrain", t.job.corpus.split): t.pretrain_data}
    sets |= {(run.task.name, s): d for s, d in run.task.gap_data(run.evals).items()}
    trained = [(n, p) for n, p in run.model.named_parameters() if p.requires_grad]
    pre = {n: placement.full_like(run.reference[n], p) for n, p in trained}
    with placement.whole(run.model, next(run.model.parameters()).dtype) as whole:
        found = finetuned_gap(whole, pre, sets, run.cfg.linearization_tokens)
        fields = t.common | {"extra": {**t.common["extra"], "dtype": dtype_name(whole)}}  # the master weights
    del pre
    log.info(
        "linearization gap along θ_ft − θ_pre (%.1f s): %s",
        time.perf_counter() - t0,
        {f"{d}/{s}": {k: round(v, 4) for k, v in res.items()} for (d, s), res in found.items()},
    )
    return [
        metric_row(**fields, eval_data=eval_data, split=split, metric=GAP_METRICS[k], value=v)
        for (eval_data, split), res in found.items()
        for k, v in res.items()
    ]


def curvature_line(t: Trained) -> list[dict]:
    """The held-out pre-training loss along θ_ft − θ_pre beside its quadratic prediction
    (pipeline/curvature/stage.py, Appendix D), from the two models the job holds (no second load),
    written to the job's line table; no metric rows. The model must be whole in this process."""
    run, job = t.run, t.job
    real(run)
    t0 = time.perf_counter()
    rows = finetune_line(
        run.model,
        run.tokenizer,
        run.reference,
        job.corpus.path,
        job.corpus.settings(),
        job.curvature,
        job.identity(),
        job.spec.name,
    )
    write_lines(job.line_path, rows)
    log.info("curvature line along θ_ft − θ_pre: %d points in %.1f s", len(rows), time.perf_counter() - t0)
    return []


def no_line(t: Trained) -> list[dict]:
    """The empty line table the rule declares when the curvature stage is off (rank 0); no rows."""
    if t.placement.ranks.main:
        write_lines(t.job.line_path, [])
    return []


@dataclass(frozen=True)
class Evaluators:
    """The evaluations of one job, by group (module docstring), in order."""

    before: tuple[Callable[[Trained], list[dict]], ...]
    on_task_model: tuple[Callable[[Trained, torch.nn.Module], list[dict]], ...]
    on_language_model: tuple[Callable[[Trained, torch.nn.Module], list[dict]], ...]
    after: tuple[Callable[[Trained], list[dict]], ...]


def evaluators(job: FinetuneJob) -> Evaluators:
    """The evaluations the job's settings select: always ‖θ_ft − θ_pre‖₂, the in-domain metrics, the
    task's rows and the pre-training perplexity; the suite with benchmark tasks, the responses with
    the judged metric, WiSE-FT with its αs, the gap with its tokens, the line with the curvature
    stage (without it, the empty line table the rule declares)."""
    cfg = job.cfg
    return Evaluators(
        before=(distance,),
        on_task_model=(in_domain, task_rows),
        on_language_model=(pretrain_perplexity,)
        + ((suite,) if job.suite is not None and job.suite.tasks else ())
        + ((responses,) if job.generation is not None else ()),
        after=((wise,) if cfg.wise_ft_alphas else ())
        + ((linearization_gap,) if cfg.linearization_tokens else ())
        + (
            (curvature_line,)
            if job.curvature is not None
            else (no_line,)
            if job.line_path is not None
            else ()
        ),
    )
