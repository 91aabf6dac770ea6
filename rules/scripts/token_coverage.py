"""Rule token_coverage: per fine-tuning text task and evaluation split, the share of its tokens whose
id never occurs as a pre-training target (pipeline/data/manifest.py), in what pre-training reads: the
study's split or its token shards."""

import logging
from pathlib import Path

from pipeline.data.encode import read_task
from pipeline.data.manifest import MAX_UNSEEN, seen_targets, token_coverage
from pipeline.data.task_items import item_text
from pipeline.data.token_shards import open_tokens, pretrain_shards
from pipeline.data.tokenizer import as_hf_tokenizer, encode_documents
from pipeline.io import write_parquet
from pipeline.runtime import setup_logging

setup_logging(snakemake.log[0])
tokenizer = as_hf_tokenizer(snakemake.input.tokenizer)
task_tokens = {}
for path in snakemake.input.tasks:
    task = read_task(Path(path).stem, path)
    for split in ("validation", "test"):
        docs = [item_text(it) for it in task.splits.get(split) or []]
        task_tokens[task.name, split] = [t for doc in encode_documents(tokenizer, docs) for t in doc]
shards = pretrain_shards(snakemake.config["pretrain"], snakemake.input.tokens)
tokens = open_tokens(snakemake.input.tokens, shards)  # the shards where there are any, else the split
coverage = token_coverage(seen_targets(tokens), task_tokens)
write_parquet(snakemake.output[0], coverage)
logging.info("tokens pre-training never predicts:\n%s", coverage.to_string(index=False))
for r in coverage[coverage["unseen_share"] > MAX_UNSEEN].itertuples():
    logging.warning(
        "task %s/%s: %.2f%% of its tokens (%d ids) never occur as pre-training targets (target <= %.1f%%)",
        r.task,
        r.split,
        100 * r.unseen_share,
        r.unseen_ids,
        100 * MAX_UNSEEN,
    )
