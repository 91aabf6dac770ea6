"""Registered claims: every finding the docs state, as a record (what is compared, the statistic, its
interval, the decision rule stated before the data) and a function computing it from a study's
tables. `pipeline/analysis/findings.py` renders them; nothing in the docs states a number by hand.

A claim names the study whose tables it reads (the evidence study for the paper's headline
phenomena, the method studies for theirs). Each returns one `Estimate` per setting (a γ, a task and
learning rate); the claim's verdict combines them by its rule: `all_of` (every setting must hold)
or `any_of` (at least one, each tested at the Bonferroni level over the settings).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.analysis.evidence import (
    CONTRADICTED,
    LEVEL,
    NOT_ESTABLISHED,
    P_U,
    SEED,
    SUPPORTED,
    Estimate,
    NoRows,
    all_of,
    any_of,
    mean_difference,
    rank_correlation,
    trend,
    u_fit,
    u_note,
    ushape,
)
from pipeline.analysis.stats import deltas, fixed_rate_runs, tuned_table

# The files of a study a claim may read (relative to results/<study>/; `make docs` copies them to
# docs/reference/<study>/).
TABLES = (
    "metrics.parquet",
    "data/token_coverage.parquet",
    "data/corpus_manifest.parquet",
    "analysis/pretrain_runs.parquet",
    "theory/metrics.parquet",
)


class StudyTables:
    """A study's tables, each read on first use from `root` (results/<study> or its reference copy)."""

    def __init__(self, root: str | Path, study: str):
        self.root, self.study = Path(root), study
        self._cache: dict[str, pd.DataFrame] = {}

    def table(self, rel: str) -> pd.DataFrame:
        if rel not in self._cache:
            path = self.root / rel
            if not path.is_file():
                raise NoRows(f"no rows for {rel} of study {self.study!r} (run it: docs/findings.md says how)")
            self._cache[rel] = pd.read_parquet(path)
        return self._cache[rel]

    def metrics(self, what: str, **equal: object) -> pd.DataFrame:
        """The metric rows whose columns equal `equal` (a tuple: any of), or NoRows naming `what`."""
        m = self.table("metrics.parquet")
        keep = np.ones(len(m), dtype=bool)
        for col, want in equal.items():
            keep &= m[col].isin(want).to_numpy() if isinstance(want, tuple) else (m[col] == want).to_numpy()
        rows = m[keep]
        if rows.empty:
            raise NoRows(f"no rows for {what} in study {self.study!r}")
        return rows


@dataclass(frozen=True)
class Claim:
    """One registered claim (module docstring)."""

    key: str
    title: str  # a short name, e.g. "Progressive sensitivity to Gaussian perturbation"
    section: str
    study: str
    statement: str  # the claim, as the paper (or our docs) would state it
    compares: str  # what is compared
    statistic: str  # the statistic and how its interval is made
    rule: str  # the decision rule, stated before the data
    compute: Callable[[StudyTables], list[Estimate]]
    combine: Callable[[list[str]], str] = all_of
    confounds: str = ""  # what in the toy setup could produce the result besides the claim
    tables: tuple[str, ...] = field(default=("metrics.parquet",))


@dataclass(frozen=True)
class Finding:
    """A claim evaluated on a study's tables: its per-setting estimates and verdict, or why not."""

    claim: Claim
    estimates: list[Estimate]
    verdict: str  # supported | not established | contradicted | not computed
    missing: str = ""  # for not computed: the rows that are missing


def evaluate(claim: Claim, tables: StudyTables) -> Finding:
    try:
        estimates = claim.compute(tables)
    except NoRows as err:
        return Finding(claim, [], "not computed", str(err))
    return Finding(claim, estimates, claim.combine([e.verdict for e in estimates]))


# --- rows -------------------------------------------------------------------------------------------


def _rng() -> np.random.Generator:
    return np.random.default_rng(SEED)


