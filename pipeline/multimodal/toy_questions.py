"""The toy corpus's question templates (pipeline/multimodal/toy_data.py builds the corpus): each asks
one thing about a scene (what, which category / digit / word, colour, presence, counting, position,
comparison, sums; open, yes/no or lettered multiple choice) and knows its answer, with LLaVA-1.5's
answer suffixes; and the stage-1 caption of a scene."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pipeline.multimodal.benchmarks import LETTER_ANSWER, SHORT_ANSWER
from pipeline.multimodal.eval_data import (
    ai2d_prompt,
    letters,
)
from pipeline.multimodal.toy_scenes import (
    NUMBER_WORDS,
    POSITIONS,
    Pool,
    Scene,
    article,
    present,
    side_of,
)


@dataclass(frozen=True)
class QA:
    """One question about a scene: its template, the question, the answer as trained (Yes / No,
    categories capitalised), its form (short | yesno | mc | free) and a multiple choice's options."""

    template: str
    question: str
    answer: str
    form: str
    options: tuple[str, ...] = ()

    def train_text(self) -> str:
        """The question as stage 2 asks it (the suffix LLaVA-1.5's data gives its form)."""
        if self.form == "mc":
            return ai2d_prompt(self.question, self.options, LETTER_ANSWER)
        return self.question + (SHORT_ANSWER if self.form in ("short", "yesno") else "")


def _yn(truth: bool) -> str:
    return "Yes" if truth else "No"


def _mc(rng: random.Random, template: str, question: str, answer: str, others: Sequence[str]) -> QA:
    options = [answer, *rng.sample(sorted(set(others) - {answer}), 3)]
    rng.shuffle(options)
    return QA(template, question, letters(4)[options.index(answer)], "mc", tuple(options))


def _truth(rng: random.Random, truth: bool | None) -> bool:
    return rng.random() < 0.5 if truth is None else truth


Gen = Callable[..., QA | None]


def q_emoji_what(s: Scene, rng: random.Random, pool: Pool, truth: bool | None = None) -> QA:
    name = s.cells[0].label
    return QA(
        "emoji_what", "What is shown in the image?", f"{article(name).capitalize()} {name} emoji.", "free"
    )


def q_emoji_category(s, rng, pool, truth=None) -> QA:
    return QA("emoji_category", "Which category does this emoji belong to?", s.cells[0].category, "short")


def q_emoji_category_mc(s, rng, pool, truth=None) -> QA:
    t = s.cells[0]
    return _mc(
        rng, "emoji_category_mc", "Which category does this emoji belong to?", t.category, pool.categories
    )


def q_emoji_colour(s, rng, pool, truth=None) -> QA | None:
    c = s.cells[0].colour
    return c and QA("emoji_colour", "What colour is this emoji?", c, "short")


def q_emoji_colour_mc(s, rng, pool, truth=None) -> QA | None:
    c = s.cells[0].colour
    return c and _mc(rng, "emoji_colour_mc", "What colour is this emoji?", c, pool.colours)


def q_emoji_colour_yn(s, rng, pool, truth=None) -> QA | None:
    c = s.cells[0].colour
    if not c:
        return None
    yes = _truth(rng, truth)
    asked = c if yes else rng.choice([x for x in pool.colours if x != c])
    return QA("emoji_colour_yn", f"Is this emoji mostly {asked}?", _yn(yes), "yesno")


def q_digit_what(s, rng, pool, truth=None) -> QA:
    return QA("digit_what", "What is shown in the image?", f"A handwritten digit {s.cells[0].label}.", "free")


def q_digit_read(s, rng, pool, truth=None) -> QA:
    return QA("digit_read", "Which digit is written in the image?", s.cells[0].label, "short")


def q_digit_mc(s, rng, pool, truth=None) -> QA:
    d = s.cells[0].label
    return _mc(rng, "digit_mc", "Which digit is written in the image?", d, [str(i) for i in range(10)])


