"""Checkpoint families on the hub: one registry record per family (its repositories, sizes,
variants, published pre-training seeds, revision names and token rule, with the public source it
follows), and a study's selection of checkpoints from it: hand-listed revisions, or a token range
and a count (log-spaced targets -> the nearest published revisions, deduplicated).

Two kinds of family:
- intermediate checkpoints of one run per repository (pythia, polypythias, smollm2, smollm3,
  olmo-3): a budget is a revision; its tokens are step x the stage's global batch;
- completed runs, one repository per budget (olmo-ladder, datadecide, evolm), revision `main`:
  each budget has its own full schedule (decayed), so no learning-rate-decay confound.

Light: no torch, no huggingface_hub (parse time). Every problem is a HubRevisionError naming the
key, the value and what the family publishes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from pipeline.models.hub import HubRevisionError
from pipeline.models.shapes import ModelShape

SIZE_RE = re.compile(r"(\d+(?:\.\d+)?)([KMBT])", re.IGNORECASE)
SCALE = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}


def nominal_params(size: str) -> int:
    """Parameter count a size name gives (`160m` -> 160e6, `1.4b`, `0.5B`): nominal, for job resources."""
    m = SIZE_RE.fullmatch(size)
    if m is None:
        raise ValueError(f"size {size!r}: expected a number and K/M/B/T (e.g. 160m, 1.4b)")
    return int(round(float(m.group(1)) * SCALE[m.group(2).upper()]))


@dataclass(frozen=True)
class HubCheckpoint:
    """One checkpoint of a family: repository, revision, pre-training tokens, its run's seed."""

    repo: str
    revision: str
    tokens: int
    pretrain_seed: int | None
    params: int
    model: str  # the run's family label, shared by the seeds of one setting (the statistics' `model`)


@dataclass(frozen=True)
class Family:
    """A family of hub checkpoints, declared once (FAMILIES). `repo` is a format string over
    {size}, {variant}, {seed} and {budget}; `variants` maps a variant name to its part of the repo
    name; `seeds` maps each published pre-training seed to its part (the unit of the run-level
    statistics, `pretrain_seed`); `batches` gives tokens per step for each size (`*`: all) and
    stage (`""`: a revision without a stage), None where no public source gives it."""

    name: str
    source: str  # the public source(s) each fact below follows
    repo: str
    sizes: tuple[str, ...]
    variants: Mapping[str, str] = field(default_factory=lambda: {"": ""})
    variant_sizes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # variant -> its only sizes
    seeds: Mapping[int | None, str] = field(default_factory=lambda: {None: ""})
    seed_variants: Mapping[int, tuple[str, ...]] = field(default_factory=dict)  # seed -> its only variants
    revision: re.Pattern | None = None  # intermediate: a revision's name (groups: stage?, step)
    published: tuple[str, ...] | None = None  # intermediate: every revision name (None: list them)
    batches: Mapping[str, Mapping[str, int | None]] = field(default_factory=dict)
    budgets: tuple[str, ...] = ()  # completed runs: the budget part of each repo name
    budget_tokens: str = ""  # completed runs: "chinchilla" (mult x 20 x params), "per_param:<k>", "name"
    default_size: str | None = None

    @property
    def completed_runs(self) -> bool:
        return bool(self.budgets)


def _pythia_revisions() -> tuple[str, ...]:
    """Pythia's 154 revisions: step0, step1, 2, 4, ..., 512 (10 log-spaced), step1000 ... step143000."""
    return (
        ("step0",)
        + tuple(f"step{2**i}" for i in range(10))
        + tuple(f"step{k}" for k in range(1000, 143001, 1000))
    )


PYTHIA_TOKENS_PER_STEP = 2_097_152  # 1024 sequences x 2048 tokens (EleutherAI/pythia README)
PYTHIA_SOURCE = (
    "https://github.com/EleutherAI/pythia (README: 154 checkpoints step0, step{1..512} log-spaced, "
    "step1000-step143000 every 1000; batch 1024 x 2048 tokens); Biderman et al. 2023, arXiv 2304.01373"
)