def _pretrain_ppl(t: StudyTables, modification: str | tuple) -> pd.DataFrame:
    return t.metrics(
        f"pre-training perplexity ({modification})",
        modification=modification,
        eval_data="pretrain",
        metric="ppl",
    )


def _gaussian(t: StudyTables) -> pd.DataFrame:
    return deltas(pd.concat([_pretrain_ppl(t, "none"), _pretrain_ppl(t, "gaussian")]), "ppl").dropna(
        subset=["gamma"]
    )


def _finetuned(t: StudyTables, method: str = "sft") -> pd.DataFrame:
    """Pre-training ppl rows of `method`'s fixed-rate runs (every seed that ran at every budget), with
    Δ log against their base model."""
    rows = pd.concat([_pretrain_ppl(t, "none"), _pretrain_ppl(t, method)])
    return deltas(fixed_rate_runs(rows), "ppl").query("modification == @method")


def _tuned(t: StudyTables, method: str = "sft") -> pd.DataFrame:
    """Every metric of `method` at each checkpoint's tuned learning rate (stats.tuned_table: the
    best seed-mean in-domain validation ppl), one row per (checkpoint, metric) with its seed mean."""
    tuned = tuned_table(t.metrics(f"fine-tuning runs of {method}", modification=("none", method)))
    tuned = tuned[tuned["modification"] == method]
    if tuned.empty:
        raise NoRows(f"no rows for the tuned runs of {method} in study {t.study!r}")
    return tuned.rename(columns={"mean": "value"}).assign(seed=None)


def _per(rows: pd.DataFrame, keys: list[str]) -> list[tuple[tuple, pd.DataFrame]]:
    return [((k,) if not isinstance(k, tuple) else k, g) for k, g in rows.groupby(keys, sort=True)]


def _lr(x: float) -> str:
    return f"{x:.0e}".replace("e-0", "e-")


# --- the Gaussian arm -------------------------------------------------------------------------------


def base_improves(t: StudyTables) -> list[Estimate]:
    rows = _pretrain_ppl(t, "none").assign(log_ppl=lambda r: np.log(r["value"]))
    return [trend(g, "log_ppl", f"{m}", -1, _rng()) for (m,), g in _per(rows, ["model"])]


def gaussian_sensitivity(t: StudyTables) -> list[Estimate]:
    return [
        trend(g, "delta_log", f"γ = {gamma:g}", +1, _rng()) for (gamma,), g in _per(_gaussian(t), ["gamma"])
    ]


def gaussian_overtraining(t: StudyTables) -> list[Estimate]:
    d = _gaussian(t)
    top = d["gamma"].max()
    return [ushape(d[d["gamma"] == top], "value", f"γ = {top:g}")]


def gaussian_earlier(t: StudyTables) -> list[Estimate]:
    """The two largest γ's minima: supported when the largest γ's interval lies wholly below the
    other's (fewer tokens), contradicted when wholly above; where either is open or missing, not
    established."""
    d = _gaussian(t)
    gammas = sorted(d["gamma"].unique())[-2:]
    if len(gammas) < 2:
        raise NoRows("fewer than two γ")
    (smaller, covered), (larger, _) = (u_fit(d[d["gamma"] == g], "value") for g in gammas)
    if not (smaller.bounded and larger.bounded):
        verdict = NOT_ESTABLISHED
    elif larger.min_high < smaller.min_low:
        verdict = SUPPORTED
    elif larger.min_low > smaller.min_high:
        verdict = CONTRADICTED
    else:
        verdict = NOT_ESTABLISHED
    note = f"γ = {gammas[1]:g}: {u_note(larger)}; γ = {gammas[0]:g}: {u_note(smaller)}"
    ratio = larger.min_tokens / smaller.min_tokens
    return [
        Estimate(
            f"minimum at γ = {gammas[1]:g} / at γ = {gammas[0]:g}",
            ratio,
            math.nan,
            math.nan,
            covered,
            verdict,
            note,
        )
    ]


