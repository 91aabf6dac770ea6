"""What each rule passes to its jobs through `params:`. Snakemake reruns a job when its params
change, so each holds exactly the settings that can change the job's numbers: a config change
reruns the jobs it touches and no other.

Hyperparameters come from the run-config dataclasses (pipeline/train/config.py): their fields,
not a hand-kept key list, so a new field reaches the job without an edit here.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import TYPE_CHECKING

from pipeline.curvature.config import CurvatureConfig
from pipeline.fields import tagged
from pipeline.judge.config import judge_params as _judge_params
from pipeline.sweeps.lr_search import SELECT_METRIC, SELECT_SPLIT
from pipeline.theory.transfer.config import transfer_inputs
from pipeline.train.config import FinetuneConfig, PretrainConfig, changes_numbers, hyperparameters
from pipeline.workflow.config import (
    alpaca_eval_config,
    alpaca_eval_enabled,
    bench_config,
    benchmarks_enabled,
    curvature_enabled,
    curvature_section,
    eval_config,
    finetune_enabled,
    finetune_methods,
    finetune_search,
    finetune_section,
    method_section,
)
from pipeline.workflow.targets import base_eval_tasks

if TYPE_CHECKING:
    from pipeline.models.checkpoints import CheckpointSpec

# config keys that cannot change a number in any section: the run configs EXECUTION fields, threads, ranks
UNNUMBERED = {
    f.name
    for cls in (PretrainConfig, FinetuneConfig)
    for f in fields(cls)
    if not changes_numbers(cls, f.name)
} | {"threads", "ranks", "grid_per_job"}  # how jobs run, not what they compute


def pretrain_params(config: dict) -> dict:
    """Every pre-training hyperparameter that changes the numbers (a change reruns the sweep)."""
    return hyperparameters(PretrainConfig, config["pretrain"])


def finetune_params(config: dict, method: str) -> dict:
    """Every hyperparameter of one fine-tuning method's jobs except the grid ones (wildcards)."""
    return hyperparameters(FinetuneConfig, method_section(config, method))


def task_base_params(config: dict) -> dict | None:
    """The fine-tuning settings the base model's in-domain evaluation reads (BASE_EVAL fields);
    None without a text task to evaluate (then changing them reruns no evaluate job)."""
    if not base_eval_tasks(config):
        return None
    return hyperparameters(FinetuneConfig, finetune_section(config), base_eval_only=True)


def benchmark_params(config: dict) -> dict | None:
    """The benchmark settings a job scores its models with (rule evaluate: the checkpoint and its
    perturbations; a fine-tuning job: its model). None: no benchmarks, and then changing them
    reruns no job."""
    return bench_config(config) if benchmarks_enabled(config) else None


def curvature_params(config: dict) -> dict:
    """The curvature settings of the Gaussian lines and the sharpness (rule curvature; not the
    fine-tuning direction's grids); seeds null -> perturb.seeds (the same ε)."""
    hp = hyperparameters(CurvatureConfig, curvature_section(config))
    hp = {f.name: hp[f.name] for f in fields(CurvatureConfig) if tagged(f, "gaussian", True)}
    return hp | {"seeds": list(hp["seeds"] if hp["seeds"] is not None else config["perturb"]["seeds"])}


def curvature_eval(config: dict) -> dict:
    """The `eval` keys rule curvature reads (its held-out windows; their count is curvature.max_tokens)."""
    return {k: config["eval"].get(k) for k in ("split", "seq_len")}


def curvature_finetune_params(config: dict) -> dict | None:
    """The curvature settings a fine-tuning job's line along θ_ft − θ_pre reads (FINETUNE fields);
    None when the stage is off (the job then writes an empty line table)."""
    if not curvature_enabled(config):
        return None
    hp = hyperparameters(CurvatureConfig, curvature_section(config))
    return {f.name: hp[f.name] for f in fields(CurvatureConfig) if tagged(f, "finetune")}


def ntk_params(config: dict) -> dict:
    """What rule ntk reads: the curvature fields tagged ntk, the fine-tuning context (seq_len), and
    what each fine-tuning method that does not train every parameter trains (the kernel of its
    trained parameters; LoRA adapters drawn with the first fine-tuning seed)."""
    hp = hyperparameters(CurvatureConfig, curvature_section(config))
    keep = {f.name: hp[f.name] for f in fields(CurvatureConfig) if tagged(f, "ntk") and f.name in hp}
    methods = {m: finetune_params(config, m)["params"] for m in finetune_methods(config)}
    return keep | {
        "seq_len": finetune_section(config).get("seq_len"),
        "methods": {m: params for m, params in methods.items() if params != "all"},
        "seed": finetune_section(config)["seeds"][0],
    }


def lr_search_params(config: dict) -> dict | None:
    """What a search round decides with: the search (its lattice, coarse points, stride and
    widenings), the seed that searches and the in-domain score it minimises (None: no search)."""
    search = finetune_search(config) if finetune_enabled(config) else None
    if search is None:
        return None
    seed = finetune_section(config)["seeds"][0]
    return {"search": asdict(search), "seed": seed, "split": SELECT_SPLIT, "metric": SELECT_METRIC}


def checkpoint_params(spec: CheckpointSpec) -> dict:
    """The CheckpointSpec a job rebuilds (a params change reruns it): hub cache_dir / offline and a
    stable twin's phase only when set, so sweep and local jobs keep their params; the parameter
    count (resources only) is left out."""
    keys = ("name", "source", "model", "tokens", "path", "model_id", "revision", "pretrain_seed")
    out = {k: getattr(spec, k) for k in keys}
    return out | {
        k: getattr(spec, k) for k in ("cache_dir", "offline", "lock", "phase") if getattr(spec, k) is not None
    }


def provenance_config(config: dict) -> dict:
    """The config without keys that cannot change a number (cadence, threads, ranks, the GPUs
    jobs run on, analysis)."""
    cfg = {k: v for k, v in config.items() if k not in ("analysis", "gpu")}
    if not benchmarks_enabled(config):  # benchmark settings without benchmark tasks change no number
        cfg["eval"] = eval_config(config)
    return {
        k: ({kk: vv for kk, vv in v.items() if kk not in UNNUMBERED} if isinstance(v, dict) else v)
        for k, v in cfg.items()
    }


def generation_params(config: dict) -> dict | None:
    """How responses to the instruction set are generated (every GenerationConfig field); None
    when the judged metric is off."""
    if not alpaca_eval_enabled(config):
        return None
    return asdict(alpaca_eval_config(config).generation)


def judge_params(config: dict) -> dict | None:
    """The judge rule's params: the judge (every field, its evaluator config and template text),
    the reference run and whether base models are judged; None when the judged metric is off."""
    if not alpaca_eval_enabled(config):
        return None
    section = alpaca_eval_config(config)
    return {
        "judge": _judge_params(section.judge),
        "reference": asdict(section.reference),
        "base": section.base,
    }


def theory_params(config: dict) -> dict:
    """Rule theory's params: the `theory` section but `transfer` (a transfer change reruns nothing here)."""
    return {k: v for k, v in config["theory"].items() if k != "transfer"}


def theory_transfer_params(config: dict) -> dict:
    """Rule theory_transfer's params: theory.transfer and the keys of `theory` the stage reads (the
    pre-training trajectory and the fine-tuning task of the one-layer vs deep panel)."""
    return transfer_inputs(config["theory"])