FAMILIES: dict[str, Family] = {
    "pythia": Family(
        "pythia",
        PYTHIA_SOURCE,
        "EleutherAI/pythia-{size}{variant}",
        ("14m", "31m", "70m", "160m", "410m", "1b", "1.4b", "2.8b", "6.9b", "12b"),
        variants={"": "", "deduped": "-deduped"},
        revision=re.compile(r"step(?P<step>\d+)"),
        published=_pythia_revisions(),
        batches={"*": {"": PYTHIA_TOKENS_PER_STEP}},
    ),
    # PolyPythias (van der Wal et al., ICLR 2025, arXiv 2503.09543): pythia-{size}-seed{1..9}, the
    # same 154 revisions and data; pythia-160m-data-seed{N} varies only the data order and
    # pythia-160m-weight-seed{N} only the initialisation. Seed 0 is the original Pythia run (the
    # release's evaluations file EleutherAI/pythia-160m as pythia-160m-seed0:
    # huggingface.co/datasets/EleutherAI/polypythias-evals). Not confirmed here: that every
    # data/weight seed 1-9 is published (data-seed2, data-seed3, weight-seed1 were seen).
    "polypythias": Family(
        "polypythias",
        "arXiv 2503.09543; huggingface.co/EleutherAI/pythia-160m-seed1, -data-seed3, -weight-seed1; "
        + PYTHIA_SOURCE,
        "EleutherAI/pythia-{size}{variant}{seed}",
        ("14m", "31m", "70m", "160m", "410m"),
        variants={"": "", "data": "-data", "weight": "-weight"},
        variant_sizes={"data": ("160m",), "weight": ("160m",)},
        seeds={0: "", **{k: f"-seed{k}" for k in range(1, 10)}},
        seed_variants={0: ("",)},
        revision=re.compile(r"step(?P<step>\d+)"),
        published=_pythia_revisions(),
        batches={"*": {"": PYTHIA_TOKENS_PER_STEP}},
        default_size="160m",
    ),
    # OLMo ladder (Bhagia et al., COLM 2025, arXiv 2412.04403), as listed with
    # huggingface.co/datasets/allenai/signal-and-noise: each {mult}xC a run trained to completion at
    # mult x Chinchilla-optimal tokens. Taken here: 20 tokens per nominal parameter (not confirmed
    # against the paper's exact parameter count, which may exclude embeddings).
    "olmo-ladder": Family(
        "olmo-ladder",
        "arXiv 2412.04403; huggingface.co/datasets/allenai/signal-and-noise (README, ladder models)",
        "allenai/OLMo-Ladder-{size}-{budget}",
        ("190M", "370M", "760M", "1B", "3B"),
        budgets=("0.5xC", "1xC", "2xC", "5xC", "10xC"),
        budget_tokens="chinchilla",
        default_size="1B",
    ),
    # DataDecide (github.com/allenai/DataDecide): 25 corpora x 14 sizes, each run to 100 tokens per
    # parameter ("1B parameters -> 100B tokens"); a budget is a size (tokens grow with the model).
    # Its 3 seeds and intermediate checkpoints are revisions whose names were not confirmed: `main`
    # only (the default seed's final checkpoint).
    "datadecide": Family(
        "datadecide",
        "https://github.com/allenai/DataDecide (README); huggingface.co/allenai/DataDecide-c4-8M",
        "allenai/DataDecide-{variant}-{budget}",
        ("",),
        variants={
            r: r
            for r in (
                "c4",
                "dclm-baseline",
                "dclm-baseline-25p-dolma1.7-75p",
                "dclm-baseline-50p-dolma1.7-50p",
                "dclm-baseline-75p-dolma1.7-25p",
                "dclm-baseline-qc-10p",
                "dclm-baseline-qc-20p",
                "dclm-baseline-qc-7p-fw2",
                "dclm-baseline-qc-7p-fw3",
                "dclm-baseline-qc-fw-10p",
                "dclm-baseline-qc-fw-3p",
                "dolma1_6plus",
                "dolma1_7",
                "dolma1_7-no-code",
                "dolma1_7-no-flan",
                "dolma1_7-no-math-code",
                "dolma1_7-no-reddit",
                "falcon",
                "falcon-and-cc",
                "falcon-and-cc-qc-10p",
                "falcon-and-cc-qc-20p",
                "falcon-and-cc-qc-orig-10p",
                "falcon-and-cc-qc-tulu-10p",
                "fineweb-edu",
                "fineweb-pro",
            )
        },  # fmt: skip
        budgets=(
            "4M",
            "6M",
            "8M",
            "10M",
            "14M",
            "16M",
            "20M",
            "60M",
            "90M",
            "150M",
            "300M",
            "530M",
            "750M",
            "1B",
        ),
        budget_tokens="per_param:100",
        default_size="",
    ),
    # EvoLM (Qi et al., NeurIPS 2025, arXiv 2506.16029): zhenting/myllama-{size}-{N}BT, each budget
    # its own complete schedule. Public code names 0.5B-10BT, 1B-20BT, 1B-160BT, 4B-80BT, 4B-160BT
    # and 4B-320BT; the rest of this grid is not confirmed (a repo the hub lacks stops the study at
    # start-up).
    "evolm": Family(
        "evolm",
        "arXiv 2506.16029; huggingface.co/zhenting/myllama-1B-20BT",
        "zhenting/myllama-{size}-{budget}",
        ("0.5B", "1B", "4B"),
        budgets=("10BT", "20BT", "40BT", "80BT", "160BT", "320BT"),
        budget_tokens="name",
        default_size="1B",
    ),
    # SmolLM2 intermediate checkpoints: revisions `step-N`, tokens = N x the global batch, which
    # the model cards give for 135M (1,048,576) and 1.7B (2,097,152); 360M's card gives none here.
    "smollm2": Family(
        "smollm2",
        "huggingface.co/HuggingFaceTB/SmolLM2-135M-intermediate-checkpoints and "
        "-1.7B-intermediate-checkpoints (model cards: GBS, nb_tokens = nb_step x GBS)",
        "HuggingFaceTB/SmolLM2-{size}-intermediate-checkpoints",
        ("135M", "360M", "1.7B"),
        revision=re.compile(r"step-(?P<step>\d+)"),
        batches={"135M": {"": 1_048_576}, "1.7B": {"": 2_097_152}, "360M": {"": None}},
        default_size="1.7B",
    ),
    # SmolLM3-3B checkpoints: GBS 2,359,296 tokens through pre-training stages 1-3 (its card, whose
    # example revision is `stage1-step-40000`); the long-context stages' batch and names are not
    # given (a revision in another stage stops the study unless stage_batches names it). That
    # stages 2 and 3 are named `stage2-step-N`, `stage3-step-N` is assumed from stage 1's.
    "smollm3": Family(
        "smollm3",
        "huggingface.co/HuggingFaceTB/SmolLM3-3B-checkpoints (model card: GBS 2,359,296; stages 1-3)",
        "HuggingFaceTB/SmolLM3-{size}-checkpoints",
        ("3B",),
        revision=re.compile(r"(?:(?P<stage>[a-z0-9-]+?)-)?step-(?P<step>\d+)"),
        batches={"*": {"": 2_359_296, "stage1": 2_359_296, "stage2": 2_359_296, "stage3": 2_359_296}},
        default_size="3B",
    ),
    # Olmo 3 (allenai/Olmo-3-1025-7B): revisions stage1-step{N} (stage1-step0 ... stage1-step1413814),
    # stage2-step{N}, stage3-step{N}. No public source read here gives each stage's global batch:
    # a study gives it (checkpoints.hub.stage_batches), else it stops at start-up.
    "olmo-3": Family(
        "olmo-3",
        "huggingface.co/allenai/Olmo-3-1025-7B (branches stage1-step{N}, stage2-step{N}, stage3-step{N})",
        "allenai/Olmo-3-1025-{size}",
        ("7B",),
        revision=re.compile(r"(?P<stage>stage\d)-step(?P<step>\d+)"),
        batches={"*": {"stage1": None, "stage2": None, "stage3": None}},
        default_size="7B",
    ),
}