def q_word_what(s, rng, pool, truth=None) -> QA:
    t = s.cells[0]
    return QA(
        "word_what", "What is shown in the image?", f'The word "{t.label}", written in {t.colour}.', "free"
    )


def q_word_read(s, rng, pool, truth=None) -> QA:
    return QA("word_read", "What word is written in the image?", s.cells[0].label, "short")


def q_word_colour(s, rng, pool, truth=None) -> QA:
    return QA("word_colour", "What colour is the text?", s.cells[0].colour, "short")


def q_word_yn(s, rng, pool, truth=None) -> QA:
    word = s.cells[0].label
    yes = _truth(rng, truth)
    if not yes:
        same = [t.label for t in pool.words if t.label != word and len(t.label) == len(word)]
        word = rng.choice(same or [t.label for t in pool.words if t.label != word])
    return QA("word_yn", f'Is the word in this image "{word}"?', _yn(yes), "yesno")


def q_object_yn(s, rng, pool, truth=None, negative: str | None = None) -> QA | None:
    here = present(s)
    if not here:
        return None
    yes = _truth(rng, truth)
    o = (
        rng.choice(sorted(here))
        if yes
        else negative or rng.choice([x for x in pool.objects if x not in here])
    )
    return QA("object_yn", f"Is there {article(o)} {o} in the image?", _yn(yes), "yesno")


def q_grid_what(s, rng, pool, truth=None) -> QA:
    return QA("grid_what", "What is in the image?", caption(s).capitalize() + ".", "free")


def q_count_all(s, rng, pool, truth=None) -> QA:
    return QA("count_all", "How many pictures are in the image?", str(len(s.tiles)), "short")


def q_count_mc(s, rng, pool, truth=None) -> QA:
    n = str(len(s.tiles))
    return QA(
        "count_mc", "How many pictures are in the image?", letters(4)[int(n) - 1], "mc", ("1", "2", "3", "4")
    )


def _kind_count(s: Scene, rng: random.Random) -> tuple[str, int] | None:
    counts = Counter(t.kind for t in s.tiles)
    kinds = sorted(k for k in ("digit", "emoji") if counts[k])
    if not kinds:
        return None
    k = rng.choice(kinds)
    return k, counts[k]


def _plural(kind: str, n: int) -> str:
    return kind if kind == "emoji" or n == 1 else kind + "s"


def q_count_kind(s, rng, pool, truth=None) -> QA | None:
    kc = _kind_count(s, rng)
    if kc is None:
        return None
    k, n = kc
    return QA("count_kind", f"How many {_plural(k, 2)} are in the image?", str(n), "short")


def q_count_kind_yn(s, rng, pool, truth=None) -> QA | None:
    kc = _kind_count(s, rng)
    if kc is None:
        return None
    k, n = kc
    yes = _truth(rng, truth)
    m = n if yes else rng.choice([x for x in NUMBER_WORDS if x != n and abs(x - n) <= 2])
    verb = "Is there" if m == 1 else "Are there"
    return QA("count_kind_yn", f"{verb} {NUMBER_WORDS[m]} {_plural(k, m)} in this image?", _yn(yes), "yesno")


def _cells_of(s: Scene, kind: str, need_colour: bool = False) -> list[int]:
    return [
        i for i, t in enumerate(s.cells) if t is not None and t.kind == kind and (t.colour or not need_colour)
    ]


def q_digit_at(s, rng, pool, truth=None) -> QA | None:
    cells = _cells_of(s, "digit")
    if not cells:
        return None
    i = rng.choice(cells)
    return QA("digit_at", f"Which digit is at the {POSITIONS[i]}?", s.cells[i].label, "short")


def q_category_at(s, rng, pool, truth=None) -> QA | None:
    cells = _cells_of(s, "emoji")
    if not cells:
        return None
    i = rng.choice(cells)
    q = f"Which category does the emoji at the {POSITIONS[i]} belong to?"
    return QA("category_at", q, s.cells[i].category, "short")


