"""The benchmarks' readers on small parquet files written here in the published lmms-lab schemas (as
the hub serves them: images as {"bytes", "path"} structs), and lmms-eval's prompts."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from pipeline.multimodal.benchmarks import VlmBenchmarkError
from pipeline.multimodal.eval_data import load_eval_set, write_published
from pipeline.multimodal.images import png_bytes

SHORT = "\nAnswer the question using a single word or phrase."
IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def png(colour=(255, 0, 0)) -> bytes:
    return png_bytes(Image.new("RGB", (4, 4), colour))


def hub_file(path, columns: dict[str, tuple[pa.DataType, list]]):
    """A parquet file as downloaded (no HF metadata needed): the given columns and types."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({k: pa.array(v, t) for k, (t, v) in columns.items()}), path)


def test_mme(tmp_path):
    hub_file(
        tmp_path / "MME" / "data" / "test-00000-of-00001.parquet",
        {
            "question_id": (pa.string(), ["code_reasoning/0020.png"] * 2),
            "image": (IMAGE, [{"bytes": png(), "path": "0020.png"}] * 2),
            "question": (
                pa.string(),
                [" Is a red square shown? Please answer yes or no.", "Is it blue? Please answer yes or no."],
            ),
            "answer": (pa.string(), ["Yes", "No"]),
            "category": (pa.string(), ["code_reasoning"] * 2),
        },
    )
    items = load_eval_set("mme", tmp_path / "MME")
    assert [i.answers for i in items] == [("Yes",), ("No",)]
    # mme_doc_to_text: stripped, " Please answer yes or no." replaced by the post_prompt
    assert items[0].prompt == "Is a red square shown?" + SHORT
    assert items[0].fields == {"category": "code_reasoning", "question_id": "code_reasoning/0020.png"}
    assert items[0].pil().getpixel((0, 0)) == (255, 0, 0)


def test_gqa_joins_the_images_config(tmp_path):
    root = tmp_path / "GQA"
    hub_file(
        root / "testdev_balanced_instructions" / "testdev-00000-of-00001.parquet",
        {
            "id": (pa.string(), ["201307251", "201640614"]),
            "imageId": (pa.string(), ["n161313", "n235859"]),
            "question": (pa.string(), ["Is it overcast?", "Who is wearing a dress? "]),
            "answer": (pa.string(), ["no", "woman"]),
            "fullAnswer": (pa.string(), ["No, it is clear.", "The woman is wearing a dress."]),
        },
    )
    hub_file(
        root / "testdev_balanced_images" / "testdev-00000-of-00001.parquet",
        {
            "id": (pa.string(), ["n161313", "n235859"]),
            "image": (IMAGE, [{"bytes": png(), "path": None}, {"bytes": png((0, 0, 255)), "path": None}]),
        },
    )
    for path in (root, root / "testdev_balanced_instructions"):
        items = load_eval_set("gqa", path)
        assert [i.id for i in items] == ["201307251", "201640614"]
        assert items[1].prompt == "Who is wearing a dress? " + SHORT  # gqa_doc_to_text does not strip
        assert items[1].pil().getpixel((1, 1)) == (0, 0, 255) and items[1].fields["imageId"] == "n235859"
    (root / "testdev_balanced_images" / "testdev-00000-of-00001.parquet").unlink()
    hub_file(
        root / "testdev_balanced_images" / "testdev-00000-of-00001.parquet",
        {"id": (pa.string(), ["n161313"]), "image": (IMAGE, [{"bytes": png(), "path": None}])},
    )
    with pytest.raises(VlmBenchmarkError, match="row 1: imageId 'n235859' is not in the GQA images"):
        load_eval_set("gqa", root)


def test_ai2d_options_and_letter(tmp_path):
    hub_file(
        tmp_path / "test.parquet",
        {
            "question": (pa.string(), ["Which stage comes after the egg?"]),
            "options": (pa.list_(pa.string()), [["pupa", "larva", "adult"]]),
            "answer": (pa.string(), ["1"]),
            "image": (IMAGE, [{"bytes": png(), "path": None}]),
        },
    )
    (item,) = load_eval_set("ai2d", tmp_path / "test.parquet")
    assert item.prompt == (
        "Which stage comes after the egg?\nA. pupa\nB. larva\nC. adult"
        "\nAnswer with the option's letter from the given choices directly."
    )
    assert item.answers == ("B",)


