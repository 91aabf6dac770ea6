"""The `alpaca_eval:` config section: the judge, the reference run, the instruction set, how
responses are generated (pipeline/evaluate/generation_config.py) and the judge job's resources,
with their defaults and cross-key checks (the one place they live: config/schema/alpaca_eval.yaml
has the keys' types, enums and ranges and no defaults; a test checks the two agree). An absent
section is the defaults: the judged metric off.

Light: the Snakefile reads it at parse time, so an unknown evaluator config, a parser this module
cannot drive, or a reference run outside the grid fails before any job. alpaca-eval's evaluator
configs are read as YAML from the installed package's files, without importing it.
"""

from __future__ import annotations

import importlib.util
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

import yaml

from pipeline.evaluate.generation_config import GenerationConfig
from pipeline.fields import NEITHER, RECORDED, meta

EVAL_DATA, EVAL_SPLIT = "alpaca_eval", "eval"  # the judged metric's rows in the metrics table
BACKENDS = ("hf_local", "openai")
# the parsers whose answers this module knows how to ask for: text parsers read a generated
# answer; logprob_parser reads the top log-probabilities of the first answer token
TEXT_PARSERS = ("regex_parser", "ranking_parser", "json_parser", "pipeline_meta_parser", "lmsys_parser")
LOGPROB_PARSER = "logprob_parser"


class JudgeConfigError(ValueError):
    """An alpaca_eval section that cannot run; the message names the key and what was expected."""


def evaluators_dir() -> Path:
    """alpaca-eval's evaluator configs (evaluators_configs/<name>/configs.yaml), found without
    importing the package (its import pulls pandas and datasets)."""
    spec = importlib.util.find_spec("alpaca_eval")
    if spec is None or not spec.submodule_search_locations:
        raise JudgeConfigError("alpaca_eval: the alpaca-eval package is not installed (`make setup`)")
    return Path(next(iter(spec.submodule_search_locations))) / "evaluators_configs"


def evaluator_config(annotator: str) -> dict[str, Any]:
    """One alpaca-eval evaluator config: its name under evaluators_configs/, or a path to a
    configs.yaml (the prompt template's path is then relative to that file's folder)."""
    local = Path(annotator)
    path = local if local.suffix in (".yaml", ".yml") else evaluators_dir() / annotator / "configs.yaml"
    if not path.is_file():
        known = sorted(p.name for p in evaluators_dir().iterdir() if (p / "configs.yaml").is_file())
        raise JudgeConfigError(
            f"alpaca_eval.judge.annotator: {annotator!r} is neither an alpaca-eval evaluator config "
            f"nor a configs.yaml file; known evaluators: {', '.join(known)}"
        )
    record = yaml.safe_load(path.read_text())
    if not isinstance(record, dict) or len(record) != 1:
        raise JudgeConfigError(f"alpaca_eval.judge.annotator: {path} should hold one evaluator config")
    (cfg,) = record.values()
    parser = cfg.get("fn_completion_parser", "regex_parser")
    if parser not in (*TEXT_PARSERS, LOGPROB_PARSER):
        raise JudgeConfigError(
            f"alpaca_eval.judge.annotator: {annotator!r} parses with {parser!r}; supported: "
            f"{', '.join((*TEXT_PARSERS, LOGPROB_PARSER))}"
        )
    if int(cfg.get("batch_size", 1)) != 1:
        raise JudgeConfigError(
            f"alpaca_eval.judge.annotator: {annotator!r} puts {cfg['batch_size']} pairs in one prompt; "
            "only one pair per prompt is supported"
        )
    base = path.parent if local.suffix in (".yaml", ".yml") else evaluators_dir()
    return {**cfg, "prompt_template": str(base / cfg["prompt_template"]), "fn_completion_parser": parser}