def q_colour_at(s, rng, pool, truth=None) -> QA | None:
    cells = _cells_of(s, "emoji", need_colour=True)
    if not cells:
        return None
    i = rng.choice(cells)
    return QA("colour_at", f"What colour is the emoji at the {POSITIONS[i]}?", s.cells[i].colour, "short")


def _one_sided(s: Scene) -> list[tuple[str, str]]:
    return sorted((o, side) for o in present(s) if (side := side_of(s, o)) is not None)


def q_side_choose(s, rng, pool, truth=None) -> QA | None:
    options = _one_sided(s)
    if not options:
        return None
    o, side = rng.choice(options)
    return QA("side_choose", f"Is the {o} on the left or on the right?", side, "short")


def q_side_yn(s, rng, pool, truth=None) -> QA | None:
    options = _one_sided(s)
    if not options:
        return None
    o, side = rng.choice(options)
    yes = _truth(rng, truth)
    asked = side if yes else {"left": "right", "right": "left"}[side]
    return QA("side_yn", f"Is the {o} on the {asked} side of this image?", _yn(yes), "yesno")


def _two_digits(s: Scene) -> tuple[int, int] | None:
    """The two digits of a scene whose only tiles are two digits side by side in one row."""
    cells = [i for i, t in enumerate(s.cells) if t is not None]
    if len(cells) != 2 or len(s.cells) != 4 or any(s.cells[i].kind != "digit" for i in cells):
        return None
    a, b = cells
    if a // 2 != b // 2:
        return None
    return int(s.cells[a].label), int(s.cells[b].label)


def q_compare(s, rng, pool, truth=None) -> QA | None:
    pair = _two_digits(s)
    if pair is None:
        return None
    q = "Is the digit on the left larger than the digit on the right?"
    return QA("compare", q, _yn(pair[0] > pair[1]), "yesno")


def q_sum(s, rng, pool, truth=None) -> QA | None:
    pair = _two_digits(s)
    return None if pair is None else QA("sum", "What is the sum of the two digits?", str(sum(pair)), "short")


def q_sum_yn(s, rng, pool, truth=None) -> QA | None:
    pair = _two_digits(s)
    if pair is None:
        return None
    total = sum(pair)
    yes = _truth(rng, truth)
    asked = (
        total
        if yes
        else rng.choice([x for x in range(max(0, total - 3), min(18, total + 3) + 1) if x != total])
    )
    return QA("sum_yn", f"Is the sum of the two digits in this image {asked}?", _yn(yes), "yesno")


# the templates asked about each kind of scene in stage 2
TEMPLATES: dict[str, tuple[Gen, ...]] = {
    "emoji": (
        q_emoji_what,
        q_emoji_category,
        q_emoji_category_mc,
        q_emoji_colour,
        q_emoji_colour_mc,
        q_emoji_colour_yn,
        q_object_yn,
    ),
    "digit": (q_digit_what, q_digit_read, q_digit_mc, q_object_yn),
    "word": (q_word_what, q_word_read, q_word_yn, q_word_colour),
    "composite": (
        q_grid_what,
        q_count_all,
        q_count_mc,
        q_count_kind,
        q_count_kind_yn,
        q_digit_at,
        q_category_at,
        q_colour_at,
        q_object_yn,
        q_side_choose,
        q_side_yn,
        q_compare,
        q_sum,
        q_sum_yn,
    ),
}


def caption(s: Scene) -> str:
    """A stage-1 caption of the scene (lower case, no final period)."""
    if s.single:
        t = s.cells[0]
        if t.kind == "emoji":
            return f"{article(t.label)} {t.label} emoji, in the {t.category.lower()} category"
        if t.kind == "digit":
            return f"a handwritten digit {t.label}"
        return f'the word "{t.label}" written in {t.colour} letters'
    parts = [f"{caption(Scene((t,)))} at the {POSITIONS[i]}" for i, t in enumerate(s.cells) if t is not None]
    listed = ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"a grid of {NUMBER_WORDS[len(parts)]} pictures: {listed}"
