"""LLaVA's two stages as jobs on a tiny sweep-style checkpoint and a small toy corpus (real images from
the pinned packages): stage 1 trains the projector only and writes the task's base rows; stage 2 is a
fine-tuning job from that projector whose rows hold the benchmarks, the VLM score and the language
model's pre-training perplexity; bad input stops with the key or file named."""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest
import torch
from transformers import CLIPVisionModel

from pipeline.data.heldout import PretrainCorpus
from pipeline.models.build import build_model, model_config
from pipeline.models.checkpoints import CheckpointSpec
from pipeline.multimodal.config import Stage1Config, TowerConfig, ToyDataConfig, VlmConfig
from pipeline.multimodal.images import ImageError
from pipeline.multimodal.tower import Preprocess, toy_vision_config
from pipeline.multimodal.vlm_data import write_toy_data
from pipeline.multimodal.vlm_eval import SPLIT, VLM
from pipeline.multimodal.vlm_task import PROJECTOR
from pipeline.tasks.llava import LlavaTaskSpec
from pipeline.train.config import FinetuneConfig
from pipeline.train.finetune_job import FinetuneJob, run_in_process
from pipeline.train.llava_stage1 import Stage1Job, run_stage1

SMALL_TOY = ToyDataConfig(
    stage1_captions=200,
    stage2_conversations=200,
    stage2_text_only=20,
    max_turns=1,
    eval_items={"mme": 12, "gqa": 8, "ai2d": 8, "pope": 4, "textvqa": 8},
)
SETTINGS = VlmConfig(max_length=256, eval_max_new_tokens=4, eval_batch_size=8)


