"""The offline toy corpus of the multimodal setting: LLaVA's two training stages and toy analogues of
its five benchmarks, from the real images of pinned packages (pipeline/multimodal/toy_sources.py).

What it builds (docs/multimodal-data.md has examples):

- stage 1, LLaVA's `plain` captions: a human turn "<image>\\n" + one of LLaVA's brief-description
  instructions (the `plain` template keeps only the image) and a caption ("a red apple emoji, in the
  food & drink category", "a handwritten digit 7", a composite's cells one by one);
- stage 2, LLaVA-1.5-style instructions, 1 to `max_turns` questions about one image, from templates:
  what is this, which category / digit / word, colour, yes-no presence, counting and left-right
  position on composites (2x2 grids of 2-4 tiles), sums, lettered multiple choice; short answers
  carry LLaVA-1.5's suffixes ("Answer the question using a single word or phrase.", "Answer with
  the option's letter from the given choices directly."), as its VQA and multiple-choice data do;
  plus a text-only slice, MBPP's train split (pipeline.data's `mbpp` task), as LLaVA mixes ShareGPT;
- the five benchmarks' analogues in the published lmms-lab schemas (pipeline/multimodal/eval_data.py
  reads them like the real ones): MME (two yes/no questions per image, one true and one false, over
  existence / count / position / color / OCR and the cognition subtask numerical_calculation), GQA
  (short answers on composites), AI2D (lettered multiple choice), POPE (object presence on
  composites, the negatives sampled at random, among the most frequent objects, and among those
  that co-occur most with the image's own: POPE's random / popular / adversarial) and TextVQA
  (rendered words, 10 references);
- the chance levels of each benchmark and of the VLM score (pipeline/multimodal/chance.py).

Splits. The unit is a tile group (an emoji with its skin-tone variants, one MNIST digit, a word's
renderings), assigned to evaluation when the sha256 of its first tile's pixels, salted with the
seed, falls under `eval_fraction`. Training images (singles and composites) use training tiles only,
evaluation images evaluation tiles only: no evaluation image, nor any tile of an evaluation
composite, is ever trained on. Evaluation therefore asks what generalises from training tiles to
unseen ones (an emoji's category and colour, a digit, a count, a position, a word's letters); an
emoji's name is asked in training only. Everything is deterministic given the config.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.data.task_loading import load_task
from pipeline.io import write_json
from pipeline.multimodal.benchmarks import MME_REPLACED
from pipeline.multimodal.chance import chance_levels
from pipeline.multimodal.config import TOY_FILES, ToyDataConfig, ToyDataError
from pipeline.multimodal.eval_data import (
    image_value,
    letters,
    load_eval_set,
    write_published,
)
from pipeline.multimodal.images import ImageStore, image_id, png_bytes
from pipeline.multimodal.llava_json import IMAGE_TOKEN, LlavaRecord, write_llava_json
from pipeline.multimodal.toy_questions import (
    TEMPLATES,
    Gen,
    caption,
    q_category_at,
    q_colour_at,
    q_compare,
    q_count_kind,
    q_count_kind_yn,
    q_count_mc,
    q_digit_at,
    q_digit_mc,
    q_emoji_category_mc,
    q_emoji_colour_mc,
    q_emoji_colour_yn,
    q_object_yn,
    q_side_choose,
    q_side_yn,
    q_sum_yn,
    q_word_yn,
)
from pipeline.multimodal.toy_scenes import (
    SPLITS,
    Pool,
    Scene,
    article,
    load_tiles,
    present,
    render,
    split_tiles,
)

# LLaVA's instructions for brief image description (Liu et al. 2023, "Visual Instruction Tuning",
# arXiv 2304.08485, appendix), the human turns of its caption data
BRIEF_INSTRUCTIONS = (
    "Describe the image concisely.",
    "Provide a brief description of the given image.",
    "Offer a succinct explanation of the picture presented.",
    "Summarize the visual content of the image.",
    "Give a short and clear explanation of the subsequent image.",
    "Share a concise interpretation of the image provided.",
    "Present a compact description of the photo's key features.",
    "Relay a brief, clear account of the picture shown.",
    "Render a clear and concise summary of the photo.",
    "Write a terse but informative summary of the picture.",
    "Create a compact narrative representing the image presented.",
)
MME_SUBTASKS = ("existence", "count", "position", "color", "OCR", "numerical_calculation")


@dataclass
class ToyCorpus:
    """What `build_toy_corpus` makes, before it is written."""

    store: ImageStore  # the training images
    stage1: list[LlavaRecord]
    stage2: list[LlavaRecord]
    eval_rows: dict[str, list[dict[str, Any]]]  # published kind (TOY_FILES key) -> rows
    templates: dict[str, list[str]]  # benchmark -> each item's template, in row order
    image_tiles: dict[str, tuple[str, ...]] = field(default_factory=dict)  # image id -> its tiles' keys
    eval_images: set[str] = field(default_factory=set)  # ids of the evaluation images
    manifest: dict[str, Any] = field(default_factory=dict)


class _Images:
    """Rendered images by id, with the tiles each shows."""

    def __init__(self, size: int, corpus: ToyCorpus) -> None:
        self.size, self.corpus = size, corpus

    def train(self, s: Scene) -> str:
        key = self.corpus.store.add(render(s, self.size), f"toy/{s.kind()}")
        self.corpus.image_tiles[key] = tuple(t.key for t in s.tiles)
        return key

    def eval(self, s: Scene) -> tuple[str, bytes]:
        png = png_bytes(render(s, self.size))
        key = image_id(png)
        self.corpus.image_tiles[key] = tuple(t.key for t in s.tiles)
        self.corpus.eval_images.add(key)
        return key, png


def _scene(pool: Pool, rng: random.Random, cfg: ToyDataConfig, weights: Sequence[float]) -> Scene:
    kind = rng.choices(("emoji", "digit", "word", "composite"), weights)[0]
    if kind != "composite":
        return pool.single(rng, kind)
    return pool.two_digits(rng) if rng.random() < 0.15 else pool.composite(rng, *cfg.composite_tiles)


def _stage1(cfg: ToyDataConfig, pool: Pool, images: _Images) -> list[LlavaRecord]:
    rng = random.Random(f"{cfg.seed}/stage1")
    out = []
    for i in range(cfg.stage1_captions):
        s = _scene(pool, rng, cfg, (0.35, 0.3, 0.1, 0.25))
        human = f"{IMAGE_TOKEN}\n{rng.choice(BRIEF_INSTRUCTIONS)}"
        out.append(
            LlavaRecord(f"toy-s1-{i:06d}", images.train(s), (("user", human), ("assistant", caption(s))))
        )
    return out


def _stage2(cfg: ToyDataConfig, pool: Pool, images: _Images) -> tuple[list[LlavaRecord], int]:
    rng = random.Random(f"{cfg.seed}/stage2")
    out = []
    for i in range(cfg.stage2_conversations):
        while True:
            s = _scene(pool, rng, cfg, (0.3, 0.2, 0.15, 0.35))
            gens = list(TEMPLATES[s.kind()])
            rng.shuffle(gens)
            qas = [qa for g in gens if (qa := g(s, rng, pool)) is not None][: rng.randint(1, cfg.max_turns)]
            if qas:
                break
        turns: list[tuple[str, str]] = []
        for j, qa in enumerate(qas):
            turns += [
                ("user", (f"{IMAGE_TOKEN}\n" if j == 0 else "") + qa.train_text()),
                ("assistant", qa.answer),
            ]
        out.append(LlavaRecord(f"toy-s2-{i:06d}", images.train(s), tuple(turns)))
    texts = load_task("mbpp", {"package_dir": cfg.package_dir}).splits["train"][: cfg.stage2_text_only]
    for i, item in enumerate(texts):
        out.append(LlavaRecord(f"toy-text-{i:06d}", None, tuple((m.role, m.content) for m in item.messages)))
    rng.shuffle(out)  # LLaVA's mix is shuffled
    return out, len(texts)


def _spread(total: int, parts: int) -> list[int]:
    return [total // parts + (i < total % parts) for i in range(parts)]


def _mme(cfg: ToyDataConfig, pool: Pool, images: _Images, rng: random.Random) -> tuple[list[dict], list[str]]:
    makers: dict[str, tuple[Callable[[], Scene], Gen]] = {
        "existence": (lambda: pool.composite(rng, *cfg.composite_tiles), q_object_yn),
        "count": (lambda: pool.composite(rng, *cfg.composite_tiles), q_count_kind_yn),
        "position": (lambda: pool.composite(rng, *cfg.composite_tiles), q_side_yn),
        "color": (lambda: pool.single(rng, "emoji"), q_emoji_colour_yn),
        "OCR": (lambda: pool.single(rng, "word"), q_word_yn),
        "numerical_calculation": (lambda: pool.two_digits(rng), q_sum_yn),
    }
    rows, templates, seen = [], [], set()
    for subtask, n_images in zip(MME_SUBTASKS, _spread(cfg.items("mme") // 2, len(MME_SUBTASKS))):
        make, gen = makers[subtask]
        done = 0
        while done < n_images:
            s = make()
            pair = [gen(s, rng, pool, truth=True), gen(s, rng, pool, truth=False)]
            if pair[0] is None or pair[1] is None:
                continue
            key, png = images.eval(s)
            if (subtask, key) in seen:  # MME pairs two questions per image: a drawn image repeats (a word)
                continue
            seen.add((subtask, key))
            for qa in rng.sample(pair, 2):
                rows.append(
                    {
                        "question_id": f"{subtask}/{key}.png",
                        "image": image_value(png, f"{key}.png"),
                        "question": qa.question + MME_REPLACED,
                        "answer": qa.answer,
                        "category": subtask,
                    }
                )
                templates.append(subtask)
            done += 1
    return rows, templates


GQA_TEMPLATES = (q_digit_at, q_category_at, q_colour_at, q_count_kind, q_object_yn, q_side_choose, q_compare)
GQA_TYPES = {  # template -> GQA's (structural, semantic) question types
    "digit_at": ("query", "obj"),
    "category_at": ("query", "attr"),
    "colour_at": ("query", "attr"),
    "count_kind": ("query", "obj"),
    "object_yn": ("verify", "obj"),
    "side_choose": ("choose", "rel"),
    "compare": ("compare", "attr"),
}


def _gqa(cfg, pool: Pool, images: _Images, rng: random.Random) -> tuple[list[dict], list[dict], list[str]]:
    rows, image_rows, templates = [], [], []
    while len(rows) < cfg.items("gqa"):
        s = pool.two_digits(rng) if rng.random() < 0.15 else pool.composite(rng, *cfg.composite_tiles)
        gens = list(GQA_TEMPLATES)
        rng.shuffle(gens)
        qas = [qa for g in gens if (qa := g(s, rng, pool)) is not None][:2]
        qas = qas[: cfg.items("gqa") - len(rows)]
        if not qas:
            continue
        key, png = images.eval(s)
        image_rows.append({"id": key, "image": image_value(png, f"{key}.png")})
        for qa in qas:
            answer = qa.answer.lower()
            structural, semantic = GQA_TYPES[qa.template]
            rows.append(
                {
                    "id": f"{len(rows):08d}",
                    "imageId": key,
                    "question": qa.question,
                    "answer": answer,
                    "fullAnswer": f"The answer is {answer}.",
                    "isBalanced": True,
                    "types": {"structural": structural, "semantic": semantic, "detailed": qa.template},
                }
            )
            templates.append(qa.template)
    return rows, image_rows, templates


def _ai2d(cfg, pool: Pool, images: _Images, rng: random.Random) -> tuple[list[dict], list[str]]:
    makers = (
        (lambda: pool.single(rng, "emoji"), q_emoji_category_mc),
        (lambda: pool.single(rng, "emoji"), q_emoji_colour_mc),
        (lambda: pool.single(rng, "digit"), q_digit_mc),
        (lambda: pool.composite(rng, *cfg.composite_tiles), q_count_mc),
    )
    rows, templates = [], []
    while len(rows) < cfg.items("ai2d"):
        make, gen = makers[len(rows) % len(makers)]
        s = make()
        qa = gen(s, rng, pool)
        if qa is None:
            continue
        key, png = images.eval(s)
        answer = str(letters(len(qa.options)).index(qa.answer))
        row = {"question": qa.question, "options": list(qa.options), "answer": answer}
        rows.append(row | {"image": image_value(png, f"{key}.png")})
        templates.append(qa.template)
    return rows, templates


def _pope(cfg, pool: Pool, images: _Images, rng: random.Random) -> tuple[list[dict], list[str]]:
    """POPE's construction on composites: per image k = min(3, objects present) yes questions and k
    no questions per split, negatives: random (uniform among absent objects), popular (the most
    frequent objects over these images), adversarial (those co-occurring most with the image's own)."""
    target = cfg.items("pope")
    scenes: list[tuple[Scene, list[str]]] = []
    total = 0
    while total < target:
        s = pool.composite(rng, *cfg.composite_tiles)
        here = sorted(present(s))
        k = min(3, len(here), (target - total) // 2)
        if k == 0:
            break
        scenes.append((s, rng.sample(here, k)))
        total += 2 * k
    freq = Counter(o for s, _ in scenes for o in present(s))
    cooc = Counter((a, b) for s, _ in scenes for a in present(s) for b in present(s) if a != b)
    rows, templates = [], []
    rendered = [images.eval(s) for s, _ in scenes]
    for split in ("adversarial", "popular", "random"):
        split_rng = random.Random(f"{cfg.seed}/pope/{split}")
        n_split = 0
        for (s, yes), (key, png) in zip(scenes, rendered):
            here = present(s)
            absent = [o for o in pool.objects if o not in here]
            tie = {o: split_rng.random() for o in absent}
            if split == "random":
                no = split_rng.sample(absent, len(yes))
            elif split == "popular":
                no = sorted(absent, key=lambda o: (-freq[o], tie[o]))[: len(yes)]
            else:
                no = sorted(absent, key=lambda o: (-sum(cooc[(p, o)] for p in here), -freq[o], tie[o]))[
                    : len(yes)
                ]
            for o, answer in [(o, "yes") for o in yes] + [(o, "no") for o in no]:
                n_split += 1
                rows.append(
                    {
                        "id": str(len(rows)),
                        "question_id": str(n_split),
                        "question": f"Is there {article(o)} {o} in the image?",
                        "answer": answer,
                        "image_source": key,
                        "image": image_value(png, f"{key}.png"),
                        "category": split,
                    }
                )
                templates.append(split)
    return rows, templates


TEXTVQA_QUESTION = "what word is written in the image?"  # TextVQA's are lower case; lmms-eval capitalises


def _textvqa(cfg, pool: Pool, images: _Images, rng: random.Random) -> tuple[list[dict], list[str]]:
    rows, templates = [], []
    words = list(pool.words)
    rng.shuffle(words)
    for i in range(cfg.items("textvqa")):
        tile = words[i % len(words)]
        question = TEXTVQA_QUESTION
        key, png = images.eval(Scene((tile,)))
        rows.append(
            {
                "image_id": key,
                "question_id": i,
                "question": question,
                "question_tokens": question.rstrip("?").split() + ["?"],
                "image": image_value(png, f"{key}.png"),
                "image_width": cfg.image_size,
                "image_height": cfg.image_size,
                "flickr_original_url": "",
                "flickr_300k_url": "",
                # ten references, as TextVQA's annotators give; the toy's agree (the drawn word)
                "answers": [tile.label] * 10,
                "image_classes": [],
                "set_name": "val",
                "ocr_tokens": [],  # no OCR system offline: lmms-eval's `ocr: true` would see none
            }
        )
        templates.append(question)
    return rows, templates


def build_toy_corpus(cfg: ToyDataConfig) -> ToyCorpus:
    """The toy corpus in memory (deterministic given `cfg`)."""
    tiles = load_tiles(cfg.package_dir, tuple(cfg.word_lengths), 4 * cfg.image_size)
    split = split_tiles(tiles, cfg.eval_fraction, cfg.seed)
    train, evaluate = Pool(split["train"]), Pool(split["eval"])
    corpus = ToyCorpus(ImageStore(), [], [], {}, {})
    train_images = _Images(cfg.image_size, corpus)
    corpus.stage1 = _stage1(cfg, train, train_images)
    corpus.stage2, n_text = _stage2(cfg, train, train_images)
    rng = random.Random(f"{cfg.seed}/eval")
    ev = _Images(cfg.image_size, corpus)
    corpus.eval_rows["mme"], corpus.templates["mme"] = _mme(cfg, evaluate, ev, rng)
    corpus.eval_rows["gqa"], corpus.eval_rows["gqa_images"], corpus.templates["gqa"] = _gqa(
        cfg, evaluate, ev, rng
    )
    corpus.eval_rows["ai2d"], corpus.templates["ai2d"] = _ai2d(cfg, evaluate, ev, rng)
    corpus.eval_rows["pope"], corpus.templates["pope"] = _pope(cfg, evaluate, ev, rng)
    corpus.eval_rows["textvqa"], corpus.templates["textvqa"] = _textvqa(cfg, evaluate, ev, rng)
    leaked = corpus.eval_images & set(corpus.store.ids())
    if leaked:  # cannot happen: the splits share no tile
        raise ToyDataError(f"evaluation images in the training store: {sorted(leaked)[:5]}")
    corpus.manifest = {
        "tiles": {s: dict(sorted(Counter(t.kind for t in split[s]).items())) for s in SPLITS},
        "tile_groups": {s: len({t.group for t in split[s]}) for s in SPLITS},
        "training_images": len(corpus.store),
        "stage1_records": len(corpus.stage1),
        "stage2_records": len(corpus.stage2),
        "stage2_text_only": n_text,
        "eval_images": len(corpus.eval_images),
        "eval_items": {k: len(v) for k, v in corpus.eval_rows.items() if k != "gqa_images"},
    }
    return corpus


def toy_paths(out_dir: str | Path) -> dict[str, Path]:
    """Where `write_toy_corpus` puts each file (TOY_FILES under `out_dir`)."""
    return {k: Path(out_dir) / v for k, v in TOY_FILES.items()}


def write_toy_corpus(corpus: ToyCorpus, out_dir: str | Path, cfg: ToyDataConfig) -> dict[str, Any]:
    """Write the corpus under `out_dir` (TOY_FILES), read the five sets back with the benchmarks' own
    reader, compute their chance levels, and write chance.json and manifest.json. Returns the manifest
    (with the chance levels under "chance")."""
    paths = toy_paths(out_dir)
    corpus.store.write(paths["images"])
    write_llava_json(paths["stage1"], corpus.stage1)
    write_llava_json(paths["stage2"], corpus.stage2)
    for kind, rows in corpus.eval_rows.items():
        write_published(kind, rows, paths[kind])
    sets = {name: load_eval_set(name, paths[name]) for name in ("mme", "gqa", "ai2d", "pope", "textvqa")}
    chance = chance_levels(sets, corpus.templates)
    write_json(paths["chance"], chance)
    manifest = {**corpus.manifest, "config": cfg.__dict__ | {"eval_items": dict(cfg.eval_items)}}
    write_json(paths["manifest"], manifest)
    return manifest | {"chance": chance}


def make_toy_corpus(cfg: ToyDataConfig, out_dir: str | Path) -> dict[str, Any]:
    """Build and write the toy corpus (the job of a data rule); returns the manifest with chance levels."""
    return write_toy_corpus(build_toy_corpus(cfg), out_dir, cfg)