@dataclass(frozen=True)
class JudgeConfig:
    """Who judges (config `alpaca_eval.judge`). Every field is a param of the judge rule; its role
    (pipeline/fields.py) says whether it can change an answer: NUMBERS fields (the default) are the
    judge's identity, the key of its annotation cache (pipeline/judge/annotate.py); `name` labels
    the judge's output folder and rows; the others only say how answers are asked for and summarised."""

    name: str = field(default="llama3-70b", metadata=meta(RECORDED))
    # an alpaca-eval evaluator config (prompt template + parser): the paper's judge is
    # Llama-3-70B-Instruct; alpaca_eval_llama3_70b_fn is AlpacaEval's ranking prompt for it
    annotator: str = "alpaca_eval_llama3_70b_fn"
    backend: str = "openai"  # openai: an OpenAI-compatible endpoint (e.g. vLLM); hf_local: in the job
    model: str = (
        "meta-llama/Meta-Llama-3-70B-Instruct"  # model id (endpoint) or hub id / local dir (hf_local)
    )
    revision: str | None = None  # hf_local: hub revision
    cache_dir: str | None = None  # hf_local: hub cache
    offline: bool | None = None  # hf_local: only the hub cache (None: HF_HUB_OFFLINE)
    # openai: the endpoint, and the environment variable holding its key
    base_url: str | None = field(default="http://localhost:8000/v1", metadata=meta(NEITHER))
    api_key_env: str = field(default="OPENAI_API_KEY", metadata=meta(NEITHER))
    max_tokens: int | None = None  # of an answer (None: the evaluator config's)
    batch_size: int = field(default=4, metadata=meta(NEITHER))  # hf_local: prompts per forward pass
    # re-asks of an unparsable answer before it is recorded as unparsable
    max_retries: int = field(default=2, metadata=meta(NEITHER))
    seed: int = 0  # output-order randomisation (per instruction, as alpaca-eval)
    # fit the length-controlled win rate (where it can be fitted): a summary of the answers
    length_controlled: bool = field(default=True, metadata=meta(NEITHER))

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise JudgeConfigError(
                f"alpaca_eval.judge.backend: expected one of {BACKENDS}, got {self.backend!r}"
            )
        if self.backend == "openai" and not self.base_url:
            raise JudgeConfigError("alpaca_eval.judge.base_url: the openai backend needs the endpoint's URL")
        if self.max_retries < 0 or self.batch_size < 1:
            raise JudgeConfigError("alpaca_eval.judge: max_retries must be >= 0 and batch_size >= 1")

    @property
    def evaluator(self) -> dict[str, Any]:
        return evaluator_config(self.annotator)


@dataclass(frozen=True)
class ReferenceRun:
    """The run every model is judged against (config `alpaca_eval.reference`): Appendix B.3's same
    architecture fine-tuned on the same data with seed 0 at learning rate 1e-5. The paper does not
    say which checkpoint; None: the study's last (most pre-training tokens)."""

    checkpoint: str | None = None
    learning_rate: float = 1e-5
    seed: int = 0
    lambda_reg: float = 0.0


@dataclass(frozen=True)
class InstructionSet:
    """Where the instructions come from (config `alpaca_eval.instructions`)."""

    source: str = "hub"  # hub: a file of a hub dataset repo | local: a file | task: a chat task's split
    path: str | None = "tatsu-lab/alpaca_eval"  # hub: dataset repo id; local: .json/.jsonl/.parquet/.csv
    file: str = "alpaca_eval.json"  # hub: the file in the repo
    revision: str | None = None  # hub
    task: str | None = None  # task: a chat task of the study's registry
    split: str = "test"  # task: its split
    max_items: int | None = None  # the first n instructions (None: all)

    def __post_init__(self) -> None:
        if self.source not in ("hub", "local", "task"):
            raise JudgeConfigError(
                f"alpaca_eval.instructions.source: expected hub, local or task, got {self.source!r}"
            )
        if self.source in ("hub", "local") and not self.path:
            raise JudgeConfigError(f"alpaca_eval.instructions.path: source {self.source} needs a path")
        if self.source == "task" and not self.task:
            raise JudgeConfigError("alpaca_eval.instructions.task: source task needs a chat task's name")


def _build(cls, section: dict | None, key: str):
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(section or {}) - known)
    if unknown:
        raise JudgeConfigError(f"alpaca_eval.{key}: unknown key(s) {unknown}; known: {sorted(known)}")
    return cls(**(section or {}))


@dataclass(frozen=True)
class JudgeResources:
    """A judge job's resources (config `alpaca_eval.resources`; pipeline/workflow/cluster.py): an
    endpoint judge needs no GPU, an hf_local 70B judge several. Changes no number."""

    gpu: int = 0
    mem_mb: int = 8000
    runtime: int = 120  # minutes
    threads: int = 1


@dataclass(frozen=True)
class AlpacaEvalConfig:
    """The whole section, parsed."""

    PARTS: ClassVar[dict[str, type]] = {
        "generation": GenerationConfig,
        "judge": JudgeConfig,
        "reference": ReferenceRun,
        "instructions": InstructionSet,
        "resources": JudgeResources,
    }

    enabled: bool = False  # the judged metric runs (with fine-tuning runs to judge)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    reference: ReferenceRun = field(default_factory=ReferenceRun)
    instructions: InstructionSet = field(default_factory=InstructionSet)
    resources: JudgeResources = field(default_factory=JudgeResources)
    base: bool = True  # also judge each checkpoint's model before fine-tuning

    @classmethod
    def from_section(cls, section: dict | None) -> AlpacaEvalConfig:
        """The section (absent: None) with the defaults of every key it leaves out."""
        section = section or {}
        parts = {key: _build(part, section.get(key), key) for key, part in cls.PARTS.items()}
        return cls(**parts, **{k: v for k, v in section.items() if k not in cls.PARTS})


def judge_params(cfg: JudgeConfig) -> dict:
    """The judge rule's params: every field, and the evaluator config's contents (editing a local
    configs.yaml or template reruns judging)."""
    evaluator = cfg.evaluator
    return {**asdict(cfg), "evaluator": evaluator, "template": Path(evaluator["prompt_template"]).read_text()}
