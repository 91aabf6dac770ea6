"""Registered claims: every finding the docs state, as a record (what is compared, the statistic, its
interval, the decision rule stated before the data) and a function computing it from a study's
tables. `pipeline/analysis/findings.py` renders them; nothing in the docs states a number by hand.

A claim names the study whose tables it reads, and declares those tables (`tables`); it reads no
other (StudyTables.reading enforces it), and the findings rule's inputs and the reference copies
derive from the declarations (`tables_read`). The records import nothing heavy (the workflow reads
them at parse time); `compute` names the function of claim_stats.py that a finding calls.

A claim names the study whose tables it reads (the evidence study for the paper's headline
phenomena, the method studies for theirs). Each returns one `Estimate` per setting (a γ, a task and
learning rate); the claim's verdict combines them by its rule: `all_of` (every setting must hold)
or `any_of` (at least one, each tested at the Bonferroni level over the settings).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from pipeline import layout
from pipeline.analysis.verdicts import NOT_COMPUTED, P_U, NoRows, all_of, any_of

if TYPE_CHECKING:
    from pipeline.analysis.evidence import Estimate
    from pipeline.analysis.study_tables import StudyTables


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
    compute: str  # the function of pipeline/analysis/claim_stats.py computing its estimates
    combine: Callable[[list[str]], str] = all_of
    confounds: str = ""  # what in the toy setup could produce the result besides the claim
    tables: tuple[str, ...] = field(kw_only=True)  # the study's tables it reads (pipeline/layout.py)
    replica_of: str | None = None  # the key of the claim this one repeats on another study

    def estimates(self, tables: StudyTables) -> list[Estimate]:
        """Its estimates on a study's tables, reading only the tables it declares."""
        from pipeline.analysis.claim_stats import compute  # numpy, pandas: not at parse time

        return compute(self.compute)(tables.reading(self.tables, self.key))


@dataclass(frozen=True)
class Finding:
    """A claim evaluated on a study's tables: its per-setting estimates and verdict, or why not."""

    claim: Claim
    estimates: list[Estimate]
    verdict: str  # supported | not established | contradicted | not computed
    missing: str = ""  # for not computed: the rows that are missing


def evaluate(claim: Claim, tables: StudyTables) -> Finding:
    try:
        estimates = claim.estimates(tables)
    except NoRows as err:
        return Finding(claim, [], NOT_COMPUTED, str(err))
    verdict = claim.combine([e.verdict for e in estimates])
    reasons = sorted({e.note.removeprefix("not computed: ") for e in estimates if e.verdict == NOT_COMPUTED})
    return Finding(claim, estimates, verdict, "; ".join(reasons) if verdict == NOT_COMPUTED else "")


# --- the registry -----------------------------------------------------------------------------------

TREND = (
    "least-squares slope against log2 tokens (change per doubling), the pre-training run as the unit "
    "(each run's inner seeds averaged): the mean of the pre-training seeds' slopes with a 95% "
    "t-interval over the seeds (df = seeds − 1); with one seed, the slope of its runs with the "
    "t-interval from their scatter about the line (df = budgets − 2)"
)
U_STAT = (
    "P(U) of the U-shape detector (pipeline/analysis/inflection.py, docs/inflection.md) on log "
    "perplexity against log tokens over the runs (each run's inner seeds averaged), the pre-training "
    "seeds as paired units (not computed with one seed), with the minimum's location and its "
    "interval where P(U) clears the level: 95%, or 1 − 0.05·R/m where R of a claim's m settings clear "
    "it (false coverage-statement rate ≤ 5%, Benjamini & Yekutieli 2005), and the 95% interval given "
    "that the test passed (selective t, Fithian, Sun & Taylor 2014)"
)
U_RULE = (
    "supported if P(U) > {level}; contradicted if the curve reliably falls at its largest budgets (the "
    "run-level slope over the upper half of the budgets, the median budget included, has a 95% "
    "interval below 0) and the minimum's interval lies wholly at or beyond the largest budget; not "
    "reached within the budgets if the upper half's slope is negative and the minimum's estimate is "
    "at the largest budget, short of that; otherwise not established"
)
TOY = (
    "toy scale: a 164k-parameter model, budgets of a few million tokens (under one epoch: the claim "
    "'No run repeats data' gives the largest), 100 fine-tuning steps; one corpus mix; cosine to zero "
    "at each budget, so a budget's run is not a prefix of a longer one"
)