def test_pope_and_an_image_given_by_path(tmp_path):
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "COCO_val2014_000000310196.jpg").write_bytes(png())
    hub_file(
        tmp_path / "data" / "test-00000-of-00001.parquet",
        {
            "id": (pa.string(), ["0", "1"]),
            "question_id": (pa.string(), ["1", "2"]),
            "question": (
                pa.string(),
                ["Is there a snowboard in the image?", "Is there a dog in the image? "],
            ),
            "answer": (pa.string(), ["yes", "no"]),
            "image_source": (pa.string(), ["COCO_val2014_000000310196"] * 2),
            "image": (IMAGE, [{"bytes": None, "path": "COCO_val2014_000000310196.jpg"}] * 2),
            "category": (pa.string(), ["adversarial", "random"]),
        },
    )
    items = load_eval_set("pope", tmp_path, image_dir=tmp_path / "imgs")
    assert items[1].prompt == "Is there a dog in the image?" + SHORT  # pope_doc_to_text strips
    assert [i.fields["category"] for i in items] == ["adversarial", "random"] and items[0].pil().size == (
        4,
        4,
    )
    with pytest.raises(
        VlmBenchmarkError, match="row 0: image file .*COCO_val2014_000000310196.jpg does not exist"
    ):
        load_eval_set("pope", tmp_path, image_dir=tmp_path / "elsewhere")


def test_textvqa_capitalises_and_reads_ten_answers(tmp_path):
    cols = {
        "question_id": (pa.int32(), [34602]),
        "image_id": (pa.string(), ["003a8ae2ef43b901"]),
        "question": (pa.string(), ["what is the brand of this CAMERA?"]),
        "answers": (pa.list_(pa.string()), [["nous les gosses"] * 4 + ["dakota"] * 6]),
        "image": (IMAGE, [{"bytes": png(), "path": None}]),
    }
    hub_file(tmp_path / "data" / "validation-00000-of-00001.parquet", cols)
    hub_file(tmp_path / "data" / "train-00000-of-00001.parquet", cols | {"question_id": (pa.int32(), [1])})
    (item,) = load_eval_set("textvqa", tmp_path)  # the validation split only
    assert item.id == "34602" and len(item.answers) == 10
    assert item.prompt == "What is the brand of this camera?" + SHORT  # str.capitalize lowers the rest


def test_bad_files_are_named(tmp_path):
    hub_file(tmp_path / "test.parquet", {"question": (pa.string(), ["q"]), "answer": (pa.string(), ["Yes"])})
    with pytest.raises(
        VlmBenchmarkError,
        match=r"mme: .*test.parquet lacks columns \['question_id', 'image', 'category'\].*lmms-lab/MME",
    ):
        load_eval_set("mme", tmp_path / "test.parquet")
    with pytest.raises(VlmBenchmarkError, match="no validation\\*.parquet under"):
        load_eval_set("textvqa", tmp_path)
    with pytest.raises(VlmBenchmarkError, match="unknown VLM benchmark 'vqav2'"):
        load_eval_set("vqav2", tmp_path)
    hub_file(
        tmp_path / "mme.parquet",
        {
            "question_id": (pa.string(), ["a"]),
            "image": (IMAGE, [{"bytes": png(), "path": None}]),
            "question": (pa.string(), ["q"]),
            "answer": (pa.string(), ["maybe"]),
            "category": (pa.string(), ["OCR"]),
        },
    )
    with pytest.raises(VlmBenchmarkError, match="mme.parquet row 0: answer 'maybe' is not yes or no"):
        load_eval_set("mme", tmp_path / "mme.parquet")


def test_written_files_load_with_datasets_as_images(tmp_path, offline_datasets):
    """write_published keeps the HF features: `datasets` decodes the image column as PIL images."""
    rows = [
        {
            "question": "How many?",
            "options": ["1", "2", "3", "4"],
            "answer": "2",
            "image": {"bytes": png(), "path": "a.png"},
        }
    ]
    write_published("ai2d", rows, tmp_path / "test.parquet")
    ds = offline_datasets.load_dataset("parquet", data_files=str(tmp_path / "test.parquet"), split="train")
    assert isinstance(ds[0]["image"], Image.Image) and ds[0]["options"] == ["1", "2", "3", "4"]
    assert load_eval_set("ai2d", tmp_path / "test.parquet")[0].answers == ("C",)
