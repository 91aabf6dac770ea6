"""Rule tokenize_shard: one text file of pretrain.text_files as an OLMo-format token shard, its index
and its record, streamed in batches of documents (pipeline/data/shard_tokenize.py)."""

import logging
import time

from pipeline.data.shard_tokenize import local_text_file, tokenize_file
from pipeline.data.tokenizer import EOS
from pipeline.runtime import set_tokenizer_threads, setup_logging

setup_logging(snakemake.log[0])
set_tokenizer_threads(snakemake.threads)

source = local_text_file(snakemake.params.source)  # a hub dataset's file: from the hub cache
start = time.perf_counter()
info = tokenize_file(
    source,
    snakemake.input.tokenizer,
    EOS,
    snakemake.output.tokens,
    snakemake.output.index,
    snakemake.output.info,
    field=snakemake.params.field,
    batch_documents=snakemake.params.batch,
)
seconds = time.perf_counter() - start
logging.info(
    "%s: %d documents, %d tokens (%s) in %.1f s (%.0f tokens/s)",
    snakemake.params.source,
    info["documents"],
    info["tokens"],
    info["dtype"],
    seconds,
    info["tokens"] / seconds,
)