DATA = "the pre-training corpus and tokenizer of the study (results/<study>/data/)"
NTK_STAT = (
    "Spearman's ρ over the checkpoints (each a pre-training run) between log κ(K + σI) of the "
    "empirical NTK on 64 training examples of the task (σ = 0.01 tr K / n) and {y} at the tuned "
    "learning rate; 95% Fisher-z interval (Bonett & Wright 2000's variance)"
)

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
        "tokens_covered",
        tables=(layout.TOKEN_COVERAGE,),
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
        "no_repeated_data",
        tables=(layout.PRETRAIN_RUNS,),
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
        "tasks_start_below_uniform",
        tables=(layout.PRETRAIN_RUNS, layout.METRICS),
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
        "base_improves",
        tables=(layout.METRICS,),
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
        "gaussian_sensitivity",
        tables=(layout.METRICS, layout.PRETRAIN_RUNS),
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
        "gaussian_overtraining",
        tables=(layout.METRICS,),
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
        "gaussian_earlier",
        tables=(layout.METRICS,),
        confounds=TOY,
    ),
    Claim(
        "finetune-sensitivity",
        "Relative progressive sensitivity to fine-tuning at a fixed rate",
        "Fine-tuning",
        "evidence",
        "Fine-tuning at a fixed learning rate degrades the pre-training perplexity relatively more the "
        "longer the model was pre-trained: Δ log perplexity rises with tokens (Section 3.4.1, Figure 5).",
        "Δ log pre-training perplexity (fine-tuned / base) against tokens, per task and learning rate",
        "slope of Δ log perplexity per doubling; " + TREND,
        "supported if every (task, LR)'s interval lies above 0; contradicted if every one lies below 0; "
        "otherwise not established",
        "finetune_sensitivity",
        tables=(layout.METRICS, layout.PRETRAIN_RUNS),
        confounds=TOY,
    ),
    Claim(
        "finetune-sensitivity-absolute",
        "Absolute progressive sensitivity to fine-tuning at a fixed rate",
        "Fine-tuning",
        "evidence",
        "Fine-tuning at a fixed learning rate degrades the pre-training perplexity by more perplexity "
        "points the longer the model was pre-trained: Δ perplexity rises with tokens (Figure 4 plots "
        "this absolute degradation).",
        "Δ pre-training perplexity (fine-tuned − base) against tokens, per task and learning rate",
        "slope of Δ perplexity per doubling; " + TREND,
        "supported if every (task, LR)'s interval lies above 0; contradicted if every one lies below 0; "
        "otherwise not established",
        "finetune_sensitivity_absolute",
        tables=(layout.METRICS, layout.PRETRAIN_RUNS),
        confounds=TOY + "; the base perplexity falls steeply over the smallest budgets, which pulls an "
        "absolute difference down with it (the relative claim above does not have that pull)",
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
        "registered exclusion first: a (task, LR) whose pre-training perplexity after fine-tuning, "
        "averaged over the runs at the smallest budget, exceeds the unigram model's of the study's "
        "training targets (data/reference_ppl.parquet) leaves the family (read at the smallest budget "
        "so that an upturn, the effect tested, cannot remove its own setting); then supported if "
        "P(U) > 1 − 0.05/k for at least one of the k remaining settings (Bonferroni); each setting "
        "otherwise judged as in the "
        "single-curve U rule (contradicted, not reached within the budgets, not established); "
        "contradicted if every remaining setting is",
        "finetune_overtraining",
        combine=any_of,
        tables=(layout.METRICS, layout.REFERENCE_PPL),
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
        "supported if P(U) > 1 − 0.05/k for at least one of the k tasks (Bonferroni); each task "
        "otherwise judged as in the single-curve U rule; contradicted if every task is",
        "tuned_overtraining",
        combine=any_of,
        tables=(layout.METRICS, layout.FINETUNE_TUNED),
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
        "tuned_in_domain",
        tables=(layout.METRICS, layout.FINETUNE_TUNED),
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
        "optimal_lr_falls",
        tables=(layout.METRICS, layout.FINETUNE_TUNED),
        confounds=TOY
        + "; the rate is read off a grid half a decade apart, so the slope moves in steps; a best "
        "rate at the grid's edge is only bounded (the note counts them)",
    ),
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
        "lora_overtraining",
        tables=(layout.METRICS, layout.FINETUNE_TUNED),
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
        "mean paired difference, one per pre-training run (checkpoint); 95% t-interval over the runs",
        "supported if the interval lies below 0; contradicted if above; otherwise (or with one pair) "
        "not established",
        "replay_forgets_less",
        tables=(layout.METRICS, layout.FINETUNE_TUNED),
        confounds=TOY + "; each method's rate is searched separately, so the two differ in rate too",
    ),
    Claim(
        "wise-ft-forgets-less",
        "WiSE-FT buys back forgetting",
        "Fine-tuning methods",
        "lora",
        "WiSE-FT buys back forgetting: the weight-space midpoint θ_pre + ½(θ_ft − θ_pre) has a lower "
        "pre-training perplexity than the fine-tuned model.",
        "log pre-training perplexity at α = ½ minus at α = 1 at each method's tuned learning rate, per "
        "pre-training run (checkpoint; its fine-tuning seeds averaged), per method and task",
        "mean paired difference over the runs; 95% t-interval over them",
        "supported if the interval lies below 0; contradicted if above; otherwise not established",
        "wise_ft_forgets_less",
        tables=(layout.METRICS, layout.FINETUNE_TUNED),
        confounds=TOY + "; the midpoint is judged at the rate tuned for the fine-tuned model (α = 1)",
    ),
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
        "gap_grows",
        tables=(layout.METRICS,),
        confounds=TOY + "; the verdict covers the learning rates the study runs: an evidence run that also "
        "ran 0.01 found code's gap falling with tokens at 0.01, and the claim not established there "
        "(docs/benchmarks.md)",
    ),
    Claim(
        "sharpness-grows",
        "Progressive sharpening",
        "Linearization and the NTK",
        "pilot",
        "Progressive sharpening: the trace of the pre-training loss's Hessian grows with tokens "
        "(Appendix D).",
        "Hutchinson's tr(H) on 512 held-out tokens against tokens",
        "slope of log tr(H) per doubling; " + TREND,
        "supported if the interval lies above 0; contradicted if below; otherwise not established",
        "sharpness_grows",
        tables=(layout.METRICS,),
        confounds=TOY + "; tr(H) from 8 Rademacher probes",
    ),
    Claim(
        "kappa-in-domain",
        "NTK conditioning predicts in-domain performance",
        "Linearization and the NTK",
        "pilot",
        "A worse-conditioned NTK goes with worse fine-tuning: across checkpoints, κ of the task's "
        "empirical NTK rises with the in-domain test perplexity at the tuned learning rate "
        '("Linearization explains fine-tuning", Theorem 5).',
        "log κ against the in-domain test log perplexity at the tuned rate, per task",
        NTK_STAT.format(y="the in-domain test log perplexity"),
        "supported if every task's interval lies above 0; contradicted if every one lies below 0; "
        "otherwise not established",
        "kappa_in_domain",
        tables=(layout.METRICS, layout.FINETUNE_TUNED),
        confounds=TOY + "; κ and the perplexity both move with tokens, so a shared trend can make them "
        "correlate without one explaining the other",
    ),
    Claim(
        "kappa-forgetting",
        "NTK conditioning predicts forgetting",
        "Linearization and the NTK",
        "pilot",
        "A worse-conditioned NTK goes with more forgetting: across checkpoints, κ rises with the "
        "Δ log pre-training perplexity at the tuned learning rate.",
        "log κ against Δ log pre-training perplexity (fine-tuned / base) at the tuned rate, per task",
        NTK_STAT.format(y="Δ log pre-training perplexity"),
        "supported if every task's interval lies above 0; contradicted if every one lies below 0; "
        "otherwise not established",
        "kappa_forgetting",
        tables=(layout.METRICS, layout.FINETUNE_TUNED),
        confounds=TOY + "; as above, a shared trend with tokens",
    ),
    Claim(
        "theory-inflection",
        "Section 4's predicted inflection in the two-layer linear model",
        "Theory",
        "default",
        "In the two-layer linear model of Section 4, the inflection of the loss after a Gaussian "
        "perturbation (Proposition 4.3) and after fine-tuning (Theorem 4.7) comes where the theory "
        "predicts, for every spectrum, γ and λ of the grid.",
        "per seed, the inflection (Definition 4.2) of the expected loss after a perturbation (closed "
        "form, real initialisation) and of the simulated fine-tuning runs, against the predicted "
        "feature index",
        "the share of (setting, seed) pairs that agree",
        "supported if every pair agrees; contradicted if fewer than half do; otherwise not established",
        "theory_inflection",
        tables=(layout.THEORY_METRICS,),
        confounds="d = 8 features, a finite initialisation scale τ and an RK4 flow: the theorems' limits "
        "are approached, not reached (docs/theory.md)",
    ),
    Claim(
        "transfer-exact",
        "Exact finite-sample transfer risks agree with simulation",
        "Theory",
        "default",
        "The exact finite-sample expectations derived for scratch, linear transfer and fine-tuning "
        '("Features are fate"; the linear-teachers paper; the one-layer vs two-layer bridge) '
        "agree with simulation within sampling error.",
        "every simulated mean risk against its exact closed form at the same grid point",
        "the largest |z| = |simulated − exact| / SE over each paper's means",
        "supported if it stays within the two-sided Bonferroni bound at 5% over the paper's m means "
        "(|z| ≤ Φ⁻¹(1 − 0.025/m)); otherwise contradicted",
        "transfer_exact",
        tables=(layout.THEORY_TRANSFER,),
        confounds="Gaussian designs only; the deep-network rows are gradient descent, exact to O(η)",
    ),
    Claim(
        "vlm-above-chance",
        "The toy VLM scores above the best blind baseline",
        "LLaVA",
        "vlm-demo",
        "After LLaVA's two stages, the toy vision-language model scores above the best blind guesser "
        "of its evaluation sets (the best of the uniform, majority-answer and best-constant guessers "
        "that never look at the image).",
        "the VLM score (MME perception / 2000 and POPE F1, LLaVA-1.5's convention) at the tuned stage-2 "
        "learning rate minus the best blind guesser's score on the same sets, per pre-training run",
        "mean difference over the pre-training runs (checkpoints; stage-2 seeds averaged in each); 95% "
        "t-interval over them",
        "supported if the interval lies above 0; contradicted if below; otherwise not established",
        "vlm_above_chance",
        tables=(layout.METRICS, layout.FINETUNE_TUNED, layout.VLM_DATA),
        confounds="a toy corpus of rendered digits, emoji and words with a tiny CLIP tower trained here; "
        "the score's parts swing with the model's yes/no bias; the stage-2 rate is chosen on the same "
        "evaluation sets it is scored on, which favours the claim",
    ),
    Claim(
        "vlm-forgetting-grows",
        "LLaVA's stage 2 degrades the language model more with tokens",
        "LLaVA",
        "vlm-demo",
        "Multimodal fine-tuning degrades the language model's pre-training perplexity more the longer "
        "it was pre-trained (Section 2, Figure 2 right).",
        "Δ log pre-training perplexity (after stage 2 / base) at the tuned stage-2 rate against tokens",
        "slope of Δ log perplexity per doubling; " + TREND,
        "supported if the interval lies above 0; contradicted if below; otherwise not established",
        "vlm_forgetting_grows",
        tables=(layout.METRICS, layout.FINETUNE_TUNED),
        confounds=TOY + "; the small preset (hidden 64) and 3 budgets",
    ),
]

