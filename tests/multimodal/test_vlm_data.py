"""A study's LLaVA data (pipeline/multimodal/vlm_data.py): the cluster path reads LLaVA's JSON files
with an image folder and the lmms-lab parquet sets, checked once by rule vlm_data (here: the toy
corpus written out in those formats); the held-out conversations are fixed by their ids."""

from __future__ import annotations

import json

import pytest

from pipeline.multimodal.config import LocalData, ToyDataConfig, VlmConfig
from pipeline.multimodal.images import ImageDir, ImageError, ImageStore
from pipeline.multimodal.vlm_data import read_vlm_data, split_stage2, write_local_data, write_toy_data

TOY = ToyDataConfig(
    stage1_captions=60,
    stage2_conversations=120,
    stage2_text_only=10,
    max_turns=1,
    eval_items={"mme": 6, "gqa": 4, "ai2d": 4, "pope": 2, "textvqa": 4},
)


@pytest.fixture(scope="module")
def local_layout(tmp_path_factory):
    """The toy corpus as a cluster has LLaVA's data: images as files under an image folder named by
    relative paths in the JSON files, the benchmark sets as their parquet files."""
    root = tmp_path_factory.mktemp("local")
    toy = write_toy_data(TOY, root / "toy")
    store = ImageStore.read(toy["images"]["store"])
    images = root / "images"
    paths = {}
    for key in store.ids():
        rel = f"toy/{key[:2]}/{key}.png"
        (images / rel).parent.mkdir(parents=True, exist_ok=True)
        (images / rel).write_bytes(store.png(key))
        paths[key] = rel
    for stage in ("stage1", "stage2"):
        records = json.loads((root / "toy" / f"{stage}.json").read_text())
        for r in records:
            if "image" in r:
                r["image"] = paths[r["image"]]
        (root / f"{stage}.json").write_text(json.dumps(records))
    local = LocalData(str(root / "stage1.json"), str(root / "stage2.json"), str(images), toy["eval"])
    return root, local


def test_the_cluster_path_reads_llavas_files_with_an_image_folder(local_layout):
    root, local = local_layout
    record = write_local_data(local, VlmConfig(), root / "vlm")
    assert record["source"] == "local" and record["counts"]["stage2"]["records"] == 130
    assert "all" in record["counts"]["stage1"]["skipped"]  # every image found
    data = read_vlm_data(root / "vlm" / "data.json", "stage2", VlmConfig(eval_max_items=3))
    assert isinstance(data.images, ImageDir) and len(data.records) == 130
    assert {len(items) for items in data.eval_sets.values()} == {3}
    with_image = next(r for r in data.records if r.image is not None)
    assert data.images.open(with_image.image, "t").size == (TOY.image_size, TOY.image_size)
    train, held = split_stage2(data.records)
    assert len(held) >= min(64, len(data.records) // 10) and not {r.id for r in train} & {r.id for r in held}
    assert {r.id for r in split_stage2(list(reversed(data.records)))[1]} == {r.id for r in held}  # by id


def test_a_missing_image_file_is_named_or_skipped_and_counted(local_layout, tmp_path):
    root, local = local_layout
    records = json.loads((root / "stage1.json").read_text())
    records[0]["image"] = "toy/zz/missing.png"
    broken = tmp_path / "stage1.json"
    broken.write_text(json.dumps(records))
    bad = LocalData(str(broken), local.stage2, local.image_dir, local.eval)
    with pytest.raises(ImageError, match="missing.png"):
        write_local_data(bad, VlmConfig(), tmp_path / "vlm")
    record = write_local_data(bad, VlmConfig(on_missing="skip"), tmp_path / "vlm")
    assert "skipped 1 of" in record["counts"]["stage1"]["skipped"]
    with pytest.raises(FileNotFoundError, match="multimodal.data.local.stage2"):
        write_local_data(
            LocalData(local.stage1, str(tmp_path / "nope.json"), local.image_dir, local.eval),
            VlmConfig(),
            tmp_path / "vlm2",
        )
