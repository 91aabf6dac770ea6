"""The offline toy corpus: deterministic, sized by its config, split by image content with no
evaluation tile trained on, its files in LLaVA's and lmms-lab's schemas, and its chance levels."""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from pathlib import Path

import pytest

from pipeline.data.task_loading import load_task
from pipeline.multimodal.chance import chance_levels
from pipeline.multimodal.config import ToyDataConfig
from pipeline.multimodal.eval_data import load_eval_set
from pipeline.multimodal.images import ImageStore
from pipeline.multimodal.llava_json import read_llava_json
from pipeline.multimodal.scoring import score
from pipeline.multimodal.toy_data import build_toy_corpus, toy_paths, write_toy_corpus
from pipeline.multimodal.toy_questions import caption, q_compare, q_count_kind_yn, q_side_choose, q_sum
from pipeline.multimodal.toy_scenes import Pool, Scene, load_tiles, obj, split_tiles

ROOT = Path(__file__).resolve().parents[2]
CFG = ToyDataConfig(
    stage1_captions=120,
    stage2_conversations=150,
    stage2_text_only=15,
    eval_items={"mme": 24, "gqa": 20, "ai2d": 20, "pope": 12, "textvqa": 10},
    package_dir=str(ROOT / "data" / "packages"),
)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    corpus = build_toy_corpus(CFG)
    out = tmp_path_factory.mktemp("toy")
    manifest = write_toy_corpus(corpus, out, CFG)
    return corpus, out, manifest


@pytest.fixture(scope="module")
def tiles():
    return {t.key: t for t in load_tiles(CFG.package_dir, CFG.word_lengths, 4 * CFG.image_size)}


def test_deterministic(toy):
    corpus, _, _ = toy
    again = build_toy_corpus(CFG)
    assert again.stage1 == corpus.stage1 and again.stage2 == corpus.stage2
    assert again.store.ids() == corpus.store.ids() and again.eval_rows == corpus.eval_rows
    other = build_toy_corpus(ToyDataConfig(**{**CFG.__dict__, "seed": 1}))
    assert other.store.ids() != corpus.store.ids()


def test_no_evaluation_tile_is_trained_on(toy, tiles):
    corpus, _, _ = toy
    split = split_tiles(list(tiles.values()), CFG.eval_fraction, CFG.seed)
    groups = {s: {t.group for t in split[s]} for s in split}
    assert not groups["train"] & groups["eval"]
    train_tiles = {k for i in corpus.store.ids() for k in corpus.image_tiles[i]}
    eval_tiles = {k for i in corpus.eval_images for k in corpus.image_tiles[i]}
    assert train_tiles and eval_tiles and not train_tiles & eval_tiles
    assert {tiles[k].group for k in eval_tiles} <= groups["eval"]
    assert {tiles[k].group for k in train_tiles} <= groups["train"]
    assert not corpus.eval_images & set(corpus.store.ids())
    # about eval_fraction of the groups are held out
    share = len(groups["eval"]) / (len(groups["eval"]) + len(groups["train"]))
    assert abs(share - CFG.eval_fraction) < 0.03


def test_files_in_llava_and_lmms_lab_schemas(toy):
    corpus, out, manifest = toy
    paths = toy_paths(out)
    store = ImageStore.read(paths["images"])
    stage1 = read_llava_json(paths["stage1"], store)  # every image resolves in the store
    stage2 = read_llava_json(paths["stage2"], store)
    assert len(stage1.records) == CFG.stage1_captions and stage1.missing.skipped == 0
    assert len(stage2.records) == CFG.stage2_conversations + CFG.stage2_text_only
    assert all(len(r.turns) == 2 and r.turns[0][1].startswith("<image>\n") for r in stage1.records)
    text_only = [r for r in stage2.records if r.image is None]
    mbpp = {
        m.content
        for it in load_task("mbpp", {"package_dir": CFG.package_dir}).splits["train"]
        for m in it.messages
    }
    assert len(text_only) == CFG.stage2_text_only and all(t in mbpp for r in text_only for _, t in r.turns)
    sizes = {
        name: len(load_eval_set(name, paths[name])) for name in ("mme", "gqa", "ai2d", "pope", "textvqa")
    }
    assert sizes == {"mme": 24, "gqa": 20, "ai2d": 20, "pope": 36, "textvqa": 10}  # POPE: 12 per split
    assert (
        manifest["eval_items"] == sizes and json.loads(paths["manifest"].read_text())["stage1_records"] == 120
    )
    assert {store.png(i) is not None for i in store.ids()} == {True}


def test_mme_pairs_one_true_one_false(toy):
    _, out, _ = toy
    items = load_eval_set("mme", toy_paths(out)["mme"])
    by_image: dict[str, list[str]] = {}
    for it in items:
        by_image.setdefault(it.fields["question_id"], []).append(it.answers[0])
    assert all(sorted(a) == ["No", "Yes"] for a in by_image.values())
    assert Counter(it.fields["category"] for it in items) == {
        s: 4 for s in ("existence", "count", "position", "color", "OCR", "numerical_calculation")
    }
    # perfect replies score the maximum: 200 per subtask
    perfect = score("mme", items, [it.answers[0] for it in items])
    assert perfect["mme_perception_score"] == 1000.0 and perfect["mme_cognition_score"] == 200.0