# The paper's phenomena on WSD checkpoints beside cosine ones (config/wsd.yaml: the default study's
# arms, its pre-training on warmup-stable-decay): the same claims, statistics and rules on the two
# studies, which differ only in the schedule (and the warmup it needs).
SCHEDULE_CLAIMS = (
    "gaussian-sensitivity",
    "gaussian-overtraining",
    "finetune-sensitivity",
    "finetune-overtraining",
)
SCHEDULE_TOY = (
    "the default study's scale: one pre-training seed, so the intervals leave pre-training variance "
    "out, and 4 budgets 2x apart; " + TOY
)
COSINE = "cosine to zero at each budget, so a budget's run is not a prefix of a longer one"
WSD_RUNS = (
    "warmup-stable-decay: each budget a linear decay over its last 20% of steps, branched from one "
    "stable run (so the budgets share their first steps and are not independent runs), the same warmup "
    "steps at every budget"
)
WSD_TOY = SCHEDULE_TOY.replace(COSINE, WSD_RUNS + " where the cosine runs warm up over a share of each")
SCHEDULES_COMPARED = {  # study: (key prefix, title suffix, statement prefix, confounds)
    "default": (
        "cosine",
        "(cosine)",
        "On the default study's cosine checkpoints (the WSD study's twin)",
        SCHEDULE_TOY,
    ),
    "wsd": (
        "wsd",
        "(WSD)",
        "On warmup-stable-decay checkpoints (each budget a decay branched from one stable run)",
        WSD_TOY,
    ),
}
CLAIMS += [
    replace(
        c,
        key=f"{prefix}-{c.key}",
        title=f"{c.title} {suffix}",
        section="Schedule: WSD beside cosine",
        study=study,
        statement=f"{lead}: {c.statement}",
        confounds=confounds,
        replica_of=c.key,
    )
    for study, (prefix, suffix, lead, confounds) in SCHEDULES_COMPARED.items()
    for c in list(CLAIMS)
    if c.key in SCHEDULE_CLAIMS
]

