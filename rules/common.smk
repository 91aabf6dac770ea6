# Input functions and config helpers shared by every rule.
from pathlib import Path

from snakemake.exceptions import WorkflowError

from pipeline.checkpoints import study_checkpoints
from pipeline.corpus import EMBEDDED_PACKAGES
from pipeline.presets import job_resources, steps_for_budget
from pipeline.theory import FIGURE_STEMS


wildcard_constraints:
    model=r"[A-Za-z0-9_.-]+",
    budget=r"\d+",
    checkpoint=r"[A-Za-z0-9._-]+",


def study_path(rel):
    """A path under results/<study>/."""
    return f"results/{config['study']}/{rel}"


def _check_config():
    """Semantic checks the JSON schema cannot express; fail before any job starts."""
    pt = config["pretrain"]
    try:
        for budget in pt["budgets"]:
            steps_for_budget(budget, pt["batch_size"], pt["seq_len"])
        specs = study_checkpoints(config)
    except (ValueError, KeyError) as err:
        raise WorkflowError(f"invalid config: {err}")
    for spec in specs:
        if spec.source == "local" and not Path(spec.path, "config.json").is_file():
            raise WorkflowError(
                f"invalid config: checkpoints.local entry {spec.name!r}: {spec.path} is not a model directory (expected config.json there)"
            )
    if config["checkpoints"]["source"] == "hub" and not config["checkpoints"]["hub"].get("model_id"):
        raise WorkflowError("invalid config: checkpoints.hub.model_id is required when checkpoints.source is 'hub'")
    if config["tokenizer"]["kind"] == "file" and not config["tokenizer"].get("path"):
        raise WorkflowError("invalid config: tokenizer.path is required when tokenizer.kind is 'file'")
    return {s.name: s for s in specs}


CHECKPOINTS = _check_config()
DEVICE = config.get("device", "auto")
FORMATS = config["analysis"]["figure_formats"]


def gpu_count():
    return 0 if DEVICE == "cpu" else int(DEVICE == "cuda")


def corpus_packages(wildcards):
    """The pinned npm data tarballs the embedded corpus reads."""
    if config["corpus"]["source"] != "embedded":
        return []
    return [f"{config['corpus']['package_dir']}/{EMBEDDED_PACKAGES[n]}" for n in config["corpus"]["embedded"]]


def pretrain_hparams():
    """Every pre-training hyperparameter that changes the numbers (a change reruns the sweep)."""
    keys = ["seq_len", "batch_size", "lr", "betas", "weight_decay", "warmup_fraction", "grad_clip", "seed"]
    return {k: config["pretrain"][k] for k in keys}


def provenance_config():
    """The config without keys that cannot change a number (cadence, threads, analysis)."""
    skip = {"log_every", "checkpoint_every", "threads"}
    cfg = {k: v for k, v in config.items() if k != "analysis"}
    return {k: ({kk: vv for kk, vv in v.items() if kk not in skip} if isinstance(v, dict) else v) for k, v in cfg.items()}


def preset_resources(stage):
    """resources: callables sized from the job's model preset."""
    def get(wildcards, key):
        preset = wildcards.model if hasattr(wildcards, "model") else CHECKPOINTS[wildcards.checkpoint].model
        return job_resources(preset, stage, "cuda" if gpu_count() else "cpu")[key]

    return {k: (lambda wc, k=k: get(wc, k)) for k in ("mem_mb", "runtime", "gpu")}


def checkpoint_dir(wildcards):
    """Input of a job on one checkpoint: the sweep's output dir or the local dir (none for hub)."""
    spec = CHECKPOINTS[wildcards.checkpoint]
    return [spec.path] if spec.source in ("sweep", "local") else []


def checkpoint_spec(wildcards):
    spec = CHECKPOINTS[wildcards.checkpoint]
    return {k: getattr(spec, k) for k in ("name", "source", "model", "tokens", "path", "model_id", "revision")}


def perturb_parts():
    return [study_path(f"perturb/{name}.parquet") for name in CHECKPOINTS]


def pretrain_dirs():
    return [study_path(f"pretrain/{s.model}/{s.tokens}") for s in CHECKPOINTS.values() if s.source == "sweep"]


def theory_enabled():
    return bool(config.get("theory", {}).get("enabled", False))


def metric_parts():
    return perturb_parts() + ([study_path("theory/metrics.parquet")] if theory_enabled() else [])


def theory_outputs():
    """Everything the theory stage writes (rule all asks for it when theory.enabled)."""
    return [study_path("theory/metrics.parquet")] + [study_path(f"figures/{s}.{ext}") for s in FIGURE_STEMS for ext in FORMATS]


def all_outputs():
    figs = ["progressive_sensitivity", "inflection_point"] + (["pretrain_loss"] if pretrain_dirs() else [])
    out = [study_path("metrics.parquet"), study_path("analysis/inflection.parquet")]
    out += [study_path(f"figures/{f}.{ext}") for f in figs for ext in FORMATS]
    if theory_enabled():
        out += theory_outputs()
    return out
