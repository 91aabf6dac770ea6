"""LLaVA's JSON schema (blip_laion_cc_sbu_558k.json, llava_v1_5_mix665k.json): reading, checks, writing."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from pipeline.multimodal.images import ImageDir, ImageError, png_bytes
from pipeline.multimodal.llava_json import (
    LlavaDataError,
    LlavaRecord,
    image_first,
    read_llava_json,
    write_llava_json,
)

CAPTION = {
    "id": "004539375",
    "image": "00453/004539375.jpg",
    "conversations": [
        {"from": "human", "value": "Render a clear and concise summary of the photo.\n<image>"},
        {"from": "gpt", "value": "select luxury furniture 3 - inch gel memory foam mattress topper"},
    ],
}
TEXT_ONLY = {
    "id": "i6IyJda_0",
    "conversations": [
        {
            "from": "human",
            "value": "How to tell if a customer segment is well segmented? In 3 bullet points.",
        },
        {"from": "gpt", "value": "1. Homogeneity 2. Distinctiveness 3. Stability"},
    ],
}


def write(tmp_path, records) -> str:
    path = tmp_path / "data.json"
    path.write_text(json.dumps(records))
    return str(path)


def test_reads_the_published_schema(tmp_path):
    data = read_llava_json(write(tmp_path, [CAPTION, TEXT_ONLY, {**TEXT_ONLY, "id": 7}]))
    assert [r.id for r in data.records] == ["004539375", "i6IyJda_0", "7"]
    rec = data.records[0]
    assert rec.image == "00453/004539375.jpg" and rec.has_image
    assert rec.turns[0] == ("user", "Render a clear and concise summary of the photo.\n<image>")
    assert rec.turns[1][0] == "assistant" and data.records[1].image is None
    # LLaVA's preprocess_multimodal: the placeholder first, then a newline
    assert image_first(rec.turns[0][1]) == "<image>\nRender a clear and concise summary of the photo."
    assert image_first("no image here") == "no image here"


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (
            {
                **CAPTION,
                "conversations": [{"from": "human", "value": "Describe it."}, CAPTION["conversations"][1]],
            },
            r"record '004539375' \(index 0\): has an image \(00453/004539375.jpg\) but no <image>",
        ),
        (
            {
                **TEXT_ONLY,
                "conversations": [
                    {"from": "human", "value": "<image>\nWhat is it?"},
                    TEXT_ONLY["conversations"][1],
                ],
            },
            r"record 'i6IyJda_0' \(index 0\): has an <image> placeholder but no 'image'",
        ),
        ({**CAPTION, "conversations": []}, "'conversations' is missing or empty"),
        ({"image": "x.jpg", "conversations": CAPTION["conversations"]}, "record 0 has no 'id'"),
        (
            {
                **TEXT_ONLY,
                "conversations": [{"from": "system", "value": "Be nice."}, *TEXT_ONLY["conversations"]],
            },
            "turn 0 is from 'system'; expected 'human' or 'gpt'",
        ),
        (
            {**TEXT_ONLY, "conversations": [TEXT_ONLY["conversations"][0]] * 2},
            "turns do not alternate human/gpt \\(turn 1 is human\\)",
        ),
        ({**TEXT_ONLY, "conversations": [TEXT_ONLY["conversations"][0]]}, "no gpt turn"),
        (
            {
                **CAPTION,
                "conversations": [{"from": "human", "value": "<image> <image>"}, CAPTION["conversations"][1]],
            },
            "2 <image> placeholders",
        ),
        (
            {
                **CAPTION,
                "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "<image>"}],
            },
            "1 <image> placeholders \\(0 in human turns\\)",
        ),
        ({**CAPTION, "image": ["a.jpg", "b.jpg"]}, "'image' is a list"),
        (
            {**TEXT_ONLY, "conversations": [{"from": "human", "value": 3}, TEXT_ONLY["conversations"][1]]},
            "turn 0 has no string 'value'",
        ),
    ],
)
def test_bad_records_are_named_with_their_file(tmp_path, record, message):
    path = write(tmp_path, [record])
    with pytest.raises(LlavaDataError, match=message) as err:
        read_llava_json(path)
    assert path in str(err.value)


def test_duplicate_ids_and_bad_files(tmp_path):
    with pytest.raises(LlavaDataError, match="record id 'i6IyJda_0' \\(index 1\\) is not unique"):
        read_llava_json(write(tmp_path, [TEXT_ONLY, TEXT_ONLY]))
    with pytest.raises(LlavaDataError, match="expected a JSON list of records"):
        read_llava_json(write(tmp_path, {"data": []}))
    (tmp_path / "bad.json").write_text("[{")
    with pytest.raises(LlavaDataError, match="not a JSON file"):
        read_llava_json(tmp_path / "bad.json")
    with pytest.raises(LlavaDataError, match="does not exist"):
        read_llava_json(tmp_path / "none.json")


def test_a_leading_gpt_turn_is_dropped_and_counted(tmp_path):
    record = {**TEXT_ONLY, "conversations": [{"from": "gpt", "value": "Hello!"}, *TEXT_ONLY["conversations"]]}
    data = read_llava_json(write(tmp_path, [record, CAPTION]))
    assert (
        data.dropped_leading_gpt == 1
        and data.records[0].turns[0][0] == "user"
        and len(data.records[0].turns) == 2
    )


def test_a_missing_placeholder_is_added_when_not_required(tmp_path):
    record = {
        **CAPTION,
        "conversations": [{"from": "human", "value": "Describe it."}, CAPTION["conversations"][1]],
    }
    data = read_llava_json(write(tmp_path, [record]), require_image_token=False)
    assert data.placeholders_added == 1 and data.records[0].turns[0][1] == "<image>\nDescribe it."


def test_images_are_checked_up_front(tmp_path):
    images = tmp_path / "images"
    (images / "00453").mkdir(parents=True)
    (images / "00453" / "004539375.jpg").write_bytes(png_bytes(Image.new("RGB", (3, 2))))
    other = {**CAPTION, "id": "2", "image": "00453/missing.jpg"}
    path = write(tmp_path, [CAPTION, other, TEXT_ONLY])
    with pytest.raises(
        ImageError, match=r"data.json: record '2': image file .*00453/missing.jpg \(missing\)"
    ):
        read_llava_json(path, ImageDir(images))
    data = read_llava_json(path, ImageDir(images), on_missing="skip")
    assert [r.id for r in data.records] == ["004539375", "i6IyJda_0"]
    assert data.missing.missing == 1 and data.missing.checked == 2


def test_write_then_read(tmp_path):
    records = [
        LlavaRecord("a", "k1", (("user", "<image>\nWhat is it?"), ("assistant", "A cat."))),
        LlavaRecord(
            "b", None, (("user", "Hi"), ("assistant", "Hello"), ("user", "Bye"), ("assistant", "Bye"))
        ),
    ]
    write_llava_json(tmp_path / "out.json", records)
    raw = json.loads((tmp_path / "out.json").read_text())
    assert (
        raw[0]["conversations"][0] == {"from": "human", "value": "<image>\nWhat is it?"}
        and "image" not in raw[1]
    )
    assert read_llava_json(tmp_path / "out.json").records == records
    with pytest.raises(LlavaDataError, match="record 'c'.*no <image> placeholder"):
        write_llava_json(tmp_path / "bad.json", [LlavaRecord("c", "k", (("user", "Hi"), ("assistant", "x")))])
