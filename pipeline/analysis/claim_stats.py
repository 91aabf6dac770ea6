"""What each registered claim computes (pipeline/analysis/claims.py holds the records): the rows of a
study it reads and its estimates, one per setting, each with its verdict by the claim's rule."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from pipeline import layout
from pipeline.analysis.evidence import (
    ONE_RUN,
    Estimate,
    mean_difference,
    not_computed,
    rank_correlation,
    trend,
    u_fit,
    u_note,
    u_runs,
    ushape,
    ushapes,
)
from pipeline.analysis.seeds import run_means, seed_cube
from pipeline.analysis.stats import deltas, fixed_rate_runs, tuned_table
from pipeline.analysis.verdicts import CONTRADICTED, NOT_ESTABLISHED, P_U, SUPPORTED, NoRows
from pipeline.multimodal.config import VLM_TASKS

if TYPE_CHECKING:
    from pipeline.analysis.study_tables import StudyTables

# --- rows -------------------------------------------------------------------------------------------


def _pretrain_ppl(t: StudyTables, modification: str | tuple, table: str = layout.METRICS) -> pd.DataFrame:
    return t.metrics(
        f"pre-training perplexity ({modification})",
        table,
        modification=modification,
        eval_data="pretrain",
        metric="ppl",
    )


def _gaussian(t: StudyTables, table: str = layout.METRICS) -> pd.DataFrame:
    """Pre-training ppl rows of the Gaussian arm with Δ log against their base model (of `table`: the
    study's runs, or its WSD stable twins)."""
    rows = pd.concat([_pretrain_ppl(t, "none", table), _pretrain_ppl(t, "gaussian", table)])
    return deltas(rows, "ppl").dropna(subset=["gamma"])


def _finetuned(t: StudyTables, method: str = "sft", table: str = layout.METRICS) -> pd.DataFrame:
    """Pre-training ppl rows of `method`'s fixed-rate runs (every seed that ran at every budget), with
    Δ log against their base model."""
    rows = pd.concat([_pretrain_ppl(t, "none", table), _pretrain_ppl(t, method, table)])
    return deltas(fixed_rate_runs(rows), "ppl").query("modification == @method")


def _tuned(t: StudyTables, method: str = "sft") -> pd.DataFrame:
    """Every metric of `method` at each checkpoint's tuned learning rate, one row per (checkpoint,
    metric) with its seed mean: the study's own table (analysis/finetune_tuned.parquet, chosen by its
    finetune.select_metric), else stats.tuned_table's default choice (in-domain validation ppl)."""
    if t.has(layout.FINETUNE_TUNED):
        tuned = t.table(layout.FINETUNE_TUNED)
    else:
        tuned = tuned_table(t.metrics(f"fine-tuning runs of {method}", modification=("none", method)))
    tuned = tuned[tuned["modification"] == method]
    if tuned.empty:
        raise NoRows(f"no rows for the tuned runs of {method} in study {t.study!r}")
    return tuned.rename(columns={"mean": "value"}).assign(seed=None)


def _tuned_runs(t: StudyTables, method: str = "sft") -> pd.DataFrame:
    """Every run of `method` at its checkpoint's tuned learning rate, each seed its own row (the
    seeds at the tuned rate are the replicates where a study has one pre-training run)."""
    chosen = _tuned(t, method)[
        ["checkpoint", "task", "lambda_reg", "learning_rate", "base", "eval_data", "split", "metric"]
    ]
    runs = t.metrics(f"fine-tuning runs of {method}", modification=method)
    keys = ["checkpoint", "task", "lambda_reg", "learning_rate", "eval_data", "split", "metric"]
    return runs.merge(chosen, on=keys, how="inner")


def _per(rows: pd.DataFrame, keys: list[str]) -> list[tuple[tuple, pd.DataFrame]]:
    return [((k,) if not isinstance(k, tuple) else k, g) for k, g in rows.groupby(keys, sort=True)]


def _lr(x: float) -> str:
    """1e-2, 3e-1, 1: a learning rate as the claims label it."""
    return f"{x:.0e}".replace("e-0", "e-").replace("e+00", "")


# --- the Gaussian arm -------------------------------------------------------------------------------


def base_improves(t: StudyTables) -> list[Estimate]:
    rows = _pretrain_ppl(t, "none").assign(log_ppl=lambda r: np.log(r["value"]))
    return [trend(g, "log_ppl", f"{m}", -1) for (m,), g in _per(rows, ["model"])]


def _branches(t: StudyTables) -> bool:
    """The study's budgets are WSD branches of one stable run per seed (analysis/pretrain_runs.parquet)."""
    if not t.has(layout.PRETRAIN_RUNS):
        return False
    runs = t.table(layout.PRETRAIN_RUNS)
    return "schedule" in runs and bool((runs["schedule"] == "wsd").any())


def gaussian_sensitivity(t: StudyTables) -> list[Estimate]:
    branches = _branches(t)
    return [
        trend(g, "delta_log", f"γ = {gamma:g}", +1, branches) for (gamma,), g in _per(_gaussian(t), ["gamma"])
    ]


def gaussian_overtraining(t: StudyTables) -> list[Estimate]:
    d = _gaussian(t)
    top = d["gamma"].max()
    return [ushape(d[d["gamma"] == top], "value", f"γ = {top:g}")]


def gaussian_earlier(t: StudyTables) -> list[Estimate]:
    """The two largest γ's minima: supported when both U's clear P_U and the largest γ's interval lies
    wholly below the other's (fewer tokens), contradicted when wholly above; otherwise not
    established; not computed where the U cannot be tested (one pre-training seed)."""
    d = _gaussian(t)
    gammas = sorted(d["gamma"].unique())[-2:]
    if len(gammas) < 2:
        raise NoRows("fewer than two γ")
    (b_s, runs_s, covered), (b_l, runs_l, _) = (u_fit(d[d["gamma"] == g], "value") for g in gammas)
    label = f"minimum at γ = {gammas[1]:g} / at γ = {gammas[0]:g}"
    if len(runs_s) < 2:
        return [not_computed(label, covered, ONE_RUN)]
    smaller, larger = u_runs(b_s, runs_s), u_runs(b_l, runs_l)
    both = all(f.p_u > P_U and f.bounded for f in (smaller, larger))
    if both and larger.min_high < smaller.min_low:
        verdict = SUPPORTED
    elif both and larger.min_low > smaller.min_high:
        verdict = CONTRADICTED
    else:
        verdict = NOT_ESTABLISHED
    note = f"γ = {gammas[1]:g}: {u_note(larger)}; γ = {gammas[0]:g}: {u_note(smaller)}"
    ratio = larger.min_tokens / smaller.min_tokens if both else math.nan
    return [Estimate(label, ratio, math.nan, math.nan, covered, verdict, note, pretraining_variance=True)]


# --- fine-tuning ------------------------------------------------------------------------------------


def finetune_sensitivity(t: StudyTables, column: str = "delta_log") -> list[Estimate]:
    """Per (task, LR): the trend of the degradation, relative (`delta_log`) or absolute (`delta`)."""
    branches = _branches(t)
    return [
        trend(g, column, f"{task}, LR {_lr(lr)}", +1, branches)
        for (task, lr), g in _per(_finetuned(t), ["task", "learning_rate"])
    ]


def finetune_sensitivity_absolute(t: StudyTables) -> list[Estimate]:
    return finetune_sensitivity(t, "delta")


def unigram_ppl(t: StudyTables) -> float:
    """The held-out split's perplexity under the unigram model of the study's training targets."""
    ref = t.table(layout.REFERENCE_PPL)
    return float(ref.loc[ref["eval_data"] == "pretrain", "unigram_ppl"].iloc[0])


def degenerate(rows: pd.DataFrame, unigram: float) -> pd.Series:
    """Per (task, learning rate): the mean over the runs at the smallest budget of the pre-training
    perplexity after fine-tuning, where it exceeds the unigram model's (the registered exclusion
    rule: such a rate destroys more than pre-training's context, so its curve says nothing about
    overtraining). Read at the smallest budget so that an upturn at the large budgets, the effect
    the U claims test, cannot remove its own setting."""
    first = rows[rows["budget"] == rows["budget"].min()]
    runs = first.groupby(["task", "learning_rate", "pretrain_seed"], dropna=False)["value"].mean()
    at_first = runs.groupby(level=["task", "learning_rate"]).mean()
    return at_first[at_first > unigram]


def finetune_overtraining(t: StudyTables) -> list[Estimate]:
    """Per (task, LR) the U test at the Bonferroni level over the settings that remain after the
    exclusion rule; an excluded setting is a row that says why."""
    rows = _finetuned(t)
    if rows["pretrain_seed"].nunique() < 2:
        return [
            not_computed(f"{task}, LR {_lr(lr)}", "–", ONE_RUN)
            for (task, lr), _ in _per(rows, ["task", "learning_rate"])
        ]
    unigram = unigram_ppl(t)
    out = degenerate(rows, unigram)
    settings = [(k, g) for k, g in _per(rows, ["task", "learning_rate"]) if k not in out.index]
    level = 1 - (1 - P_U) / max(len(settings), 1)
    kept = f"{len(settings)} of {len(settings) + len(out)} settings in the family"
    labelled = [(f"{task}, LR {_lr(lr)}", g) for (task, lr), g in settings]
    found = [replace_note(e, kept) for e in ushapes(labelled, "value", level)]
    excluded = [
        not_computed(
            f"{task}, LR {_lr(lr)}",
            "–",
            f"excluded by the registered rule: pre-training perplexity after fine-tuning "
            f"{ppl:.0f} at the smallest budget, above the unigram model's {unigram:.0f}",
        )
        for (task, lr), ppl in out.items()
    ]
    return found + excluded


def replace_note(e: Estimate, extra: str) -> Estimate:
    return dataclasses.replace(e, note=f"{e.note}; {extra}" if e.note else extra)


def tuned_overtraining(t: StudyTables) -> list[Estimate]:
    tuned = _tuned_runs(t)
    pre = tuned[(tuned["eval_data"] == "pretrain") & (tuned["metric"] == "ppl")]
    settings = _per(pre, ["task"])
    if not settings:
        raise NoRows(f"no rows for the pre-training perplexity at the tuned rate in study {t.study!r}")
    level = 1 - (1 - P_U) / len(settings)
    return ushapes([(f"{task}", g) for (task,), g in settings], "value", level)


def tuned_in_domain(t: StudyTables) -> list[Estimate]:
    tuned = _tuned_runs(t)
    test = tuned[
        (tuned["eval_data"] == tuned["task"]) & (tuned["split"] == "test") & (tuned["metric"] == "ppl")
    ]
    return [
        trend(g.assign(log_ppl=np.log(g["value"])), "log_ppl", f"{task}", -1)
        for (task,), g in _per(test, ["task"])
    ]


def _at_grid_edge(t: StudyTables, tuned: pd.DataFrame, method: str = "sft") -> pd.Series:
    """Whether each tuned rate is the smallest or largest rate run at its (checkpoint, task): there
    the best rate is only bounded (at most or at least the edge)."""
    runs = t.metrics(f"fine-tuning runs of {method}", modification=method)
    grid = runs.groupby(["checkpoint", "task"])["learning_rate"].agg(["min", "max"])
    edges = tuned.join(grid, on=["checkpoint", "task"])
    return (edges["learning_rate"] == edges["min"]) | (edges["learning_rate"] == edges["max"])


def optimal_lr_falls(t: StudyTables) -> list[Estimate]:
    tuned = _tuned(t).drop_duplicates(["checkpoint", "task"])
    rows = tuned.assign(value=np.log10(tuned["learning_rate"]), edge=_at_grid_edge(t, tuned))
    out = []
    for (task,), g in _per(rows, ["task"]):
        est = trend(g, "value", f"{task}", -1)
        note = f"best rate at the grid's edge at {int(g['edge'].sum())} of {len(g)} checkpoints"
        out.append(dataclasses.replace(est, note=note))
    return out


# --- the data ---------------------------------------------------------------------------------------

MAX_UNSEEN = 0.001  # pipeline/data/manifest.py's target


def _check(label: str, value: float, ok: bool, n: str, note: str = "") -> Estimate:
    return Estimate(label, value, math.nan, math.nan, n, SUPPORTED if ok else CONTRADICTED, note)


def tokens_covered(t: StudyTables) -> list[Estimate]:
    cov = t.table(layout.TOKEN_COVERAGE)
    return [
        _check(
            f"{r.task}/{r.split}",
            r.unseen_share,
            r.unseen_share <= MAX_UNSEEN,
            f"{r.tokens:,} tokens",
            f"{r.unseen_ids} ids unseen",
        )
        for r in cov.itertuples()
    ]


def no_repeated_data(t: StudyTables) -> list[Estimate]:
    runs = t.table(layout.PRETRAIN_RUNS)
    top = runs.loc[runs["epochs"].idxmax()]
    return [
        _check(
            "largest epochs of any run",
            float(top["epochs"]),
            bool(runs["epochs"].max() <= 1.0),
            f"{len(runs)} runs",
            f"at {top['budget']:,.0f} tokens, seed {top['pretrain_seed']}",
        )
    ]


def tasks_start_below_uniform(t: StudyTables) -> list[Estimate]:
    runs = t.table(layout.PRETRAIN_RUNS)
    if "vocab_size" not in runs or runs["vocab_size"].isna().all():
        raise NoRows(f"no rows for the vocabulary size (pre-training runs) of study {t.study!r}")
    vocab = float(runs["vocab_size"].max())
    base = t.metrics(
        "in-domain perplexity of the base models", modification="none", split="test", metric="ppl"
    )
    base = base[base["eval_data"] == base["task"]]
    first = base[base["budget"] == base["budget"].min()]
    return [
        _check(
            f"{task}",
            float(g["value"].max()),
            bool(g["value"].max() < vocab),
            f"{len(g)} checkpoint(s) at {g['budget'].iloc[0]:,.0f} tokens",
            f"uniform guess: {vocab:g}",
        )
        for task, g in first.groupby("task", sort=True)
    ]


# --- the schedule: tokens or the learning-rate decay (pretrain.stable_twins) -------------------------


def _schedule_arms(t: StudyTables, table: str) -> list[tuple[str, pd.DataFrame]]:
    """The arms the schedule claims compare, each (label, Δ log rows) of `table`: the Gaussian arm at
    its largest γ, fine-tuning at each (task, fixed rate)."""
    gauss = _gaussian(t, table)
    top = gauss["gamma"].max()
    arms = [(f"Gaussian, γ = {top:g}", gauss[gauss["gamma"] == top])]
    ft = _finetuned(t, table=table)
    return arms + [(f"{task}, LR {_lr(lr)}", g) for (task, lr), g in _per(ft, ["task", "learning_rate"])]


SHARED_STABLE_RUN = (
    "one pre-training seed: its budgets' decays and twins lie on one stable run, so their differences "
    "are not independent replicates"
)


def decay_sensitizes(t: StudyTables) -> list[Estimate]:
    """Per arm: decayed minus stable Δ log perplexity at equal tokens, one difference per pre-training
    seed (its runs' differences averaged over the budgets: the budgets of a seed share its stable run,
    so the seed is the unit), with a t-interval over the seeds."""
    stable = dict(_schedule_arms(t, layout.STABLE_TWIN_METRICS))
    out = []
    for label, decayed in _schedule_arms(t, layout.METRICS):
        if label not in stable:
            out.append(not_computed(label, "–", "the stable twins lack this arm"))
            continue
        b_d, cube_d, seeds_d, _ = seed_cube(decayed, "delta_log")
        b_s, cube_s, seeds_s, _ = seed_cube(stable[label], "delta_log")
        if list(b_d) != list(b_s) or seeds_d != seeds_s:
            out.append(
                not_computed(label, "–", "the decayed and stable checkpoints differ in budgets or seeds")
            )
            continue
        P, K = len(seeds_d), len(b_d)
        n = (
            f"{P} pre-training seed(s) (the unit) x {K} budgets, each budget's decayed run against the "
            "stable run at its tokens; inner seeds averaged within each run"
        )
        if P < 2:
            out.append(not_computed(label, n, SHARED_STABLE_RUN))
            continue
        with np.errstate(invalid="ignore"):
            per_seed = np.nanmean(run_means(cube_d) - run_means(cube_s), axis=1)
        out.append(mean_difference(per_seed, label, +1, n, True))
    return out


def stable_sensitivity(t: StudyTables) -> list[Estimate]:
    """Per arm: the trend of Δ log perplexity with tokens along the stable run alone (its checkpoints
    at the budgets' tokens, never decayed), a t over the pre-training seeds' slopes."""
    return [
        trend(rows, "delta_log", label, +1, True)
        for label, rows in _schedule_arms(t, layout.STABLE_TWIN_METRICS)
    ]


# --- fine-tuning methods ----------------------------------------------------------------------------


def lora_overtraining(t: StudyTables) -> list[Estimate]:
    tuned = _tuned_runs(t, "lora")
    pre = tuned[(tuned["eval_data"] == "pretrain") & (tuned["metric"] == "ppl")]
    return ushapes([(f"{task}", g) for (task,), g in _per(pre, ["task"])], "value")


def _tuned_pretrain(t: StudyTables, method: str) -> pd.Series:
    tuned = _tuned(t, method)
    pre = tuned[(tuned["eval_data"] == "pretrain") & (tuned["metric"] == "ppl")]
    return pre.set_index(["task", "checkpoint"])["value"]


def _seeds(t: StudyTables) -> int:
    """The study's pre-training seeds: with two or more, an interval over its runs covers
    pre-training variance (a run-level unit); with one, every run shares that seed's randomness."""
    return int(t.metrics("pre-training seeds", modification="none")["pretrain_seed"].nunique())


def _runs_n(count: int, t: StudyTables, what: str) -> str:
    seeds = _seeds(t)
    return (
        f"{count} pre-training runs (checkpoints; {seeds} pre-training seed{'s' if seeds != 1 else ''}){what}"
    )


def replay_forgets_less(t: StudyTables) -> list[Estimate]:
    sft, replay = _tuned_pretrain(t, "sft"), _tuned_pretrain(t, "replay")
    pairs = np.log(replay).sub(np.log(sft)).dropna()
    return [
        mean_difference(
            g.to_numpy(), f"{task}", -1, _runs_n(len(g), t, ", at each method's tuned rate"), _seeds(t) >= 2
        )
        for task, g in pairs.groupby(level="task", sort=True)
    ]


def wise_ft_forgets_less(t: StudyTables, alpha: float = 0.5) -> list[Estimate]:
    """Per method and task, at the method's tuned rate of each checkpoint: each run's (checkpoint's)
    mean over its fine-tuning seeds of log ppl at α = `alpha` minus at α = 1, the run as the unit."""
    rows = t.metrics("WiSE-FT rows", eval_data="pretrain", metric="wise_ppl")
    a = rows["extra"].map(lambda e: json.loads(e).get("wise_alpha"))
    keys = ["task", "modification", "checkpoint", "learning_rate", "lambda_reg", "seed"]
    mid = rows[a == alpha].set_index(keys)["value"]
    full = rows[a == 1.0].set_index(keys)["value"]
    pairs = np.log(mid).sub(np.log(full)).dropna().rename("diff").reset_index()
    if pairs.empty:
        raise NoRows(f"no rows for WiSE-FT at α = {alpha} and 1 in study {t.study!r}")
    out = []
    for method in sorted(pairs["modification"].unique()):
        tuned = _tuned(t, method).drop_duplicates(["checkpoint", "task", "lambda_reg"])
        keys = ["checkpoint", "task", "lambda_reg", "learning_rate"]
        at = pairs[pairs["modification"] == method].merge(tuned[keys], on=keys)
        at = at[at["lambda_reg"] == at["lambda_reg"].min()]  # the plain method (λ = 0 where it ran)
        runs = at.groupby(["task", "checkpoint"])["diff"].mean()
        for task, g in runs.groupby(level="task", sort=True):
            n = _runs_n(len(g), t, f" at {method}'s tuned rate, its seeds averaged")
            out.append(mean_difference(g.to_numpy(), f"{method}, {task}", -1, n, _seeds(t) >= 2))
    return out


# --- linearization, the NTK and sharpness ------------------------------------------------------------

KAPPA_SCALE = 0.01  # σ = 0.01 tr K / n: the middle of curvature.ntk_sigma_scales


def gap_grows(t: StudyTables) -> list[Estimate]:
    rows = fixed_rate_runs(
        t.metrics("linearization gap", modification="sft", eval_data="pretrain", metric="lin_gap")
    )
    rows = rows.assign(log_gap=np.log(rows["value"]))
    return [
        trend(g, "log_gap", f"{task}, LR {_lr(lr)}", +1)
        for (task, lr), g in _per(rows, ["task", "learning_rate"])
    ]


def sharpness_grows(t: StudyTables) -> list[Estimate]:
    rows = t.metrics("Hessian trace", modification="none", metric="hessian_trace")
    return [
        trend(g.assign(log_tr=np.log(g["value"])), "log_tr", f"{m}", +1) for (m,), g in _per(rows, ["model"])
    ]


def _kappa(t: StudyTables) -> pd.Series:
    rows = t.metrics("NTK condition numbers", modification="none", metric="ntk_kappa")
    scale = rows["extra"].map(lambda e: json.loads(e).get("sigma_scale"))
    rows = rows[np.isclose(scale.astype(float), KAPPA_SCALE)]
    if rows.empty:
        raise NoRows(f"no rows for the NTK κ at σ scale {KAPPA_SCALE} in study {t.study!r}")
    return rows.set_index(["eval_data", "checkpoint"])["value"]


def _ntk_pairs(t: StudyTables, y: pd.Series, what: str, sign: int) -> list[Estimate]:
    kappa = _kappa(t)
    out = []
    for task in sorted(set(kappa.index.get_level_values(0)) & set(y.index.get_level_values(0))):
        xs, ys = kappa.loc[task].align(y.loc[task], join="inner")
        n = f"{len(xs)} checkpoints (budgets x pre-training seeds)"
        out.append(
            rank_correlation(
                np.log(xs.to_numpy()), ys.to_numpy(), f"{task}: κ vs {what}", sign, n, _seeds(t) >= 2
            )
        )
    if not out:
        raise NoRows(f"no rows for a task with both the NTK and {what} in study {t.study!r}")
    return out


def kappa_in_domain(t: StudyTables) -> list[Estimate]:
    tuned = _tuned(t)
    test = tuned[
        (tuned["eval_data"] == tuned["task"]) & (tuned["split"] == "test") & (tuned["metric"] == "ppl")
    ]
    return _ntk_pairs(
        t, np.log(test.set_index(["task", "checkpoint"])["value"]), "in-domain test log ppl", +1
    )


def kappa_forgetting(t: StudyTables) -> list[Estimate]:
    tuned = _tuned(t)
    pre = tuned[(tuned["eval_data"] == "pretrain") & (tuned["metric"] == "ppl")]
    forgetting = np.log(pre["value"] / pre["base"])
    return _ntk_pairs(
        t,
        pd.Series(forgetting.to_numpy(), index=pd.MultiIndex.from_frame(pre[["task", "checkpoint"]])),
        "Δ log pre-training ppl",
        +1,
    )


# --- LLaVA ------------------------------------------------------------------------------------------


def vlm_above_chance(t: StudyTables, level: str = "best") -> list[Estimate]:
    """Per LLaVA task: each run's (checkpoint's) tuned VLM score, its stage-2 seeds averaged, minus the
    `level` blind baseline of the study's evaluation sets (data/vlm/data.json's `chance`: the best
    of the blind guessers by default)."""
    path = t.path(layout.VLM_DATA)
    chance = json.loads(path.read_text()).get("chance") or {}
    if level not in chance or "vlm_score" not in chance[level]:
        raise NoRows(f"no rows for the {level} chance score in data/vlm/data.json of study {t.study!r}")
    runs = _vlm_runs(t)
    score = runs[(runs["metric"] == "vlm_score")]
    if score.empty:
        raise NoRows(f"no rows for the VLM score in study {t.study!r}")
    floor = float(chance[level]["vlm_score"])
    out = []
    for (task,), g in _per(score, ["task"]):
        per_run = g.groupby("checkpoint")["value"].mean() - floor
        n = _runs_n(len(per_run), t, " at the tuned rate, stage-2 seeds averaged")
        label = f"{task} ({level} blind {floor:.1f})"
        out.append(mean_difference(per_run.to_numpy(), label, +1, n, _seeds(t) >= 2))
    return out


def _vlm_runs(t: StudyTables) -> pd.DataFrame:
    """LLaVA's stage-2 runs at their tuned rate (a study's text tasks are not the VLM's)."""
    runs = _tuned_runs(t)
    runs = runs[runs["task"].isin(VLM_TASKS)]
    if runs.empty:
        raise NoRows(f"no rows for LLaVA's stage 2 ({', '.join(VLM_TASKS)}) in study {t.study!r}")
    return runs


def vlm_forgetting_grows(t: StudyTables) -> list[Estimate]:
    runs = _vlm_runs(t)
    pre = runs[(runs["eval_data"] == "pretrain") & (runs["metric"] == "ppl")]
    pre = pre.assign(delta_log=np.log(pre["value"] / pre["base"]))
    return [trend(g, "delta_log", f"{task}", +1) for (task,), g in _per(pre, ["task"])]


# --- theory -----------------------------------------------------------------------------------------


def theory_inflection(t: StudyTables) -> list[Estimate]:
    """Per (spectrum or task, γ or λ): the share of seeds whose closed-form inflection of the real
    initialisation equals Proposition 4.3's / Theorem 4.7's prediction."""
    m = t.table(layout.THEORY_METRICS)
    keys = ["checkpoint", "task", "modification", "gamma", "lambda_reg"]
    estimator = m["extra"].map(lambda e: json.loads(e).get("estimator"))
    init = m["extra"].map(lambda e: json.loads(e).get("init"))
    theory = (m["metric"] == "predicted_inflection_n") & estimator.isin([None, "closed_form"])
    predicted = m[theory].drop_duplicates(keys).set_index(keys)["value"]
    # the perturbation's expected loss in closed form, the fine-tuning's simulated runs
    observed = ((estimator == "closed_form") & (init == "real")) | (estimator == "simulation")
    sim = m[(m["metric"] == "inflection_n") & observed]

    if predicted.empty or sim.empty:
        raise NoRows(f"no rows for the theory track's inflections in study {t.study!r}")
    sim = sim.join(predicted.rename("predicted"), on=keys)
    out = []
    for (what, mod), g in sim.groupby(["checkpoint", "modification"], sort=True):
        agree = (g["value"] == g["predicted"]).to_numpy()
        settings = g.groupby(["gamma", "lambda_reg"], dropna=False).ngroups
        n = f"{len(g)} (setting, seed) pairs: {settings} settings x {g['seed'].nunique()} seeds"
        label = f"{what}, {'perturbation' if mod == 'gaussian' else 'fine-tuning'}"
        verdict = SUPPORTED if agree.all() else (CONTRADICTED if agree.mean() < 0.5 else NOT_ESTABLISHED)
        out.append(
            Estimate(
                label, float(agree.mean()), math.nan, math.nan, n, verdict, f"{int((~agree).sum())} disagree"
            )
        )
    return out


# a grid point of the transfer table: what a simulated mean and its closed form share
POINT = ["paper", "experiment", "variant", "method", "metric", "depth", "d", "n", "theta", "sigma", "ridge"]
POINT += ["target_norm", "pretrain_time", "features"]


def z_scores(df: pd.DataFrame) -> pd.DataFrame:
    """Every simulated mean of theory/transfer.parquet next to its exact closed form (same grid point),
    with z = Δ/SE (deterministic runs, with no standard error, get z = 0 where they agree to 1e-12 and
    inf where they do not)."""
    sim = df[(df["estimator"] == "simulation") & df["risk_se"].notna()]
    cf = df[(df["estimator"] == "closed_form") & (df["limit"] == "exact")]
    m = sim.merge(cf[[*POINT, "risk"]], on=POINT, suffixes=("", "_cf"))
    diff = m["risk"] - m["risk_cf"]
    se = m["risk_se"].fillna(0.0)
    exact_zero = (se == 0) & (diff.abs() <= 1e-12 * (1 + m["risk_cf"].abs()))
    return m.assign(z=np.where(se > 0, diff / se.where(se > 0, 1.0), np.where(exact_zero, 0.0, np.inf)))


def transfer_exact(t: StudyTables) -> list[Estimate]:
    """Per paper: the largest |z| of its simulated means against their exact closed forms, against
    the two-sided Bonferroni bound at 5% over its m means."""
    from scipy.stats import norm

    z = z_scores(t.table(layout.THEORY_TRANSFER))
    out = []
    for paper, g in z.groupby("paper", sort=True):
        bound = float(norm.ppf(1 - 0.025 / len(g)))
        top = float(g["z"].abs().max())
        verdict = SUPPORTED if top <= bound else CONTRADICTED
        out.append(
            Estimate(
                f"{paper}",
                top,
                math.nan,
                math.nan,
                f"{len(g):,} simulated means",
                verdict,
                f"bound {bound:.2f}",
            )
        )
    return out


def compute(name: str) -> Callable[[StudyTables], list[Estimate]]:
    """The function of this module a claim record names (claims.Claim.compute)."""
    fn = globals().get(name)
    if not callable(fn):
        raise KeyError(f"pipeline/analysis/claim_stats.py has no claim function {name!r}")
    return fn
