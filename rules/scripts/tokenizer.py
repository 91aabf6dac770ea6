"""Rule tokenizer: byte-level BPE trained on the training split (or a given tokenizer.json)."""

import logging
from pathlib import Path

import pandas as pd

from pipeline.data.encode import read_task
from pipeline.data.task_items import item_text
from pipeline.data.tokenizer import study_tokenizer
from pipeline.io import atomic_path
from pipeline.runtime import set_tokenizer_threads, setup_logging

setup_logging(snakemake.log[0])
set_tokenizer_threads(snakemake.threads)
corpus = pd.read_parquet(snakemake.input.corpus)
tasks = [read_task(Path(p).stem, p) for p in snakemake.input.tasks]
tok = study_tokenizer(
    corpus.loc[corpus["split"] == "train", "text"].tolist(),
    snakemake.params.tokenizer,
    [item_text(it) for task in tasks for it in task.splits.get("train", [])],
)
with atomic_path(snakemake.output[0]) as tmp:
    tok.save(str(tmp))
logging.info("tokenizer with %d tokens written to %s", tok.get_vocab_size(), snakemake.output[0])
