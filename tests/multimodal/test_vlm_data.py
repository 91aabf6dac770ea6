"""A study's LLaVA data (pipeline/multimodal/vlm_data.py): the cluster path reads LLaVA's JSON files
with an image folder and the lmms-lab parquet sets, checked once by rule vlm_data (here: the toy
corpus written out in those formats); the held-out conversations are fixed by their ids."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from pipeline.multimodal.benchmarks import BENCHMARKS
from pipeline.multimodal.config import LocalData, ToyDataConfig, VlmConfig
from pipeline.multimodal.images import ImageDir, ImageError, ImageStore
from pipeline.multimodal.vlm_data import read_vlm_data, split_stage2, write_local_data, write_toy_data
from pipeline.workflow.multimodal import check_local_data

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


def dataset_cache(cache: Path, repo: str, files: dict[str, Path]) -> None:
    """Lay `files` (path in the repository -> local file) out as a dataset repository of the hub
    cache: refs/main -> snapshots/<commit>/<path>, what `hf download` leaves."""
    commit = hashlib.sha1(repo.encode()).hexdigest()
    folder = cache / ("datasets--" + repo.replace("/", "--"))
    for rel, src in files.items():
        dest = folder / "snapshots" / commit / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / "main").write_text(commit)


def test_the_data_named_on_the_hub_is_read_from_its_cache_offline(local_layout, tmp_path, monkeypatch):
    """LLaVA's JSON files as hf://datasets/... and each benchmark as `hub` (its lmms-lab dataset, in
    the published layout: data/<split>-*.parquet, GQA's config folders), offline from a hub cache in
    huggingface_hub's format: the same record as the local files give. What is not cached is named at
    start-up with the command that downloads it."""
    root, local = local_layout
    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    dataset_cache(cache, "liuhaotian/LLaVA-Pretrain", {"blip_laion_cc_sbu_558k.json": root / "stage1.json"})
    dataset_cache(cache, "liuhaotian/LLaVA-Instruct-150K", {"llava_v1_5_mix665k.json": root / "stage2.json"})
    for name, path in local.eval.items():  # the toy's sets: a parquet file each
        b = BENCHMARKS[name]
        if b.hub_name:  # GQA: the questions' and the images' config folders
            top = Path(path).parents[1]
            configs = (b.hub_name, b.images_name)
            files = {f"{c}/{b.split}-00000-of-00001.parquet": top / c / f"{b.split}.parquet" for c in configs}
        else:
            files = {f"data/{b.split}-00000-of-00001.parquet": Path(path)}
        dataset_cache(cache, b.hub_path, files)
    hub = LocalData(
        "hf://datasets/liuhaotian/LLaVA-Pretrain/blip_laion_cc_sbu_558k.json",
        "hf://datasets/liuhaotian/LLaVA-Instruct-150K@main/llava_v1_5_mix665k.json",
        local.image_dir,
        {name: "hub" for name in local.eval},
    )
    check_local_data(hub)  # all cached: start-up passes offline
    record = write_local_data(hub, VlmConfig(), tmp_path / "vlm")
    assert record["counts"] == write_local_data(local, VlmConfig(), tmp_path / "vlm-local")["counts"]
    assert record["stage1"].startswith(str(cache)) and record["eval"]["gqa"].startswith(str(cache))
    missing = dataclasses.replace(hub, stage2="hf://datasets/liuhaotian/LLaVA-Instruct-150K/nope.json")
    with pytest.raises(
        ValueError, match=r"multimodal.data.local.stage2: .* not in the hub cache \(offline\).*hf download"
    ):
        check_local_data(missing)
