"""The one task interface: a job's task record opens as its task (the table names the text kind),
records survive the JSON a job on N ranks reads, and a new kind of task needs its implementation,
its registry entry and these tests, nothing in pipeline/train/."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from train.test_finetune import CFG, finetune_job

from pipeline.data.batches import ChunkSampler
from pipeline.data.heldout import lm_eval_set
from pipeline.data.tokenizer import token_stream
from pipeline.evaluate.perplexity import eval_perplexity
from pipeline.multimodal.config import VlmConfig
from pipeline.tables import metrics_frame
from pipeline.tasks import registry
from pipeline.tasks.base import FinetuneTask
from pipeline.tasks.llava import LlavaTaskSpec
from pipeline.tasks.text import ChatTask, ClassificationTask, LMTask, TextTaskSpec
from pipeline.train.finetune import finetune_run
from pipeline.train.finetune_job import FinetuneJob


def test_a_text_record_opens_as_its_tables_kind(study_files):
    book = TextTaskSpec("book", str(study_files["dir"] / "book.parquet")).open()
    mr = TextTaskSpec("mr", str(study_files["dir"] / "mr.parquet")).open()
    assert isinstance(book, LMTask) and book.packed and book.metrics == ("ppl", "loss", "bpb")
    assert isinstance(mr, ClassificationTask) and not mr.packed and "accuracy" in mr.metrics
    assert ChatTask.metrics == ("ppl", "loss")


def test_the_workflows_text_record_shares_the_studys_token_cache(
    study_files, tokenizer, tmp_path, monkeypatch
):
    """The record a fine-tuning rule writes for a text task points its LM training split at the
    study's token cache, so the study's jobs tokenize the split once (the first writes the cache)."""
    from pipeline import layout
    from pipeline.workflow.targets import text_task_params

    monkeypatch.chdir(tmp_path)
    params = text_task_params({"study": "s"}, "book")
    assert params["token_cache"] == layout.study_path("s", layout.TOKEN_CACHE)
    record = TextTaskSpec.record({**params, "table": str(study_files["dir"] / "book.parquet")}, {})
    record.open().train_batches(tokenizer, 32, 2, seed=0)
    assert list((tmp_path / params["token_cache"]).glob("*.npy"))


def test_job_records_survive_their_json(study_files, tmp_path):
    """What a torchrun rank reads back equals what the rule wrote: nested typed records and the
    task record of either kind (told apart by `kind`)."""
    text = finetune_job(study_files, "mr", state=tmp_path / "s")
    assert FinetuneJob.from_json(text.to_json()) == text
    llava = LlavaTaskSpec(
        "llava", "data.json", "tower", "projector.pt", VlmConfig(max_length=64), hf_dir="hf"
    )
    vlm = dataclasses.replace(text, task=llava, ranks=2)
    back = FinetuneJob.from_json(vlm.to_json())
    assert back == vlm and isinstance(back.task.config, VlmConfig)
    with pytest.raises(ValueError, match="task kind 'nope' is not one of"):
        FinetuneJob.from_json(json.dumps({**json.loads(text.to_json()), "task": {"kind": "nope"}}))


def test_the_llava_record_takes_its_execution_settings_from_the_config():
    """multimodal.eval_batch_size and save_hf change no number: not in the rule's params (a change
    reruns nothing), read from the config when the record is made."""
    params = {"kind": "llava", "name": "llava", "data": "d", "tower": "t", "projector": "p",
              "config": {"max_length": 96}, "hf_dir": "out.hf"}  # fmt: skip
    on = registry.task_record(params, {"multimodal": {"eval_batch_size": 4, "save_hf": True}})
    off = registry.task_record(params, {"multimodal": {}})
    assert (on.config.eval_batch_size, on.config.max_length, on.hf_dir) == (4, 96, "out.hf")
    assert off.hf_dir is None and off.config.eval_batch_size == VlmConfig().eval_batch_size


# --- a new kind of task, defined here alone -------------------------------------------------------


@dataclass(frozen=True)
class EchoSpec:
    """A task whose every example is one passage of text repeated: its record names the passage."""

    name: str
    text: str
    kind: str = "echo"

    @classmethod
    def record(cls, params: dict, config: dict) -> EchoSpec:
        return cls(**params)

    def open(self) -> EchoTask:
        return EchoTask(self)


class EchoTask(FinetuneTask):
    """Language modelling of one passage repeated: packed chunks to train, its perplexity held out."""

    metrics = ("ppl", "loss")
    packed = True

    def __init__(self, spec: EchoSpec):
        self.name, self.text = spec.name, spec.text

    def train_batches(self, tokenizer, max_len: int, rows: int, seed: int):
        sampler = ChunkSampler(token_stream(tokenizer, [self.text] * 40), max_len, rows, seed)
        return sampler.batch, sampler.n_chunks // rows

    def eval_data(self, tokenizer, max_len: int, cfg):
        return {s: lm_eval_set(tokenizer, [self.text] * 4, max_len, None) for s in ("validation", "test")}

    def evaluate(self, model, data, tokenizer, cfg) -> dict[str, float]:
        return eval_perplexity(model, data, batch_size=cfg.eval_batch_size)


def test_a_new_task_kind_runs_through_the_job_untouched(study_files, tmp_path, monkeypatch, moby_docs):
    """The kind's implementation and record (above), its registry entry (`SPECS`), and a job runs it:
    trained, early-stopped, evaluated, its rows its own, its record through the JSON of N ranks."""
    monkeypatch.setitem(registry.SPECS, "echo", EchoSpec)
    echo = EchoSpec("echo", moby_docs[3].text[:400])
    job = dataclasses.replace(finetune_job(study_files, "mr", state=tmp_path / "s", cfg=CFG), task=echo)
    assert FinetuneJob.from_json(job.to_json()) == job
    rows = metrics_frame(finetune_run(job))
    own = rows[rows["eval_data"] == "echo"]
    assert set(own["metric"]) == {"ppl", "loss"} and set(own["split"]) == {"validation", "test"}
    assert (own["task"] == "echo").all() and own["value"].notna().all()
    before = pd.read_parquet(study_files["dir"] / "mr.parquet")  # nothing else was read or changed
    assert len(before) > 0
    assert not any("echo" in p.read_text() for p in Path("pipeline/train").glob("*.py"))