# Pythia's dimensions (EleutherAI/pythia README: layers, d_model, heads; MLP 4 x d_model; context
# 2048; untied embeddings; vocab padded to 50304 - the larger models pad further, which the memory
# planner's estimate ignores). GPT-NeoX's MLP has two matrices, not the gated three ModelShape
# counts: intermediate = 8/3 d_model gives its 8 d_model^2 parameters per block.
PYTHIA_DIMS = {
    "14m": (6, 128, 4), "31m": (6, 256, 8), "70m": (6, 512, 8), "160m": (12, 768, 12),
    "410m": (24, 1024, 16), "1b": (16, 2048, 8), "1.4b": (24, 2048, 16), "2.8b": (32, 2560, 32),
    "6.9b": (32, 4096, 32), "12b": (36, 5120, 40),
}  # fmt: skip
PYTHIA_REPO = re.compile(
    r"EleutherAI/pythia-([0-9.]+[mb])(?:-deduped|-seed\d+|-data-seed\d+|-weight-seed\d+)?"
)


def family_shape(repo: str) -> ModelShape | None:
    """The dimensions of a family repository the memory planner can size (Pythia's), else None."""
    m = PYTHIA_REPO.fullmatch(repo)
    if m is None or m.group(1) not in PYTHIA_DIMS:
        return None
    layers, hidden, heads = PYTHIA_DIMS[m.group(1)]
    return ModelShape(layers, hidden, hidden * 8 // 3, heads, heads, 50304, tied=False, context=2048)


# --- a family's checkpoints --------------------------------------------------------------------


def family(name: str) -> Family:
    if name not in FAMILIES:
        raise HubRevisionError(
            f"checkpoints.hub.family: unknown family {name!r} (known: {', '.join(FAMILIES)})"
        )
    return FAMILIES[name]


def _repo(fam: Family, size: str, variant: str, seed: int | None, budget: str = "") -> str:
    return fam.repo.format(size=size, variant=fam.variants[variant], seed=fam.seeds[seed], budget=budget)


def step_tokens(fam: Family, size: str, revision: str, stage_batches: Mapping[str, int] | None = None) -> int:
    """Pre-training tokens of an intermediate revision: step x its stage's global batch (the
    study's `stage_batches` first, then the family's). A name the family's rule does not read, or
    a stage without a batch, is a HubRevisionError naming it."""
    if fam.revision is None:
        raise HubRevisionError(f"family {fam.name}: revisions are whole runs (main), not steps")
    m = fam.revision.fullmatch(revision)
    if m is None:
        raise HubRevisionError(
            f"checkpoints.hub.revisions: {revision!r} carries no token count and family {fam.name} "
            f"has no rule for it (its revisions look like {fam.revision.pattern!r}): "
            f"give it as {{revision: {revision}, tokens: N}}"
        )
    stage = m.groupdict().get("stage") or ""
    key = stage or "''"
    batch = (stage_batches or {}).get(stage or "")
    if batch is None:
        table = fam.batches.get(size, fam.batches.get("*", {}))
        if stage not in table:
            known = ", ".join(repr(s) for s in table if s) or "none"
            raise HubRevisionError(
                f"checkpoints.hub.revisions: {revision!r} of family {fam.name} is in stage {stage!r}, "
                f"which its step-to-tokens rule does not know (stages: {known}); give its global batch "
                f"in checkpoints.hub.stage_batches: {{{key}: tokens per step}}"
            )
        batch = table[stage]
    if batch is None:
        raise HubRevisionError(
            f"checkpoints.hub.stage_batches: the step-to-tokens rule of family {fam.name} (size {size}) "
            f"lacks the global batch of stage {stage or '(none)'!r} for revision {revision!r}: give "
            f"checkpoints.hub.stage_batches: {{{key}: tokens per step}} from the family's "
            f"training config ({fam.source})"
        )
    return int(m.group("step")) * int(batch)


def budget_tokens(fam: Family, size: str, budget: str) -> int:
    """Pre-training tokens of a completed run (one repository per budget)."""
    rule = fam.budget_tokens
    if rule == "chinchilla":
        return int(round(float(budget.removesuffix("xC")) * 20 * nominal_params(size)))
    if rule.startswith("per_param:"):
        return int(rule.split(":")[1]) * nominal_params(budget)
    return nominal_params(budget.removesuffix("T"))  # "name": `{N}BT` -> N x 1e9


def _check_choice(key: str, value, allowed, fam: Family) -> None:
    if value not in allowed:
        if tuple(allowed) == ("",):
            raise HubRevisionError(
                f"checkpoints.hub.{key}: family {fam.name} has no {key} to choose (its budgets: "
                f"{', '.join(fam.budgets)}, listed in checkpoints.hub.revisions or picked by select)"
            )
        shown = ", ".join(repr(a) for a in allowed)
        raise HubRevisionError(
            f"checkpoints.hub.{key}: family {fam.name} does not publish {value!r} (it has: {shown})"
        )


def family_checkpoints(hub: Mapping) -> list[HubCheckpoint]:
    """The checkpoints a `checkpoints.hub` section with `family` names: every published seed asked
    for (`seeds`), each at the hand-listed `revisions` or at those `select` picks by token range.
    Everything is checked here, at parse time: an unknown size, variant or seed, a name without a
    token rule, a stage without a batch, a token range the family does not cover."""
    fam = family(hub["family"])
    for key in ("preset", "model_id"):
        if hub.get(key):
            raise HubRevisionError(
                f"checkpoints.hub.{key}: give a family or a {key}, not both "
                f"(family {fam.name} names its repositories)"
            )
    size = hub.get("size") or fam.default_size or ""
    _check_choice("size", size, fam.sizes, fam)
    variant = hub.get("variant") or ""
    _check_choice("variant", variant, tuple(fam.variants), fam)
    if variant in fam.variant_sizes:
        _check_choice("size", size, fam.variant_sizes[variant], fam)
    seeds = hub.get("seeds")
    seeds = list(seeds) if seeds else [next(iter(fam.seeds))]
    for seed in seeds:
        _check_choice("seeds", seed, tuple(fam.seeds), fam)
        if seed in fam.seed_variants and variant not in fam.seed_variants[seed]:
            raise HubRevisionError(
                f"checkpoints.hub.seeds: family {fam.name} does not publish seed {seed} of variant "
                f"{variant!r} (seed {seed} is the variant(s) {fam.seed_variants[seed]})"
            )
    model = "-".join(part for part in (fam.name, size, variant) if part)
    stage_batches = hub.get("stage_batches") or {}
    if fam.completed_runs:
        candidates = [(b, budget_tokens(fam, size, b)) for b in fam.budgets]
    else:
        listed = [r if isinstance(r, str) else r["revision"] for r in hub.get("revisions") or []]
        if fam.published is not None:
            unknown = [r for r in listed if r not in fam.published]
            if unknown:
                raise HubRevisionError(
                    f"checkpoints.hub.revisions: family {fam.name} publishes no revision {unknown} "
                    f"({len(fam.published)} revisions: {fam.published[0]} ... {fam.published[-1]}; "
                    f"{fam.source})"
                )
        names = fam.published if hub.get("select") else listed
        if names is None:
            raise HubRevisionError(
                f"checkpoints.hub.select: family {fam.name} has no list of its published revisions "
                "here: list them in checkpoints.hub.revisions"
            )
        given = {
            r["revision"]: int(r["tokens"])
            for r in hub.get("revisions") or []
            if isinstance(r, dict) and r.get("tokens")
        }
        candidates = [(r, given.get(r) or step_tokens(fam, size, r, stage_batches)) for r in names]
    if hub.get("select"):
        picked = select_by_tokens(candidates, hub["select"], fam.name)
    elif fam.completed_runs:
        listed = [r if isinstance(r, str) else r["revision"] for r in hub.get("revisions") or []]
        for b in listed:
            _check_choice("revisions", b, fam.budgets, fam)
        picked = [c for c in candidates if c[0] in listed] if listed else candidates
    else:
        picked = candidates
    if not picked:
        raise HubRevisionError(
            f"checkpoints.hub: family {fam.name} selects no checkpoint (give revisions or select)"
        )
    out = []
    for seed in seeds:
        for name, tokens in picked:
            repo = _repo(fam, size, variant, seed, name if fam.completed_runs else "")
            revision = "main" if fam.completed_runs else name
            params = nominal_params(name if fam.budget_tokens.startswith("per_param") else size)
            out.append(HubCheckpoint(repo, revision, int(tokens), seed, params, model))
    return out


def select_by_tokens(
    candidates: list[tuple[str, int]], select: Mapping, family_name: str
) -> list[tuple[str, int]]:
    """`count` log-spaced token targets over [lo, hi] -> the nearest published checkpoints (log
    distance), deduplicated, in token order. A range outside what the family publishes is an error."""
    lo, hi = (float(t) for t in select["tokens"])
    count = int(select["count"])
    positive = sorted((c for c in candidates if c[1] > 0), key=lambda c: c[1])
    if not positive:
        raise HubRevisionError(f"checkpoints.hub.select: family {family_name} has no checkpoint with tokens")
    first, last = positive[0][1], positive[-1][1]
    if not (0 < lo <= hi) or lo < first * 0.999 or hi > last * 1.001:
        raise HubRevisionError(
            f"checkpoints.hub.select.tokens: [{lo:.4g}, {hi:.4g}] is not covered by family {family_name}, "
            f"whose published checkpoints span {first:,} to {last:,} tokens"
        )
    targets = [lo] if count == 1 else [lo * (hi / lo) ** (i / (count - 1)) for i in range(count)]
    picked: dict[str, int] = {}
    for t in targets:
        name, tokens = min(positive, key=lambda c: abs(math.log(c[1] / t)))
        picked.setdefault(name, tokens)
    return sorted(picked.items(), key=lambda c: c[1])