def test_pope_negatives_follow_popular_and_adversarial(toy, tiles):
    """POPE's sampling: per image as many no as yes questions; a popular negative is among the most
    frequent absent objects, an adversarial one among those co-occurring most with the image's own."""
    corpus, _, _ = toy
    rows = corpus.eval_rows["pope"]
    present = {i: {obj(tiles[k]) for k in corpus.image_tiles[i]} for i in {r["image_source"] for r in rows}}
    freq = Counter(o for objs in present.values() for o in objs)
    cooc = Counter((a, b) for objs in present.values() for a in objs for b in objs if a != b)
    objects = Pool(split_tiles(list(tiles.values()), CFG.eval_fraction, CFG.seed)["eval"]).objects
    asked: dict[tuple[str, str], set[str]] = {}
    for r in rows:
        o = re.fullmatch(r"Is there an? (.+) in the image\?", r["question"]).group(1)
        assert (o in present[r["image_source"]]) == (r["answer"] == "yes")
        if r["answer"] == "no":
            asked.setdefault((r["image_source"], r["category"]), set()).add(o)
    for (image, split), chosen in asked.items():
        absent = [a for a in objects if a not in present[image]]
        rank = {
            "popular": lambda a: freq[a],
            "adversarial": lambda a, image=image: sum(cooc[(p, a)] for p in present[image]),
            "random": None,
        }[split]
        if rank is not None:  # no absent object left out ranks above one chosen
            assert min(rank(a) for a in chosen) >= max(
                (rank(a) for a in absent if a not in chosen), default=0
            )
    per_split = Counter((r["category"], r["answer"]) for r in rows)
    assert per_split == {(s, a): 6 for s in ("adversarial", "popular", "random") for a in ("yes", "no")}


def test_chance_levels(toy):
    corpus, out, manifest = toy
    chance = manifest["chance"]
    uniform, majority = chance["uniform"], chance["majority"]
    assert uniform["mme"]["mme_perception_score"] == 75.0 * 5 and uniform["vlm_parts"]["mme"] == 37.5
    assert uniform["ai2d"]["ai2d_exact_match"] == 0.25  # four options each
    assert uniform["pope"]["pope_f1_mean"] == pytest.approx(0.5)  # balanced: precision 1/2, recall 1/2
    assert majority["pope"]["pope_f1_mean"] == pytest.approx(2 / 3)  # always yes: precision 1/2, recall 1
    assert majority["mme"]["mme_score/existence"] == 50.0  # always yes: acc 50, acc+ 0
    assert uniform["textvqa"]["textvqa_exact_match"] < 0.2
    parts = chance["best"]["vlm_parts"]
    assert parts["pope"] == pytest.approx(200 / 3) and chance["best"]["vlm_score"] == pytest.approx(
        sum(parts.values()) / 5
    )
    # GQA: one over the answers each template admits (hand-count them)
    items = load_eval_set("gqa", toy_paths(out)["gqa"])
    admits: dict[str, set] = {}
    for it, t in zip(items, corpus.templates["gqa"]):
        admits.setdefault(t, set()).add(it.answers[0])
    expected = sum(1 / len(admits[t]) for t in corpus.templates["gqa"]) / len(items)
    assert uniform["gqa"]["gqa_exact_match"] == pytest.approx(expected)
    assert json.loads(toy_paths(out)["chance"].read_text())["best"]["vlm_score"] == pytest.approx(
        chance["best"]["vlm_score"]
    )


def test_textvqa_uniform_chance_is_one_over_the_vocabulary(toy):
    _, out, _ = toy
    items = load_eval_set("textvqa", toy_paths(out)["textvqa"])
    vocab = {it.answers[0] for it in items}  # ten equal references each
    assert chance_levels({"textvqa": items})["uniform"]["textvqa"]["textvqa_exact_match"] == pytest.approx(
        1 / len(vocab)
    )


def test_questions_answer_what_the_image_shows(tiles):
    digits = {t.label: t for t in tiles.values() if t.kind == "digit"}
    pool = Pool(list(tiles.values()))
    two = Scene((digits["7"], digits["5"], None, None))
    rng = random.Random(0)
    assert q_sum(two, rng, pool).answer == "12"
    assert q_compare(two, rng, pool).answer == "Yes"
    assert q_side_choose(Scene((None, digits["3"], None, None)), rng, pool).answer == "right"
    yes = q_count_kind_yn(two, rng, pool, truth=True)
    assert yes.question == "Are there two digits in this image?" and yes.answer == "Yes"
    no = q_count_kind_yn(two, rng, pool, truth=False)
    assert no.answer == "No" and "two" not in no.question
    apple = tiles["emoji/1f34e"]
    assert caption(Scene((apple,))) == "a red apple emoji, in the food & drink category"
    assert caption(two) == (
        "a grid of two pictures: a handwritten digit 7 at the top left"
        " and a handwritten digit 5 at the top right"
    )
