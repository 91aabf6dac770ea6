"""Images by key: the image store of a study's toy images, the image directory of cluster data, and
LLaVA-1.5's pad-to-square.

A record names its image by a string key. Two sources resolve keys:

- `ImageStore`: one parquet file (`image_id`, `png`, `source`, `width`, `height`); the key is the
  image id, the first 16 hex digits of the sha256 of the PNG bytes, so equal images share one row
  and an image's id is its content (the toy's splits are by it).
- `ImageDir`: a folder; the key is a path relative to it, as LLaVA's JSON files name their images
  (`coco/train2017/000000033471.jpg` under the folder LLaVA calls `image_folder`).

`check_images` resolves every record's image once before any training: a missing or unreadable image
is an error naming the file and the record, or (`on_missing: skip`) the record is dropped and
counted in a `MissingReport` -- never dropped silently.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from PIL import Image, UnidentifiedImageError

from pipeline.io import atomic_path
from pipeline.multimodal.config import ON_MISSING

STORE_COLUMNS = ("image_id", "png", "source", "width", "height")
R = TypeVar("R")


class ImageError(ValueError):
    """A missing or unreadable image, or a bad image store: names the file and the record."""


def image_id(png: bytes) -> str:
    """The id of an image: the first 16 hex digits of the sha256 of its PNG bytes."""
    return hashlib.sha256(png).hexdigest()[:16]


def png_bytes(img: Image.Image) -> bytes:
    """An image as PNG bytes (RGB; the same pixels give the same bytes for a given Pillow)."""
    buf = io.BytesIO()
    img.convert("RGB").save(buf, format="PNG", optimize=False, compress_level=6)
    return buf.getvalue()


def decode_image(data: bytes, where: str) -> Image.Image:
    """Encoded image bytes -> a PIL RGB image (fully decoded); ImageError naming `where` if unreadable."""
    try:
        with Image.open(io.BytesIO(data)) as img:
            return img.convert("RGB")
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
        raise ImageError(f"{where}: unreadable image ({type(e).__name__}: {e})") from None


class ImageStore:
    """The images of a study's toy corpus, by image id, read from / written to one parquet file."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._rows: dict[str, tuple[bytes, str, int, int]] = {}  # id -> (png, source, width, height)

    @classmethod
    def read(cls, path: str | Path) -> ImageStore:
        """The store in `path`; ImageError if it is missing or lacks a column."""
        import pyarrow.parquet as pq

        store = cls(path)
        if not store.path.is_file():
            raise ImageError(f"image store {path} is missing; it is written by the toy corpus's builder")
        table = pq.read_table(store.path)
        missing = [c for c in STORE_COLUMNS if c not in table.column_names]
        if missing:
            raise ImageError(f"image store {path}: missing columns {missing} (has {table.column_names})")
        cols = [table.column(c).to_pylist() for c in STORE_COLUMNS]
        for key, png, source, width, height in zip(*cols):
            store._rows[key] = (png, source, width, height)
        return store

    def write(self, path: str | Path) -> None:
        """Write the store (rows in id order), atomically."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        keys = sorted(self._rows)
        table = pa.table(
            {
                "image_id": pa.array(keys, pa.string()),
                "png": pa.array([self._rows[k][0] for k in keys], pa.binary()),
                "source": pa.array([self._rows[k][1] for k in keys], pa.string()),
                "width": pa.array([self._rows[k][2] for k in keys], pa.int32()),
                "height": pa.array([self._rows[k][3] for k in keys], pa.int32()),
            }
        )
        with atomic_path(path) as tmp:
            pq.write_table(table, tmp)
        self.path = Path(path)

    def add(self, img: Image.Image, source: str) -> str:
        """Store an image (as PNG) and return its id; an image already stored keeps its first source."""
        png = png_bytes(img)
        key = image_id(png)
        self._rows.setdefault(key, (png, source, img.width, img.height))
        return key

    def png(self, key: str) -> bytes:
        return self._rows[key][0]

    def source(self, key: str) -> str:
        return self._rows[key][1]

    def ids(self) -> list[str]:
        return sorted(self._rows)

    def __contains__(self, key: object) -> bool:
        return key in self._rows

    def __len__(self) -> int:
        return len(self._rows)

    def describe(self, key: str) -> str:
        return f"image {key!r} of the image store {self.path or '(in memory)'}"

    def open(self, key: str, where: str) -> Image.Image:
        if key not in self._rows:
            raise ImageError(f"{where}: {self.describe(key)} does not exist ({len(self)} images stored)")
        return decode_image(self._rows[key][0], f"{where}: {self.describe(key)}")

    def check(self, key: str, deep: bool) -> str | None:
        if key not in self._rows:
            return "missing"
        if deep:
            try:
                decode_image(self._rows[key][0], "")
            except ImageError:
                return "unreadable"
        return None


@dataclass(frozen=True)
class ImageDir:
    """A folder of image files, keyed by their path relative to it (LLaVA's `image_folder`)."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    def describe(self, key: str) -> str:
        return f"image file {self.root / key}"

    def open(self, key: str, where: str) -> Image.Image:
        path = self.root / key
        if not path.is_file():
            raise ImageError(f"{where}: {self.describe(key)} does not exist")
        try:
            data = path.read_bytes()
        except OSError as e:
            raise ImageError(f"{where}: {self.describe(key)} cannot be read ({e})") from None
        return decode_image(data, f"{where}: {self.describe(key)}")

    def check(self, key: str, deep: bool) -> str | None:
        path = self.root / key
        if not path.is_file():
            return "missing"
        try:
            with Image.open(path) as img:  # the header (format, size); deep: every pixel
                if deep:
                    img.load()
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
            return "unreadable"
        return None


ImageSource = ImageStore | ImageDir


def load_image(key: str, images: ImageSource, where: str = "") -> Image.Image:
    """The image `key` names, as a PIL RGB image; ImageError naming the file (and `where`, the record)
    if it is missing or unreadable."""
    return images.open(key, where or f"image {key!r}")


@dataclass(frozen=True)
class MissingReport:
    """Records dropped by `check_images` for a missing or unreadable image (`on_missing: skip`)."""

    checked: int = 0  # records with an image
    missing: int = 0
    unreadable: int = 0
    first: tuple[str, ...] = field(default=())  # the first few, "record <id>: <file> (<why>)"

    @property
    def skipped(self) -> int:
        return self.missing + self.unreadable

    def summary(self) -> str:
        if not self.skipped:
            return f"all {self.checked} images found"
        return (
            f"skipped {self.skipped} of {self.checked} records with an image ({self.missing} missing, "
            f"{self.unreadable} unreadable), e.g. " + "; ".join(self.first)
        )


def check_images(
    records: Sequence[R],
    images: ImageSource,
    key: Callable[[R], str | None],
    name: Callable[[R], str],
    on_missing: str = "error",
    deep: bool = False,
    show: int = 5,
) -> tuple[list[R], MissingReport]:
    """Resolve the image of every record up front (before any training).

    key(record): its image key, or None for a record without an image (kept, not checked);
    name(record): how an error names it (e.g. its id and file). `deep` decodes every image (else the
    header only: the file exists and is an image). on_missing: `error` raises ImageError naming the
    first bad image and how many others are bad; `skip` drops those records and counts them.
    Returns (kept records in order, report).
    """
    if on_missing not in ON_MISSING:
        raise ImageError(f"on_missing must be one of {ON_MISSING}, got {on_missing!r}")
    kept: list[R] = []
    counts = {"missing": 0, "unreadable": 0}
    first: list[str] = []
    checked = 0
    for rec in records:
        k = key(rec)
        if k is None:
            kept.append(rec)
            continue
        checked += 1
        why = images.check(k, deep)
        if why is None:
            kept.append(rec)
            continue
        counts[why] += 1
        if len(first) < show:
            first.append(f"{name(rec)}: {images.describe(k)} ({why})")
    report = MissingReport(checked, counts["missing"], counts["unreadable"], tuple(first))
    if report.skipped and on_missing == "error":
        raise ImageError(
            f"{report.skipped} of {checked} records have a missing or unreadable image "
            f"({counts['missing']} missing, {counts['unreadable']} unreadable): "
            + "; ".join(first)
            + " (set on_missing: skip to drop and count them)"
        )
    return kept, report


def check_keys(
    keys: Iterable[str], images: ImageSource, on_missing: str = "error"
) -> tuple[list[str], MissingReport]:
    """`check_images` for bare keys (each names itself)."""
    return check_images(
        list(keys), images, key=lambda k: k, name=lambda k: f"image {k!r}", on_missing=on_missing
    )


def mean_fill(image_mean: Sequence[float]) -> tuple[int, ...]:
    """An image processor's mean (floats in [0, 1]) as the RGB fill LLaVA pads with:
    `tuple(int(x * 255) for x in image_processor.image_mean)` (CLIP's: (122, 116, 104))."""
    return tuple(int(x * 255) for x in image_mean)


def pad_to_square(img: Image.Image, fill: Sequence[int]) -> Image.Image:
    """LLaVA-1.5's `image_aspect_ratio: pad`: the image centred on a square of its longer side, the rest
    filled with `fill` (the image processor's mean colour, `mean_fill`); a square image is returned
    as it is. `expand2square` in haotian-liu/LLaVA `llava/mm_utils.py` (also `llava/train/train.py`):
    the offset is (long - short) // 2 on the short axis."""
    width, height = img.size
    if width == height:
        return img
    side = max(width, height)
    out = Image.new(img.mode, (side, side), tuple(fill))
    out.paste(img, ((side - width) // 2, (side - height) // 2))
    return out
