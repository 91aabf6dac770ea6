"""The study config at start-up: the checks a schema cannot express (pipeline/workflow/schema.py
validates it against config/schema.yaml and fills its defaults), and the settings the rules read.

Every error names the key path, what was given and what was expected, in a line or two.

One owner per default (config/schema.yaml states it too):
- a key that is a field of its section's dataclass (PretrainConfig, FinetuneConfig, CurvatureConfig,
  AlpacaEvalConfig and its parts, the search's lr_search.SearchSettings): the dataclass owns the default
  and the cross-key checks, the schema the type, enum and range (and no `default:`); code reads the
  dataclass built from the section (`hyperparameters`, `alpaca_eval_config`).
- any other key: the schema owns the default, filled once here by `validate_config`; code reads
  `config[section][key]` and repeats no default. The sections that always exist are required by the
  schema (or default to {}); `alpaca_eval` may be absent (read through its dataclass).
The checks below are only those a schema cannot express (cross-key, files, registries, plans).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from pipeline import layout
from pipeline.curvature.config import CurvatureConfig
from pipeline.data.shard_tokenize import hub_source, shard_name
from pipeline.data.task_items import TaskError
from pipeline.data.tasks import TASK_NAMES, task_files, task_kind
from pipeline.data.token_shards import check_shards, expand_paths, shard_set
from pipeline.evaluate.benchmark_registry import (
    BenchmarkError,
    benchmark_config,
    validate_benchmark_tasks,
)
from pipeline.judge.config import AlpacaEvalConfig, JudgeConfigError
from pipeline.layout import format_hparam
from pipeline.models.checkpoints import CheckpointSpec, study_checkpoints
from pipeline.models.presets import mup_base
from pipeline.sweeps.lr_grids import finetune_lr_grid
from pipeline.sweeps.lr_search import LRSearch, SearchError
from pipeline.sweeps.lr_search import exhaustive as search_exhaustive
from pipeline.sweeps.lr_search import from_config as search_from_config
from pipeline.theory.config import check_config as check_theory
from pipeline.train.config import (
    FinetuneConfig,
    PretrainConfig,
    check_repeat,
    chunked_tokens,
    hyperparameters,
    steps_for_budget,
)
from pipeline.train.memory import PlanError
from pipeline.workflow.multimodal import check_multimodal, text_tasks
from pipeline.workflow.plans import finetune_plan
from pipeline.workflow.pretrain_sweep import branch_steps, pretrain_ranks
from pipeline.workflow.schema import ConfigError

# --- checks the schema cannot express -------------------------------------------------------------


def check_budgets_fit(config: dict) -> None:
    """Every budget fits the training tokens (pretrain.allow_repeat aside), checked before any job:
    the shards of `pretrain.token_shards` (checked whole first), or the study's split where it is
    tokenized already with the config's corpus and tokenizer settings (its record,
    data/train_tokens.json); otherwise each pre-training job checks its own budget as it starts."""
    pt = config["pretrain"]
    if config["checkpoints"]["source"] != "sweep":
        return
    if pt.get("text_files"):
        return  # tokenized by the study's jobs: each pre-training job checks its budget as it starts
    if pt.get("token_shards"):
        shards = shard_set(pt["token_shards"])
        tokens, where = check_shards(shards, tokenizer_vocab(config["tokenizer"])), "pretrain.token_shards"
    else:
        info = Path(layout.study_path(config["study"], layout.TRAIN_TOKENS_INFO))
        if not info.is_file():
            return
        made = json.loads(info.read_text())
        if made.get("corpus") != config["corpus"] or made.get("tokenizer") != config["tokenizer"]:
            return  # the split will be made again
        tokens, where = made["tokens"], str(info.with_suffix(".npy"))
    if pt["allow_repeat"]:
        return
    available = chunked_tokens(tokens, pt["seq_len"])
    per_step = pt["batch_size"] * pt["seq_len"]
    for budget in pt["budgets"]:
        trained = steps_for_budget(budget, pt["batch_size"], pt["seq_len"]) * per_step
        check_repeat(budget, trained, available, False, where)


def text_files(config: dict) -> dict[str, str]:
    """`pretrain.text_files` by shard name (each file's, unique): local files (`paths`, globs
    expanded) or a hub dataset's files at a revision (`hub`, as `hf://datasets/<repo>@<rev>/<file>`).
    A clear error for a pattern that matches nothing, a file of another format, two files of one
    name, neither or both sources, or token_shards beside it."""
    pt = config["pretrain"]
    section = pt.get("text_files")
    if not section:
        return {}
    if pt.get("token_shards"):
        raise ValueError("pretrain.text_files and pretrain.token_shards: give one source of training tokens")
    if bool(section.get("paths")) == bool(section.get("hub")):
        raise ValueError(
            "pretrain.text_files: give paths (local files) or hub (a hub dataset's files), one of them"
        )
    expected = "JSON lines, .json.gz or Parquet"
    sources = expand_paths("pretrain.text_files.paths", section.get("paths") or [], expected)
    if section.get("hub"):
        hub = section["hub"]
        sources += [hub_source(hub["repo"], hub["revision"], f) for f in hub["files"]]
    files: dict[str, str] = {}
    for source in sources:
        name = shard_name(source)
        if name in files:
            raise ValueError(f"pretrain.text_files: {files[name]} and {source} make the same shard {name!r}")
        files[name] = source
    return files


def tokenizer_vocab(section: dict) -> int:
    """The vocabulary size of the study's tokenizer: `vocab_size`, or a tokenizer file's own (its
    largest id + 1, added tokens included). A file that is missing, is not JSON or holds no vocabulary
    is an error naming tokenizer.path and the file (check_config reads it before anything else does)."""
    if section["kind"] != "file":
        return section["vocab_size"]
    path = section.get("path")
    if not path:
        raise ValueError("tokenizer.path is required when tokenizer.kind is 'file'")
    expected = "expected a tokenizer.json of the tokenizers library (tokenizer.kind: file)"
    file = Path(path)
    if not file.is_file():
        raise ValueError(
            f"tokenizer.path: {path} {'is a folder' if file.is_dir() else 'does not exist'}; {expected}"
        )
    try:
        spec = json.loads(file.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"tokenizer.path: {path} is not JSON ({err}); {expected}") from None
    model = spec.get("model") if isinstance(spec, dict) else None
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if not vocab or not isinstance(vocab, dict | list):
        raise ValueError(f"tokenizer.path: {path} holds no vocabulary (no model.vocab); {expected}")
    # token -> id (BPE, WordPiece, WordLevel), or a Unigram's [piece, score] pairs (ids by position)
    ids = list(vocab.values()) if isinstance(vocab, dict) else [len(vocab) - 1]
    ids += [t.get("id") for t in spec.get("added_tokens") or [] if isinstance(t, dict)]
    if not all(isinstance(i, int) for i in ids):
        raise ValueError(f"tokenizer.path: {path}: a token id that is not an integer; {expected}")
    return max(ids) + 1


def check_config(config: dict, check_benchmark_tasks: bool = True) -> dict[str, CheckpointSpec]:
    """Semantic checks of a schema-valid config; fail before any job starts. Returns the study's
    checkpoints by name. check_benchmark_tasks: resolve eval.benchmarks task names (the main
    process only: source builtin builds lm-eval's task index, ~10 s, which every cluster job's
    re-parse of the workflow would pay again)."""
    pt = config["pretrain"]
    try:
        tokenizer_vocab(config["tokenizer"])  # before anything reads the tokenizer
        for budget in pt["budgets"]:
            steps_for_budget(budget, pt["batch_size"], pt["seq_len"])
        specs = study_checkpoints(config)
        pretrain = PretrainConfig(**hyperparameters(PretrainConfig, pt))
        if pretrain.schedule == "wsd":
            branch_steps(config)  # every budget's decay fits after the warmup
        elif pt.get("stable_twins"):
            raise ValueError(
                "pretrain.stable_twins: a budget's stable twin is the undecayed WSD run at its tokens; "
                f"expected pretrain.schedule: wsd, got {pretrain.schedule!r}"
            )
        if pt["ranks"] is not None and pt["batch_size"] % pt["ranks"]:
            raise ValueError(
                f"pretrain.batch_size {pt['batch_size']} cannot be split evenly over "
                f"pretrain.ranks {pt['ranks']}"
            )
        if pretrain.parameterization == "mup":
            for preset in pt["presets"]:
                mup_base(preset)  # each preset has a base width
        text_files(config)
        check_budgets_fit(config)
        if finetune_enabled(config):
            for method in finetune_methods(config):
                check_method(config, method)
            methods = {
                m: FinetuneConfig(**hyperparameters(FinetuneConfig, method_section(config, m)))
                for m in finetune_methods(config)
            }
            check_multimodal(config, methods, alpaca_eval_enabled(config))
        if curvature_enabled(config):
            CurvatureConfig(**hyperparameters(CurvatureConfig, curvature_section(config)))
        check_theory(config["theory"])  # enabled or not: its job can still be asked for by its output
    except (ValueError, KeyError) as err:
        raise ConfigError(f"invalid config: {err}") from None
    for spec in specs:
        if spec.source == "local" and not Path(spec.path, "config.json").is_file():
            raise ConfigError(
                f"invalid config: checkpoints.local entry {spec.name!r}: {spec.path} is not a model "
                "directory (expected config.json there)"
            )
    check_ranks(config)
    if config["device"] == "cuda":
        check_plans(config, specs)
    check_grid("finetune.learning_rates", finetune_lrs(config))
    check_grid("finetune.lambdas", config["finetune"]["lambdas"])
    check_tasks(config)
    check_grid_per_job(config)
    if alpaca_eval_enabled(config):
        check_alpaca_eval(config, specs)
    elif finetune_enabled(config) and config["finetune"]["select_metric"] == "win_rate":
        raise ConfigError(
            "invalid config: finetune.select_metric: win_rate needs the judged metric "
            "(alpaca_eval.enabled: true)"
        )
    if check_benchmark_tasks:
        bench = bench_config(config)
        try:
            validate_benchmark_tasks(bench["tasks"], bench["source"])
        except BenchmarkError as err:
            raise ConfigError(f"invalid config: eval.benchmarks: {err}") from None
    return {s.name: s for s in specs}


def check_ranks(config: dict) -> None:
    """pretrain.ranks (a sweep's) and finetune.ranks fit one node's GPUs (device cuda: torchrun starts
    a job's ranks on one node) and divide the global batch; a sharded job supports what it does
    (pipeline/train/placement.py: the curvature line needs the whole model in one process)."""
    ranks, ft = finetune_ranks(config), config["finetune"]
    per_node = config["gpu"]["per_node"]
    on_gpus = {"finetune.ranks": ranks}
    if config["checkpoints"]["source"] == "sweep" and config["pretrain"]["ranks"] is not None:
        on_gpus["pretrain.ranks"] = config["pretrain"]["ranks"]  # null: the planner's, within a node
    for key, count in on_gpus.items():
        if config["device"] == "cuda" and count > per_node:
            raise ConfigError(
                f"invalid config: {key} {count} is more GPUs than a node has (gpu.per_node {per_node}); "
                "a job runs on one node"
            )
    if finetune_enabled(config) and ft["batch_size"] % ranks:
        raise ConfigError(
            f"invalid config: finetune.batch_size {ft['batch_size']} cannot be split evenly over "
            f"finetune.ranks {ranks}"
        )
    if finetune_enabled(config) and ranks > 1 and curvature_enabled(config):
        raise ConfigError(
            f"invalid config: curvature.enabled with finetune.ranks {ranks}: the curvature stage's line "
            "along theta_ft - theta_pre needs the whole fine-tuned model in one process, which a sharded "
            "job does not hold; set finetune.ranks: 1 or curvature.enabled: false"
        )
    if finetune_enabled(config) and ranks > 1:
        for method in finetune_methods(config):
            check_whole_model(config, method)


def check_plans(config: dict, specs: Iterable[CheckpointSpec]) -> None:
    """Every checkpoint's fine-tuning jobs and every preset's pre-training jobs fit the config's GPUs
    (the memory planner), else the planner's arithmetic as a config error before any job starts."""
    try:
        for spec in specs if finetune_enabled(config) else []:
            finetune_plan(spec, config)
        if config["checkpoints"]["source"] == "sweep":
            for preset in config["pretrain"]["presets"]:
                pretrain_ranks(config, preset)
    except PlanError as err:
        raise ConfigError(f"invalid config (device cuda, gpu section): {err}") from None


def check_tasks(config: dict) -> None:
    """The data settings of every task a job reads (fine-tuning, tokenizer.extra_texts), e.g. a
    chat task without source hub, fail here rather than in a job."""
    names = text_tasks(config) if finetune_enabled(config) else []
    extra = config["tokenizer"]["extra_texts"]
    names += [n for n in extra if n in TASK_NAMES and n not in names]
    for name in names:
        try:
            task_files(name, task_settings(config, name))
        except TaskError as err:
            raise ConfigError(f"invalid config: {err}") from None


def check_alpaca_eval(config: dict, specs: list[CheckpointSpec]) -> None:
    """The judged metric can run: a valid judge and generation config, a fine-tuning grid (every
    run known before judging), the reference run in that grid, a chat task for task instructions."""
    ft, key = config["finetune"], "invalid config: alpaca_eval"
    try:
        section = alpaca_eval_config(config)
        section.judge.evaluator  # noqa: B018 -- reads and checks the evaluator config
    except (JudgeConfigError, ValueError) as err:
        raise ConfigError(f"invalid config: {err}") from None
    if finetune_search(config) is not None:
        raise ConfigError(
            f"{key}: the judged metric needs every fine-tuning run before judging; "
            "give finetune.learning_rates "
            "as a grid with finetune.seeds_at: all (not a search, not seeds_at: tuned)"
        )
    ref, names = section.reference, [s.name for s in specs]
    grid = {
        "checkpoint": (reference_checkpoint(config, specs), names),
        "learning_rate": (format_hparam(ref.learning_rate), [format_hparam(x) for x in finetune_lrs(config)]),
        "seed": (ref.seed, list(ft["seeds"])),
        "lambda_reg": (format_hparam(ref.lambda_reg), [format_hparam(x) for x in ft["lambdas"]]),
    }
    for field_name, (value, values) in grid.items():
        if value not in values:
            raise ConfigError(
                f"{key}.reference.{field_name}: {value} is not in the study's grid {values}; the reference "
                "run must be one of the fine-tuning runs (Appendix B.3: seed 0, learning rate 1e-5)"
            )
    src = section.instructions
    if src.source == "task" and (src.task not in TASK_NAMES or task_kind(src.task) != "chat"):
        chat = [n for n in TASK_NAMES if task_kind(n) == "chat"]
        raise ConfigError(f"{key}.instructions.task: {src.task!r} is not a chat task; chat tasks: {chat}")
    if src.source == "local" and not Path(src.path).is_file():
        raise ConfigError(f"{key}.instructions.path: {src.path} does not exist (source local: a file)")


def check_grid(key: str, values: Iterable[float]) -> None:
    """Grid values name output files: two values with the same file name are an error."""
    names = [format_hparam(v) for v in values]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        raise ConfigError(
            f"invalid config: {key} has values that differ only beyond 6 significant digits: {clash}"
        )


# --- settings the rules read ----------------------------------------------------------------------


def device(config: dict) -> str:
    return config["device"]


def finetune_section(config: dict) -> dict:
    return config["finetune"]


def finetune_methods(config: dict) -> dict[str, dict]:
    """The fine-tuning methods by name (`finetune.methods`): each one's METHOD fields (params,
    proximal, replay_fraction); a run's rows carry its method's name as `modification`."""
    return {name: dict(settings or {}) for name, settings in config["finetune"]["methods"].items()}


def method_section(config: dict, method: str) -> dict:
    """The `finetune:` section as one method's jobs read it: its METHOD fields set."""
    methods = finetune_methods(config)
    if method not in methods:
        raise KeyError(f"finetune.methods: no method {method!r}; the study's methods are {sorted(methods)}")
    return config["finetune"] | methods[method]


def check_method(config: dict, method: str) -> None:
    """A fine-tuning method's settings, before any job: its config; a proximal step that would
    overshoot θ_pre (λη > 1 at the grid's or the search lattice's largest rate); a linearized
    method with the judged metric."""
    cfg = FinetuneConfig(**hyperparameters(FinetuneConfig, method_section(config, method)))
    ft = config["finetune"]
    if cfg.proximal != "coupled":
        worst = max(ft["lambdas"]) * max(finetune_lrs(config))
        if worst > 1:
            raise ValueError(
                f"finetune.methods.{method}.proximal: the {cfg.proximal} step θ ← θ − λη(θ − θ_pre) "
                f"overshoots θ_pre where λη > 1 (largest λ x learning rate: {worst:g})"
            )
    if cfg.linearized and alpaca_eval_enabled(config):
        raise ValueError(
            f"finetune.methods.{method}.linearized: the tangent model does not generate text; turn "
            "alpaca_eval off or drop the method"
        )


def check_whole_model(config: dict, method: str) -> None:
    """With finetune.ranks > 1: what needs the whole model in one process is off for `method`."""
    cfg = FinetuneConfig(**hyperparameters(FinetuneConfig, method_section(config, method)))
    named = [key.replace("methods.*", f"methods.{method}") for key in cfg.whole_model_keys()]
    if named:
        raise ConfigError(
            f"invalid config: {', '.join(named)}: linearized fine-tuning runs in one process only (the "
            f"tangent model's jvp does not go through FSDP2's sharded parameters); finetune.ranks is "
            f"{finetune_ranks(config)} (set it to 1, or drop the method)"
        )


def finetune_ranks(config: dict) -> int:
    """Processes of one fine-tuning job as configured: finetune.ranks, or for null the count where
    nothing is planned (1). With device cuda a null count is the memory planner's choice per
    checkpoint (cluster.finetune_resources); the job's record holds the count it runs on."""
    return int(config["finetune"]["ranks"] or 1)


def finetune_enabled(config: dict) -> bool:
    ft = config["finetune"]
    return bool(ft["enabled"]) and bool(ft["tasks"])


def finetune_lrs(config: dict) -> tuple[float, ...]:
    """The learning-rate grid: a list, or a named grid ("paper": Table 4, "instruct": Table 2);
    with a search, its lattice (every learning rate it may run)."""
    value = config["finetune"]["learning_rates"]
    return finetune_search(config).lattice if isinstance(value, dict) else finetune_lr_grid(value)


def grid_job_seeds(config: dict) -> list[int]:
    """The seeds that run at every rate of the grid (`finetune.grid_per_job`: one job each per
    (checkpoint, task, method, λ)): every seed, or the first where the others run at the tuned rate."""
    seeds = list(config["finetune"]["seeds"])
    return seeds if finetune_search(config) is None else seeds[:1]


def grid_jobs(config: dict) -> bool:
    """Whether the grid's rates run in one job per (checkpoint, task, method, λ, seed)
    (`finetune.grid_per_job`). `auto`: where that is allowed and saves start-ups that matter: more
    than one rate, and not `device: cuda`, whose jobs are sized per run (GPUs, time limit) and whose
    runs take long enough that a grid job would hold its GPUs for the whole grid."""
    setting = config["finetune"]["grid_per_job"]
    if not finetune_enabled(config) or setting is False:
        return False
    if setting is True:
        return True
    return config["device"] != "cuda" and not grid_jobs_refused(config) and len(finetune_lrs(config)) > 1


def grid_jobs_refused(config: dict) -> str | None:
    """Why the grid's rates cannot run in one job (a grid known before any run and per-run outputs
    only are needed), or None."""
    if isinstance(config["finetune"]["learning_rates"], dict):
        return (
            "a search's learning rates are known only as it goes; give finetune.learning_rates "
            "as a grid or set grid_per_job: false (or auto)"
        )
    if alpaca_eval_enabled(config):
        return (
            "the judged metric's responses are one job's output per run; set grid_per_job: false "
            "(or auto) or alpaca_eval.enabled: false"
        )
    return None


def check_grid_per_job(config: dict) -> None:
    """`finetune.grid_per_job: true` where the grid's rates cannot run in one job."""
    if finetune_enabled(config) and config["finetune"]["grid_per_job"] is True:
        reason = grid_jobs_refused(config)
        if reason:
            raise ConfigError(f"invalid config: finetune.grid_per_job: {reason}")


def finetune_search(config: dict) -> LRSearch | None:
    """The adaptive learning-rate search (`learning_rates: {search: ...}`), a grid whose other seeds
    run at its argmin only (`seeds_at: tuned`: a one-round search), or None (every seed at every rate)."""
    ft = config["finetune"]
    value, seeds_at = ft["learning_rates"], ft["seeds_at"]
    if not isinstance(value, dict):
        tuned = seeds_at == "tuned" and len(ft["seeds"]) > 1
        return search_exhaustive(finetune_lr_grid(value)) if tuned else None
    if seeds_at == "all":
        raise ConfigError(
            "invalid config: finetune.seeds_at: all cannot go with finetune.learning_rates.search (the other "
            "seeds run at the rate it chooses); drop seeds_at or give a grid"
        )
    try:
        return search_from_config(value["search"])
    except SearchError as err:
        raise ConfigError(f"invalid config: {err}") from None


def task_settings(config: dict, task: str) -> dict:
    """Data settings of one fine-tuning task (`finetune.task_data.<task>`; none: {})."""
    return config["finetune"]["task_data"].get(task) or {}


def eval_config(config: dict) -> dict:
    """`eval` without the benchmark suite's settings: perplexity jobs do not rerun when those change."""
    return {k: v for k, v in config["eval"].items() if k != "benchmarks"}


def bench_config(config: dict) -> dict:
    """`eval.benchmarks` with its defaults (pipeline.evaluate.benchmarks); no tasks: no benchmark jobs."""
    return benchmark_config(config["eval"]["benchmarks"])


def benchmarks_enabled(config: dict) -> bool:
    return bool(bench_config(config)["tasks"])


def theory_enabled(config: dict) -> bool:
    return bool(config["theory"]["enabled"])


def curvature_section(config: dict) -> dict:
    return config["curvature"]


def curvature_enabled(config: dict) -> bool:
    return bool(config["curvature"]["enabled"])


def linearization_enabled(config: dict) -> bool:
    """The linearization stage's figures are drawn: the study fine-tunes and computes any of the
    gap, the NTK, WiSE-FT, or runs more than one fine-tuning method."""
    if not finetune_enabled(config) or not text_tasks(config):  # the gap, NTK, WiSE-FT: text tasks
        return False
    ft = config["finetune"]
    return bool(
        ft.get("linearization_tokens") or ft.get("wise_ft_alphas") or len(ft["methods"]) > 1
    ) or ntk_enabled(config)


def ntk_enabled(config: dict) -> bool:
    """Rule ntk runs: the curvature stage is on, it asks for examples, and there are text tasks."""
    asked = bool(config["curvature"].get("ntk_examples"))
    return curvature_enabled(config) and asked and finetune_enabled(config) and bool(text_tasks(config))


def alpaca_eval_enabled(config: dict) -> bool:
    """The judged metric runs: enabled, and there are fine-tuning runs to judge."""
    return alpaca_eval_config(config).enabled and finetune_enabled(config)


def alpaca_eval_config(config: dict) -> AlpacaEvalConfig:
    """The `alpaca_eval` section through its dataclass (an optional section: absent, the defaults)."""
    return AlpacaEvalConfig.from_section(config.get("alpaca_eval"))


def reference_checkpoint(config: dict, specs: Iterable[CheckpointSpec]) -> str:
    """The reference run's checkpoint: alpaca_eval.reference.checkpoint, else the study's last
    (most pre-training tokens)."""
    named = alpaca_eval_config(config).reference.checkpoint
    return named or max(specs, key=lambda s: (s.tokens, -(s.pretrain_seed or 0))).name