@pytest.fixture(scope="module")
def llava_files(tmp_path_factory, tokenizer, study_files):
    """A toy corpus, a small random CLIP tower (16x16 patches: 4 image tokens) and a tiny checkpoint
    with a 256-token context (LLaVA's v1 system line alone is ~80 tokens of this 512-token BPE)."""
    out = tmp_path_factory.mktemp("llava")
    data = write_toy_data(SMALL_TOY, out / "vlm")
    torch.manual_seed(0)
    tower_cfg = TowerConfig(hidden=16, layers=3, heads=2, patch_size=16, projection_dim=16)
    CLIPVisionModel(toy_vision_config(tower_cfg, image_size=32)).save_pretrained(out / "tower")
    Preprocess(32).save(out / "tower")
    cfg = model_config("tiny", len(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id)
    cfg.max_position_embeddings = 256
    build_model(cfg, seed=0).save_pretrained(out / "ckpt")
    tokenizer.save_pretrained(out / "ckpt")
    spec = CheckpointSpec("tiny-llava", "local", "tiny", 1000, path=str(out / "ckpt"))
    return {
        "dir": out,
        "data": str(out / "vlm" / "data.json"),
        "tower": str(out / "tower"),
        "spec": spec,
        "corpus": str(study_files["corpus"]),
        "chance": data["chance"],
    }


def stage1_job(files, name="s1", **kwargs) -> Stage1Job:
    d = files["dir"]
    return Stage1Job(
        spec=files["spec"],
        path=files["spec"].path,
        task="llava",
        data_json=files["data"],
        tower_dir=files["tower"],
        stage1=Stage1Config(batch_size=8, max_steps=3, warmup_steps=1, seed=0),
        vlm=kwargs.pop("vlm", SETTINGS),
        study="t",
        projector_path=str(d / f"{name}.projector.pt"),
        metrics_path=str(d / f"{name}.base.parquet"),
        state_dir=str(d / f"{name}-state"),
        **kwargs,
    )


def test_stage_one_trains_the_projector_and_writes_the_base_rows(llava_files):
    job = stage1_job(llava_files)
    rows = pd.DataFrame(run_stage1(job))
    projector = torch.load(job.projector_path, weights_only=True)
    assert projector and all(k.startswith(PROJECTOR) for k in projector)
    assert (rows["modification"] == "none").all() and (rows["task"] == "llava").all()
    assert json.loads(rows["extra"].iloc[0])["stage"] == "stage1"
    score = rows[(rows["eval_data"] == VLM) & (rows["metric"] == "vlm_score")]["value"]
    assert len(score) == 1 and 0 <= score.iloc[0] <= 100
    assert set(rows["eval_data"]) >= {"mme", "gqa", "ai2d", "pope", "textvqa", VLM}
    assert (rows[rows["eval_data"] != "llava"]["split"] == SPLIT).all()
    assert pd.read_parquet(job.metrics_path).shape[0] == len(rows)


def stage2_job(
    files: dict,
    tmp_path,
    name: str,
    projector: str,
    lambda_reg: float = 0.0,
    hf_dir: str | None = None,
    threads: int = 1,
) -> FinetuneJob:
    """A 3-step stage-2 run (LR 1e-3) from the stage-1 projector at `projector`."""
    task = LlavaTaskSpec("llava", files["data"], files["tower"], projector, SETTINGS, hf_dir)
    return FinetuneJob(
        spec=files["spec"],
        cfg=FinetuneConfig(
            epochs=1, max_steps=3, batch_size=8, warmup_steps=1, eval_batch_size=8, eval_max_tokens=500
        ),
        task=task,
        corpus=PretrainCorpus(files["corpus"], "validation", max_tokens=500, batch_size=8),
        learning_rate=1e-3,
        lambda_reg=lambda_reg,
        seed=0,
        study="t",
        state_dir=str(tmp_path / f"{name}-state"),
        metrics_path=str(tmp_path / f"{name}.parquet"),
        path=files["spec"].path,
        threads=threads,
    )


def test_stage_two_is_a_finetuning_run_from_the_stage_one_projector(llava_files, tmp_path):
    s1 = stage1_job(llava_files, "s2base")
    run_stage1(s1)
    job = stage2_job(llava_files, tmp_path, "rows", s1.projector_path, hf_dir=str(tmp_path / "hf"))
    rows = pd.DataFrame(run_in_process(job))
    metrics = set(zip(rows["eval_data"], rows["metric"]))
    assert {("pretrain", "ppl"), ("llava", "loss"), ("weights", "distance_l2"), (VLM, "vlm_score")} <= metrics
    assert ("llava", "loss_other_image") in metrics
    assert (rows["modification"] == "sft").all() and rows["diverged"].eq(False).all()
    # the saved model reloads as LLaVA with the projector it trained, and its tokenizer's image token
    from transformers import AutoTokenizer, LlavaForConditionalGeneration

    saved = LlavaForConditionalGeneration.from_pretrained(tmp_path / "hf")
    tok = AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert tok.convert_tokens_to_ids("<image>") == saved.config.image_token_id
    assert "ASSISTANT:" in tok.chat_template


def test_a_missing_image_is_named_or_skipped_and_counted(llava_files, tmp_path, caplog):
    records = json.loads((llava_files["dir"] / "vlm" / "stage1.json").read_text())
    records[0]["image"] = "not-an-image-id"
    broken = tmp_path / "stage1.json"
    broken.write_text(json.dumps(records))
    data = json.loads(open(llava_files["data"]).read())
    data["stage1"] = str(broken)
    (tmp_path / "data.json").write_text(json.dumps(data))
    with pytest.raises(ImageError, match="record 'toy-s1-000000': image 'not-an-image-id'"):
        run_stage1(dataclasses.replace(stage1_job(llava_files, "bad"), data_json=str(tmp_path / "data.json")))
    skipping = dataclasses.replace(SETTINGS, on_missing="skip")
    job = dataclasses.replace(
        stage1_job(llava_files, "skip", vlm=skipping), data_json=str(tmp_path / "data.json")
    )
    with caplog.at_level("INFO", logger="pipeline.multimodal.vlm_data"):
        assert run_stage1(job)
    assert "skipped 1 of 200 records with an image (1 missing, 0 unreadable)" in caplog.text


def test_a_sharded_stage_two_equals_one_process(llava_files, tmp_path):
    """Stage 2 under FSDP2 on 2 CPU ranks (the frozen tower's layers sharded too, rank 0's stage-1
    projector broadcast): every row within 1e-4 relative of one process's."""
    from pipeline.train.finetune_job import run_on_ranks

    s1 = stage1_job(llava_files, "ranks")
    run_stage1(s1)

    def job(name: str) -> FinetuneJob:
        return stage2_job(llava_files, tmp_path, name, s1.projector_path, lambda_reg=0.5, threads=2)

    one = pd.DataFrame(run_in_process(job("one")))
    sharded = job("two")
    run_on_ranks(dataclasses.replace(sharded, ranks=2), tmp_path / "job.json")
    two = pd.read_parquet(sharded.metrics_path)
    keys = ["eval_data", "split", "metric"]
    merged = one.merge(two, on=keys, suffixes=("_1", "_2"), how="outer", indicator=True)
    assert (merged["_merge"] == "both").all() and len(merged) == len(one)
    assert {"vlm_score", "distance_l2", "ppl"} <= set(merged["metric"])
    pd.testing.assert_series_equal(merged["value_2"], merged["value_1"], rtol=1e-4, check_names=False)
