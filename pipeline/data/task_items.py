"""What a fine-tuning task is made of: its items (an LM document, a classification item, a
conversation), the splits, and the builders that turn one row of a source dataset (the hub
datasets' schemas, which the embedded copies share) into one item, raising TaskError naming the
row and field that do not parse."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from pipeline.data.packages import (
    olmes_boolq,
)

SPLITS = ("train", "validation", "test")


KINDS = ("lm", "classification", "chat")


CHAT_ROLES = ("system", "user", "assistant")


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


def gsm8k_doc(row: Mapping, where: str) -> str:
    question, answer = _field(row, "question", where).strip(), _field(row, "answer", where).strip()
    return f"Question: {question}\nAnswer: {answer}"


def siqa_item(row: Mapping, where: str) -> ClassificationItem:
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


def boolq_row(row: Mapping, where: str) -> ClassificationItem:
    passage, question = _field(row, "passage", where), _field(row, "question", where)
    return _boolq_item(passage, question, _field(row, "answer", where, bool))


def boolq_request(doc: Mapping, where: str) -> ClassificationItem:
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


def rte_item(row: Mapping, where: str) -> ClassificationItem:
    premise, hyp = _field(row, "sentence1", where).strip(), _field(row, "sentence2", where).strip()
    prompt = f"Question: {hyp} True or False?\nAnswer:"
    return ClassificationItem(prompt, (" True", " False"), _glue_label(row, where), context=premise + "\n")


def sentiment_item(text: str, label: int) -> ClassificationItem:
    return ClassificationItem(f"Review: {text.strip()}\nSentiment:", (" negative", " positive"), label)


def sst2_item(row: Mapping, where: str) -> ClassificationItem:
    return sentiment_item(_field(row, "sentence", where), _glue_label(row, where))


def mr_item(row: Mapping, where: str) -> ClassificationItem:
    return sentiment_item(_field(row, "text", where), _glue_label(row, where))


def text_doc(text_field: str) -> Callable[[Mapping, str], str]:
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


def hh_item(row: Mapping, where: str) -> ChatItem:
    """The "chosen" transcript as the target (Appendix B.2); "rejected" is not used."""
    text = _field(row, "chosen", where)
    parts = _HH_MARKER.split("\n\n" + text.lstrip())
    if parts[0].strip() or len(parts) < 3:
        raise TaskError(f"{where}: field 'chosen' is not {_HH_FORMAT}, got {text[:80]!r}")
    role = {"Human": "user", "Assistant": "assistant"}
    messages = [Message(role[r], c.strip()) for r, c in zip(parts[1::2], parts[2::2])]
    return _chat_item(messages, where, f"field 'chosen' should be {_HH_FORMAT}")


_TULU_FORMAT = "field 'messages' should be a list of {role, content} with role system, user or assistant"


def tulu_item(row: Mapping, where: str) -> ChatItem:
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


def alpaca_item(row: Mapping, where: str) -> ChatItem:
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


def mbpp_item(row: Mapping, where: str) -> ChatItem:
    """User: the problem statement ("Write a function to ..."); assistant: the reference solution."""
    text, code = _field(row, "text", where).strip(), _field(row, "code", where)
    code = code.replace("\r\n", "\n").strip()
    expected = "expected an MBPP row: text, code"
    if not text:
        raise TaskError(f"{where}: field 'text' is empty ({expected})")
    return _chat_item([Message("user", text), Message("assistant", code)], where, expected)


def item_text(item: str | ClassificationItem | ChatItem) -> str:
    """An LM document, a classification item's full prompt followed by its gold answer, or a
    conversation in the default chat format (pipeline.data.chat, without end-of-turn tokens)."""
    if isinstance(item, ClassificationItem):
        return item.context + item.prompt + item.choices[item.label]
    if isinstance(item, ChatItem):
        return "".join(f"<|{m.role}|>\n{m.content}\n" for m in item.messages)
    return item