# --- fine-tuning ------------------------------------------------------------------------------------


def finetune_sensitivity(t: StudyTables) -> list[Estimate]:
    return [
        trend(g, "delta_log", f"{task}, LR {_lr(lr)}", +1, _rng())
        for (task, lr), g in _per(_finetuned(t), ["task", "learning_rate"])
    ]


def finetune_overtraining(t: StudyTables) -> list[Estimate]:
    settings = _per(_finetuned(t), ["task", "learning_rate"])
    level = 1 - (1 - P_U) / len(settings)
    return [ushape(g, "value", f"{task}, LR {_lr(lr)}", level) for (task, lr), g in settings]


def tuned_overtraining(t: StudyTables) -> list[Estimate]:
    tuned = _tuned(t)
    pre = tuned[(tuned["eval_data"] == "pretrain") & (tuned["metric"] == "ppl")]
    settings = _per(pre, ["task"])
    level = 1 - (1 - P_U) / len(settings)
    return [ushape(g, "value", f"{task}", level) for (task,), g in settings]


def tuned_in_domain(t: StudyTables) -> list[Estimate]:
    tuned = _tuned(t)
    test = tuned[
        (tuned["eval_data"] == tuned["task"]) & (tuned["split"] == "test") & (tuned["metric"] == "ppl")
    ]
    return [
        trend(g.assign(log_ppl=np.log(g["value"])), "log_ppl", f"{task}", -1, _rng())
        for (task,), g in _per(test, ["task"])
    ]


def optimal_lr_falls(t: StudyTables) -> list[Estimate]:
    tuned = _tuned(t).drop_duplicates(["checkpoint", "task"])
    rows = tuned.assign(value=np.log10(tuned["learning_rate"]))
    return [trend(g, "value", f"{task}", -1, _rng()) for (task,), g in _per(rows, ["task"])]


# --- the data ---------------------------------------------------------------------------------------

MAX_UNSEEN = 0.001  # pipeline/data/manifest.py's target


def _check(label: str, value: float, ok: bool, n: str, note: str = "") -> Estimate:
    return Estimate(label, value, math.nan, math.nan, n, SUPPORTED if ok else CONTRADICTED, note)


def tokens_covered(t: StudyTables) -> list[Estimate]:
    cov = t.table("data/token_coverage.parquet")
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
    runs = t.table("analysis/pretrain_runs.parquet")
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
    runs = t.table("analysis/pretrain_runs.parquet")
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


# --- fine-tuning methods ----------------------------------------------------------------------------


def lora_overtraining(t: StudyTables) -> list[Estimate]:
    tuned = _tuned(t, "lora")
    pre = tuned[(tuned["eval_data"] == "pretrain") & (tuned["metric"] == "ppl")]
    return [ushape(g, "value", f"{task}") for (task,), g in _per(pre, ["task"])]


def _tuned_pretrain(t: StudyTables, method: str) -> pd.Series:
    tuned = _tuned(t, method)
    pre = tuned[(tuned["eval_data"] == "pretrain") & (tuned["metric"] == "ppl")]
    return pre.set_index(["task", "checkpoint"])["value"]


def replay_forgets_less(t: StudyTables) -> list[Estimate]:
    sft, replay = _tuned_pretrain(t, "sft"), _tuned_pretrain(t, "replay")
    pairs = np.log(replay).sub(np.log(sft)).dropna()
    return [
        mean_difference(
            g.to_numpy(), f"{task}", -1, _rng(), f"{len(g)} checkpoints, at each method's tuned rate"
        )
        for task, g in pairs.groupby(level="task", sort=True)
    ]


