"""LLaVA's training data in its own published JSON schema, read into typed records and written back.

The schema of `blip_laion_cc_sbu_558k.json` (stage 1, LCS-558K captions) and
`llava_v1_5_mix665k.json` (stage 2), https://github.com/haotian-liu/LLaVA/blob/main/docs/Data.md: a list of

    {"id": "...", "image": "coco/train2017/000000033471.jpg",       # "image" absent: text only
     "conversations": [{"from": "human", "value": "<image>\\nWhat ...?"},
                       {"from": "gpt", "value": "..."}, ...]}

with the `<image>` placeholder in a human turn of every record that has an image.

What is checked, each error naming the record's id and the file (LLaVA's own loader would assert or
silently misalign instead; `llava/train/train.py`): a record without an id or conversations, a
turn whose `from` is neither human nor gpt or whose `value` is not a string, turns that do not
alternate, no gpt turn, an image with no placeholder (`require_image_token`; otherwise one is put
in front, as lmms-eval's `llava_hf` does with a prompt that lacks one), a placeholder with no
image, more than one placeholder, or a list of images. A conversation that starts with a gpt turn
loses that turn, as LLaVA's `preprocess_v1` drops it (counted). The turns' text is kept as written;
`image_first` is LLaVA's own normalisation (`preprocess_multimodal`: the placeholder moved to the
front of its turn, followed by a newline).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.io import atomic_path
from pipeline.multimodal.images import ImageSource, MissingReport, check_images

IMAGE_TOKEN = "<image>"  # LLaVA's DEFAULT_IMAGE_TOKEN (llava/constants.py)
ROLES = {"human": "user", "gpt": "assistant"}  # LLaVA's `from` -> our role
FROM = {v: k for k, v in ROLES.items()}


class LlavaDataError(ValueError):
    """A record of a LLaVA JSON file that does not follow the schema: names the record and the file."""


@dataclass(frozen=True)
class LlavaRecord:
    """One conversation: turns as (role, text), role user | assistant; `image` is the image's key
    (a path under the image folder, or an image-store id), None for a text-only conversation."""

    id: str
    image: str | None
    turns: tuple[tuple[str, str], ...]

    @property
    def has_image(self) -> bool:
        return self.image is not None


@dataclass(frozen=True)
class LlavaData:
    """The records of one file, what `check_images` skipped, and what the reader changed."""

    path: str
    records: list[LlavaRecord]
    missing: MissingReport = field(default_factory=MissingReport)
    dropped_leading_gpt: int = 0  # conversations whose first (gpt) turn was dropped, as LLaVA does
    placeholders_added: int = 0  # images without a placeholder given one (require_image_token=False)


def image_first(text: str) -> str:
    """LLaVA's `preprocess_multimodal` on one turn: the placeholder removed, the text stripped, and
    "<image>\\n" put in front (a turn without a placeholder is returned as it is)."""
    if IMAGE_TOKEN not in text:
        return text
    return (IMAGE_TOKEN + "\n" + text.replace(IMAGE_TOKEN, "").strip()).strip()


def _record(raw: Any, index: int, where: str, require_image_token: bool) -> tuple[LlavaRecord, bool, bool]:
    """A raw JSON record -> (record, its leading gpt turn dropped?, a placeholder added?)."""
    if not isinstance(raw, dict):
        raise LlavaDataError(f"{where}: record {index} is a {type(raw).__name__}, expected an object")
    if "id" not in raw or not isinstance(raw["id"], str | int) or raw["id"] == "":
        raise LlavaDataError(f"{where}: record {index} has no 'id' (a string or a number)")
    rid = str(raw["id"])
    name = f"{where}: record {rid!r} (index {index})"
    image = raw.get("image")
    if isinstance(image, list):
        raise LlavaDataError(
            f"{name}: 'image' is a list; one image per conversation is supported (LLaVA-1.5)"
        )
    if image is not None and (not isinstance(image, str) or not image):
        raise LlavaDataError(f"{name}: 'image' must be a non-empty string (a file under the image folder)")
    conv = raw.get("conversations")
    if not isinstance(conv, list) or not conv:
        raise LlavaDataError(f"{name}: 'conversations' is missing or empty")
    turns: list[tuple[str, str]] = []
    for t, turn in enumerate(conv):
        if not isinstance(turn, dict) or turn.get("from") not in ROLES:
            got = turn.get("from") if isinstance(turn, dict) else turn
            raise LlavaDataError(f"{name}: turn {t} is from {got!r}; expected 'human' or 'gpt'")
        if not isinstance(turn.get("value"), str):
            raise LlavaDataError(f"{name}: turn {t} has no string 'value'")
        turns.append((ROLES[turn["from"]], turn["value"]))
    dropped = turns[0][0] == "assistant"
    if dropped:  # preprocess_v1: `if roles[source[0]["from"]] != conv.roles[0]: source = source[1:]`
        turns = turns[1:]
    for t, (role, _) in enumerate(turns):
        if role != ("user" if t % 2 == 0 else "assistant"):
            raise LlavaDataError(
                f"{name}: turns do not alternate human/gpt (turn {t + dropped} is {FROM[role]})"
            )
    if not any(role == "assistant" for role, _ in turns):
        raise LlavaDataError(f"{name}: no gpt turn (nothing to train on)")
    n_tokens = sum(text.count(IMAGE_TOKEN) for _, text in turns)
    in_user = sum(text.count(IMAGE_TOKEN) for role, text in turns if role == "user")
    added = False
    if image is None and n_tokens:
        raise LlavaDataError(f"{name}: has an {IMAGE_TOKEN} placeholder but no 'image'")
    if image is not None:
        if n_tokens > 1 or n_tokens != in_user:
            raise LlavaDataError(
                f"{name}: {n_tokens} {IMAGE_TOKEN} placeholders ({in_user} in human turns); "
                "expected one, in a human turn"
            )
        if n_tokens == 0:
            if require_image_token:
                raise LlavaDataError(
                    f"{name}: has an image ({image}) but no {IMAGE_TOKEN} placeholder in its human turn"
                )
            turns[0] = (turns[0][0], IMAGE_TOKEN + "\n" + turns[0][1])
            added = True
    return LlavaRecord(rid, image, tuple(turns)), dropped, added


def parse_llava_records(
    raw: Any, where: str, require_image_token: bool = True
) -> tuple[list[LlavaRecord], int, int]:
    """Parsed JSON (a list of records) -> (records, leading gpt turns dropped, placeholders added)."""
    if not isinstance(raw, list):
        raise LlavaDataError(f"{where}: expected a JSON list of records, got a {type(raw).__name__}")
    records, dropped, added = [], 0, 0
    seen: set[str] = set()
    for i, r in enumerate(raw):
        rec, d, a = _record(r, i, where, require_image_token)
        if rec.id in seen:
            raise LlavaDataError(f"{where}: record id {rec.id!r} (index {i}) is not unique")
        seen.add(rec.id)
        records.append(rec)
        dropped += d
        added += a
    return records, dropped, added


def read_llava_json(
    path: str | Path,
    images: ImageSource | None = None,
    *,
    require_image_token: bool = True,
    on_missing: str = "error",
    deep: bool = False,
) -> LlavaData:
    """The records of a LLaVA JSON file, checked (module docstring). With `images` (the image folder
    as an `ImageDir`, or the toy's `ImageStore`), every record's image is resolved up front
    (`check_images`: error, or skip and count with on_missing='skip'; `deep` decodes each image)."""
    path = Path(path)
    if not path.is_file():
        raise LlavaDataError(f"LLaVA data file {path} does not exist")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise LlavaDataError(f"{path}: not a JSON file ({e})") from None
    records, dropped, added = parse_llava_records(raw, str(path), require_image_token)
    missing = MissingReport()
    if images is not None:
        records, missing = check_images(
            records,
            images,
            key=lambda r: r.image,
            name=lambda r: f"{path}: record {r.id!r}",
            on_missing=on_missing,
            deep=deep,
        )
    return LlavaData(str(path), records, missing, dropped, added)


def to_llava_json(records: Iterable[LlavaRecord]) -> list[dict[str, Any]]:
    """Records in LLaVA's JSON schema ("image" only where there is one)."""
    out = []
    for r in records:
        row: dict[str, Any] = {"id": r.id}
        if r.image is not None:
            row["image"] = r.image
        row["conversations"] = [{"from": FROM[role], "value": text} for role, text in r.turns]
        out.append(row)
    return out


def write_llava_json(path: str | Path, records: Sequence[LlavaRecord]) -> None:
    """Write records as a LLaVA JSON file (checked as `read_llava_json` would), atomically."""
    rows = to_llava_json(records)
    parse_llava_records(rows, str(path))
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(rows, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
