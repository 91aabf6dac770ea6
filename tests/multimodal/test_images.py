"""The image store, image folders, the up-front image check and LLaVA's pad-to-square."""

from __future__ import annotations

import hashlib

import pytest
from PIL import Image

from pipeline.multimodal.images import (
    ImageDir,
    ImageError,
    ImageStore,
    check_images,
    check_keys,
    image_id,
    load_image,
    mean_fill,
    pad_to_square,
    png_bytes,
)


def test_store_ids_are_content_hashes_and_survive_a_round_trip(tmp_path):
    store = ImageStore()
    red = Image.new("RGB", (4, 3), (255, 0, 0))
    key = store.add(red, "test/red")
    assert key == hashlib.sha256(png_bytes(red)).hexdigest()[:16] == image_id(store.png(key))
    assert store.add(red.copy(), "test/again") == key and len(store) == 1  # equal pixels: one row
    store.add(Image.new("RGB", (2, 2), (0, 0, 255)), "test/blue")
    store.write(tmp_path / "images.parquet")
    back = ImageStore.read(tmp_path / "images.parquet")
    assert back.ids() == store.ids() and back.source(key) == "test/red"
    img = load_image(key, back)
    assert img.mode == "RGB" and img.size == (4, 3) and img.getpixel((0, 0)) == (255, 0, 0)


def test_missing_and_unreadable_images_name_the_file_and_record(tmp_path):
    (tmp_path / "ok.png").write_bytes(png_bytes(Image.new("RGB", (2, 2))))
    (tmp_path / "broken.jpg").write_bytes(b"not an image")
    folder = ImageDir(tmp_path)
    assert load_image("ok.png", folder).size == (2, 2)
    with pytest.raises(ImageError, match=r"record 7: image file .*gone\.jpg does not exist"):
        load_image("gone.jpg", folder, "record 7")
    with pytest.raises(ImageError, match=r"record 8: image file .*broken\.jpg: unreadable image"):
        load_image("broken.jpg", folder, "record 8")
    with pytest.raises(ImageError, match="image 'abc' of the image store .* does not exist"):
        load_image("abc", ImageStore(), "record 9")
    with pytest.raises(ImageError, match="image store .*nope.parquet is missing"):
        ImageStore.read(tmp_path / "nope.parquet")


def test_check_images_errors_or_skips_and_counts(tmp_path):
    (tmp_path / "a.png").write_bytes(png_bytes(Image.new("RGB", (2, 2))))
    (tmp_path / "bad.png").write_bytes(b"\x89PNG broken")
    records = [("r1", "a.png"), ("r2", "gone.png"), ("r3", None), ("r4", "bad.png"), ("r5", "gone2.png")]

    def run(on_missing):
        return check_images(
            records,
            ImageDir(tmp_path),
            key=lambda r: r[1],
            name=lambda r: f"x.json: record {r[0]}",
            on_missing=on_missing,
        )

    with pytest.raises(
        ImageError,
        match=r"3 of 4 records .*2 missing, 1 unreadable.*record r2: image file .*gone.png \(missing\)",
    ):
        run("error")
    kept, report = run("skip")
    assert [r[0] for r in kept] == ["r1", "r3"]  # a record without an image is kept unchecked
    assert (report.checked, report.missing, report.unreadable, report.skipped) == (4, 2, 1, 3)
    assert report.first[0].startswith("x.json: record r2") and "bad.png (unreadable)" in report.first[1]
    assert "skipped 3 of 4" in report.summary()
    with pytest.raises(ImageError, match="on_missing must be one of"):
        run("ignore")
    kept, report = check_keys(["a.png"], ImageDir(tmp_path))
    assert kept == ["a.png"] and report.summary() == "all 1 images found"


def test_a_header_check_passes_a_truncated_file_that_deep_catches(tmp_path):
    data = png_bytes(Image.effect_noise((64, 64), 50).convert("RGB"))
    (tmp_path / "cut.png").write_bytes(data[: len(data) // 2])
    folder = ImageDir(tmp_path)
    assert folder.check("cut.png", deep=False) is None
    assert folder.check("cut.png", deep=True) == "unreadable"


def test_pad_to_square_as_llava_expand2square():
    fill = mean_fill((0.48145466, 0.4578275, 0.40821073))  # CLIP's image_mean
    assert fill == (122, 116, 104)
    wide = Image.new("RGB", (4, 2), (255, 0, 0))
    out = pad_to_square(wide, fill)
    assert out.size == (4, 4)
    # pasted at (0, (4 - 2) // 2): rows 1-2 are the image, rows 0 and 3 the fill
    assert [out.getpixel((0, y)) for y in range(4)] == [fill, (255, 0, 0), (255, 0, 0), fill]
    tall = Image.new("RGB", (1, 4), (0, 255, 0))
    out = pad_to_square(tall, fill)  # pasted at ((4 - 1) // 2, 0) = (1, 0)
    assert [out.getpixel((x, 0)) for x in range(4)] == [fill, (0, 255, 0), fill, fill]
    square = Image.new("RGB", (3, 3))
    assert pad_to_square(square, fill) is square