def wise_ft_forgets_less(t: StudyTables, alpha: float = 0.5) -> list[Estimate]:
    rows = t.metrics("WiSE-FT rows", eval_data="pretrain", metric="wise_ppl")
    a = rows["extra"].map(lambda e: json.loads(e).get("wise_alpha"))
    keys = ["task", "modification", "checkpoint", "learning_rate", "lambda_reg", "seed"]
    mid = rows[a == alpha].set_index(keys)["value"]
    full = rows[a == 1.0].set_index(keys)["value"]
    pairs = np.log(mid).sub(np.log(full)).dropna()
    if pairs.empty:
        raise NoRows(f"no rows for WiSE-FT at α = {alpha} and 1 in study {t.study!r}")
    return [
        mean_difference(g.to_numpy(), f"{method}", -1, _rng(), f"{len(g)} runs (every checkpoint and rate)")
        for method, g in pairs.groupby(level="modification", sort=True)
    ]


# --- linearization, the NTK and sharpness ------------------------------------------------------------

KAPPA_SCALE = 0.01  # σ = 0.01 tr K / n: the middle of curvature.ntk_sigma_scales


def gap_grows(t: StudyTables) -> list[Estimate]:
    rows = fixed_rate_runs(
        t.metrics("linearization gap", modification="sft", eval_data="pretrain", metric="lin_gap")
    )
    rows = rows.assign(log_gap=np.log(rows["value"]))
    return [
        trend(g, "log_gap", f"{task}, LR {_lr(lr)}", +1, _rng())
        for (task, lr), g in _per(rows, ["task", "learning_rate"])
    ]