# The rival explanation (config/schedule.yaml): is the sensitivity the tokens' doing, or the learning
# rate's decay? Each budget's WSD decay beside the stable run's weights at the same tokens (its twin).
SCHEDULE_STUDY_TOY = (
    "3 pre-training seeds (df 2) x 4 budgets 2x apart; each twin the stable run at its budget's tokens "
    "(it trained the decay's steps at the peak rate instead); the Gaussian arm at its largest γ, code "
    "fine-tuning at one fixed rate; " + TOY.replace(COSINE, WSD_RUNS)
)
CLAIMS += [
    Claim(
        "decay-sensitizes",
        "The learning-rate decay makes a checkpoint more sensitive",
        "Schedule: tokens or the decay",
        "schedule",
        "At equal tokens, a checkpoint whose learning rate has decayed is more sensitive to a Gaussian "
        "perturbation and to fine-tuning than the undecayed (stable) checkpoint of the same run (the "
        "rival explanation of progressive sensitivity: Catalan-Tatjer et al. 2025, arXiv:2510.06213; "
        "Rofin et al. 2026, arXiv:2604.13627).",
        "Δ log pre-training perplexity of each budget's decayed WSD branch minus that of the stable run "
        "at the same tokens, per arm (Gaussian at the largest γ, fine-tuning at each fixed rate)",
        "mean over the pre-training seeds of each seed's decayed − stable difference averaged over the "
        "budgets (the seed is the unit: its budgets share one stable run), with a 95% t-interval over the "
        "seeds (df = seeds − 1); not computed with one seed",
        "supported if every arm's interval lies above 0; contradicted if every arm's lies below 0; "
        "otherwise not established",
        "decay_sensitizes",
        tables=(layout.METRICS, layout.STABLE_TWIN_METRICS),
        confounds=SCHEDULE_STUDY_TOY + "; the decayed checkpoint also has a lower base loss, so a "
        "relative Δ compares from different starting points",
    ),
    Claim(
        "stable-sensitivity",
        "Progressive sensitivity along the stable run alone",
        "Schedule: tokens or the decay",
        "schedule",
        "Progressive sensitivity holds without any learning-rate decay: along WSD's stable run, the "
        "checkpoint at more tokens degrades more under the same Gaussian perturbation and the same "
        "fixed-rate fine-tuning (tokens, not the decay, drive it).",
        "Δ log pre-training perplexity of the stable run's checkpoints (never decayed) against tokens, "
        "per arm (Gaussian at the largest γ, fine-tuning at each fixed rate)",
        "slope of Δ log perplexity per doubling; " + TREND,
        "supported if every arm's interval lies above 0; contradicted if every arm's lies below 0; "
        "otherwise not established",
        "stable_sensitivity",
        tables=(layout.STABLE_TWIN_METRICS,),
        confounds=SCHEDULE_STUDY_TOY,
    ),
]


def claims_of(study: str) -> list[Claim]:
    return [c for c in CLAIMS if c.study == study]


def tables_read(claims: list[Claim] = CLAIMS) -> tuple[str, ...]:
    """Every table the claims read, each once (in the order first declared): what `make docs` copies
    to docs/reference/ and what rule findings asks of a study (where the study makes it)."""
    return tuple(dict.fromkeys(t for c in claims for t in c.tables))


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