def sharpness_grows(t: StudyTables) -> list[Estimate]:
    rows = t.metrics("Hessian trace", modification="none", metric="hessian_trace")
    return [
        trend(g.assign(log_tr=np.log(g["value"])), "log_tr", f"{m}", +1, _rng())
        for (m,), g in _per(rows, ["model"])
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
            rank_correlation(np.log(xs.to_numpy()), ys.to_numpy(), f"{task}: κ vs {what}", sign, _rng(), n)
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


# --- the registry -----------------------------------------------------------------------------------

TREND = (
    "least-squares slope of the seed-mean curve against log2 tokens (change per doubling); "
    f"{LEVEL:.0%} percentile interval of a hierarchical bootstrap (pre-training seeds, then the seeds "
    "within each; with no replicate at all, the slope's t-interval from the scatter about the line)"
)
U_STAT = (
    "P(U) of the U-shape detector (pipeline/analysis/inflection.py, docs/inflection.md) on log "
    "perplexity against log tokens, over the replicate units (pre-training seeds where there are "
    "several), with the minimum's location and its 95% interval"
)
U_RULE = (
    "supported if P(U) > {level}; contradicted if the curve still falls at its largest budgets (the "
    "slope over the upper half of the budgets has a 95% interval below 0); otherwise not established"
)
TOY = (
    "toy scale: a 164k-parameter model, budgets of 0.5-8M tokens (0.05-0.73 epochs), 100 fine-tuning "
    "steps; one corpus mix; cosine to zero at each budget, so a budget's run is not a prefix of a "
    "longer one"
)

DATA = "the pre-training corpus and tokenizer of the study (results/<study>/data/)"

CLAIMS: list[Claim] = [
    Claim(
        "tokens-covered",
        "The tasks' tokens occur in pre-training",
        "Data",
        "evidence",
        "No task is made of tokens pre-training never predicts: at most 0.1% of each fine-tuning "
        "task's evaluation tokens have an id that never occurs as a pre-training target.",
        "each task's validation and test tokens against the ids of the training split",
        "share of the split's tokens whose id never occurs as a target in data/train_tokens.npy",
        "supported if every share is at most 0.001; otherwise contradicted",
        tokens_covered,
        confounds=DATA,
    ),
    Claim(
        "no-repeated-data",
        "No run repeats data",
        "Data",
        "evidence",
        "No pre-training run repeats data: every run trains on at most one epoch of the training split.",
        "each run's tokens trained against the training split's tokens in whole training chunks",
        "the largest epochs of any run",
        "supported if it is at most 1; otherwise contradicted",
        no_repeated_data,
        confounds=DATA,
    ),
    Claim(
        "tasks-below-uniform",
        "Every task starts below a uniform guess",
        "Data",
        "evidence",
        "Every task starts below a uniform guess: the base models' in-domain test perplexity at the "
        "smallest budget is below the vocabulary size.",
        "in-domain test perplexity of the base model at the smallest budget, per task (the worst "
        "pre-training seed)",
        "that perplexity against the vocabulary size",
        "supported if every task's is below it; otherwise contradicted",
        tasks_start_below_uniform,
        confounds=DATA,
    ),
    Claim(
        "base-improves",
        "The base model improves with tokens",
        "Pre-training",
        "evidence",
        "The unmodified model's held-out perplexity falls with pre-training tokens.",
        "held-out pre-training perplexity of the base models against tokens",
        "slope of log perplexity per doubling; " + TREND,
        "supported if the interval lies below 0; contradicted if above; otherwise not established",
        base_improves,
        confounds=TOY,
    ),
    Claim(
        "gaussian-sensitivity",
        "Progressive sensitivity to Gaussian perturbation",
        "Gaussian perturbation",
        "evidence",
        "Progressive sensitivity: a Gaussian perturbation of the same relative size (γ x each tensor's "
        "init std) degrades the model more the longer it was pre-trained (Section 3.2, Figure 3).",
        "Δ log perplexity, ln(perturbed / base), against tokens, at each γ",
        "slope of Δ log perplexity per doubling; " + TREND,
        "supported if every γ's interval lies above 0; contradicted if every γ's lies below 0; "
        "otherwise not established",
        gaussian_sensitivity,
        confounds=TOY,
    ),
    Claim(
        "gaussian-overtraining",
        "Catastrophic overtraining under Gaussian perturbation",
        "Gaussian perturbation",
        "evidence",
        "Catastrophic overtraining under perturbation: at the largest γ the perturbed perplexity is "
        "U-shaped in tokens: past some budget, more pre-training makes the perturbed model worse "
        "(Section 3.2, Figure 3 right).",
        "perturbed perplexity against tokens at the largest γ",
        U_STAT,
        U_RULE.format(level=P_U),
        gaussian_overtraining,
        confounds=TOY,
    ),
    Claim(
        "gaussian-earlier",
        "A larger perturbation turns up earlier",
        "Gaussian perturbation",
        "evidence",
        "A larger perturbation turns the curve up earlier: the minimum of the perturbed perplexity comes "
        "at fewer tokens for the largest γ than for the next one (Section 3.2).",
        "the location of the perturbed perplexity's minimum at the two largest γ",
        "each γ's minimum location and 95% interval from the U-shape detector",
        "supported if the largest γ's interval lies wholly below the other's; contradicted if wholly "
        "above; otherwise (overlap, or no interval) not established",
        gaussian_earlier,
        confounds=TOY,
    ),
    Claim(
        "finetune-sensitivity",
        "Progressive sensitivity to fine-tuning at a fixed rate",
        "Fine-tuning",
        "evidence",
        "Fine-tuning at a fixed learning rate degrades the pre-training perplexity more the longer the "
        "model was pre-trained (Section 3.4.1, Figures 4-5).",
        "Δ log pre-training perplexity (fine-tuned / base) against tokens, per task and learning rate",
        "slope of Δ log perplexity per doubling; " + TREND,
        "supported if every (task, LR)'s interval lies above 0; contradicted if every one lies below 0; "
        "otherwise not established",
        finetune_sensitivity,
        confounds=TOY,
    ),
    Claim(
        "finetune-overtraining",
        "Catastrophic overtraining at a fixed learning rate",
        "Fine-tuning",
        "evidence",
        "Catastrophic overtraining at a fixed learning rate: for some task and rate, the pre-training "
        "perplexity after fine-tuning is U-shaped in tokens (Figures 4-5).",
        "pre-training perplexity after fine-tuning against tokens, per task and learning rate",
        U_STAT,
        "supported if P(U) > 1 − 0.05/k for at least one of the k (task, LR) settings (Bonferroni); "
        "contradicted if every setting still falls at its largest budgets; otherwise not established",
        finetune_overtraining,
        any_of,
        confounds=TOY,
    ),
    Claim(
        "tuned-overtraining",
        "Catastrophic overtraining at the tuned learning rate",
        "Fine-tuning",
        "evidence",
        "Catastrophic overtraining survives tuning the learning rate: at each checkpoint's best "
        "in-domain learning rate, the pre-training perplexity is U-shaped in tokens for some task "
        "(Section 3.4.2, Figure 6).",
        "pre-training perplexity at the tuned learning rate (best seed-mean in-domain validation "
        "perplexity per checkpoint) against tokens, per task",
        U_STAT,
        "supported if P(U) > 1 − 0.05/k for at least one of the k tasks (Bonferroni); contradicted if "
        "every task's curve still falls at its largest budgets; otherwise not established",
        tuned_overtraining,
        any_of,
        confounds=TOY + "; the tuned rate is chosen from a grid half a decade apart",
    ),
    Claim(
        "tuned-in-domain",
        "In-domain performance keeps improving at the tuned rate",
        "Fine-tuning",
        "evidence",
        "The in-domain performance after fine-tuning at the tuned learning rate keeps improving with "
        "pre-training tokens (Figure 6, left).",
        "in-domain test perplexity at the tuned learning rate against tokens, per task",
        "slope of log perplexity per doubling; " + TREND,
        "supported if every task's interval lies below 0; contradicted if every one lies above 0; "
        "otherwise not established",
        tuned_in_domain,
        confounds=TOY,
    ),
    Claim(
        "optimal-lr-falls",
        "The optimal learning rate falls with tokens",
        "Fine-tuning",
        "evidence",
        "The optimal fine-tuning learning rate decreases with pre-training tokens (Section 3.4.2, Figure 7).",
        "log10 of the tuned learning rate against tokens, per task",
        "slope of log10 LR per doubling; " + TREND,
        "supported if every task's interval lies below 0; contradicted if every one lies above 0; "
        "otherwise not established",
        optimal_lr_falls,
        confounds=TOY + "; the rate is read off a grid half a decade apart, so the slope moves in steps",
    ),
]


CLAIMS += [
    Claim(
        "lora-overtraining",
        "LoRA shows catastrophic overtraining",
        "Fine-tuning methods",
        "lora",
        "LoRA shows catastrophic overtraining too: at LoRA's tuned learning rate the pre-training "
        "perplexity is U-shaped in tokens.",
        "pre-training perplexity after LoRA fine-tuning at its tuned rate against tokens",
        U_STAT,
        U_RULE.format(level=P_U),
        lora_overtraining,
        confounds=TOY + "; LoRA r = 4 on a 164k-parameter model, 40 steps",
    ),
    Claim(
        "replay-forgets-less",
        "Replay reduces forgetting",
        "Fine-tuning methods",
        "lora",
        "Replaying pre-training data during fine-tuning reduces forgetting: at each method's tuned "
        "rate, the pre-training perplexity after fine-tuning with replay is below that without.",
        "log pre-training perplexity, replay minus full fine-tuning, per checkpoint at each method's "
        "tuned learning rate",
        "mean paired difference; 95% percentile bootstrap interval over the checkpoints",
        "supported if the interval lies below 0; contradicted if above; otherwise (or with one pair) "
        "not established",
        replay_forgets_less,
        confounds=TOY + "; each method's rate is searched separately, so the two differ in rate too",
    ),
    Claim(
        "wise-ft-forgets-less",
        "WiSE-FT buys back forgetting",
        "Fine-tuning methods",
        "lora",
        "WiSE-FT buys back forgetting: the weight-space midpoint θ_pre + ½(θ_ft − θ_pre) has a lower "
        "pre-training perplexity than the fine-tuned model.",
        "log pre-training perplexity at α = ½ minus at α = 1, per fine-tuning run",
        "mean paired difference; 95% percentile bootstrap interval over the runs",
        "supported if the interval lies below 0; contradicted if above; otherwise not established",
        wise_ft_forgets_less,
        confounds=TOY + "; the runs of one method share its checkpoints, so they are not independent",
    ),
]


NTK_STAT = (
    "Spearman's ρ over the checkpoints between log κ(K + σI) of the empirical NTK on 64 training "
    "examples of the task (σ = 0.01 tr K / n) and {y} at the tuned learning rate; 95% percentile "
    "bootstrap interval over the checkpoints"
)
CLAIMS += [
    Claim(
        "gap-grows",
        "The linearization gap grows with tokens",
        "Linearization and the NTK",
        "evidence",
        "Fine-tuning leaves the linear regime more the longer the model was pre-trained: at a fixed "
        "learning rate the linearization gap along θ_ft − θ_pre grows with tokens.",
        "the relative logit gap ‖f(θ_ft) − f(θ_pre) − J δ‖ / ‖f(θ_ft) − f(θ_pre)‖ on held-out "
        "pre-training tokens against tokens, per task and learning rate",
        "slope of the log gap per doubling; " + TREND,
        "supported if every (task, LR)'s interval lies above 0; contradicted if every one lies below 0; "
        "otherwise not established",
        gap_grows,
        confounds=TOY,
    ),
    Claim(
        "sharpness-grows",
        "Progressive sharpening",
        "Linearization and the NTK",
        "evidence",
        "Progressive sharpening: the trace of the pre-training loss's Hessian grows with tokens "
        "(Appendix D).",
        "Hutchinson's tr(H) on 512 held-out tokens against tokens",
        "slope of log tr(H) per doubling; " + TREND,
        "supported if the interval lies above 0; contradicted if below; otherwise not established",
        sharpness_grows,
        confounds=TOY + "; tr(H) from 8 Rademacher probes",
    ),
    Claim(
        "kappa-in-domain",
        "NTK conditioning predicts in-domain performance",
        "Linearization and the NTK",
        "evidence",
        "A worse-conditioned NTK goes with worse fine-tuning: across checkpoints, κ of the task's "
        "empirical NTK rises with the in-domain test perplexity at the tuned learning rate "
        '("Linearization explains fine-tuning", Theorem 5).',
        "log κ against the in-domain test log perplexity at the tuned rate, per task",
        NTK_STAT.format(y="the in-domain test log perplexity"),
        "supported if every task's interval lies above 0; contradicted if every one lies below 0; "
        "otherwise not established",
        kappa_in_domain,
        confounds=TOY + "; κ and the perplexity both move with tokens, so a shared trend can make them "
        "correlate without one explaining the other",
    ),
    Claim(
        "kappa-forgetting",
        "NTK conditioning predicts forgetting",
        "Linearization and the NTK",
        "evidence",
        "A worse-conditioned NTK goes with more forgetting: across checkpoints, κ rises with the "
        "Δ log pre-training perplexity at the tuned learning rate.",
        "log κ against Δ log pre-training perplexity (fine-tuned / base) at the tuned rate, per task",
        NTK_STAT.format(y="Δ log pre-training perplexity"),
        "supported if every task's interval lies above 0; contradicted if every one lies below 0; "
        "otherwise not established",
        kappa_forgetting,
        confounds=TOY + "; as above, a shared trend with tokens",
    ),
]


def claims_of(study: str) -> list[Claim]:
    return [c for c in CLAIMS if c.study == study]


def to_json(f: Finding) -> str:
    """A finding as one JSON line (the findings table of a study)."""
    return json.dumps(
        {
            "key": f.claim.key,
            "verdict": f.verdict,
            "missing": f.missing,
            "estimates": [vars(e) for e in f.estimates],
        },
        default=float,
    )
