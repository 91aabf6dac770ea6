"""Rule reference_ppl: the pre-training corpus's held-out split scored by a unigram model of the
training targets and by a uniform guess (pipeline/data/manifest.py), the lines a pre-training
perplexity is read against and the threshold of the U claims' exclusion rule."""

import logging

import numpy as np
import pandas as pd

from pipeline.data.batches import IGNORE_INDEX
from pipeline.data.heldout import heldout_eval_set
from pipeline.data.manifest import reference_perplexity, target_counts
from pipeline.data.token_shards import open_tokens, pretrain_shards
from pipeline.data.tokenizer import as_hf_tokenizer
from pipeline.io import write_parquet
from pipeline.runtime import setup_logging

setup_logging(snakemake.log[0])
tokenizer = as_hf_tokenizer(snakemake.input.tokenizer)
split, max_tokens = snakemake.params.split, snakemake.params.max_tokens
heldout = heldout_eval_set(snakemake.input.corpus, split, tokenizer, 4096, max_tokens)
labels = heldout.labels.numpy()
ids = labels[labels != IGNORE_INDEX]
shards = pretrain_shards(snakemake.config["pretrain"], snakemake.input.tokens)
counts = target_counts(open_tokens(snakemake.input.tokens, shards))
row = {"eval_data": "pretrain", "split": split, "tokens": int(len(ids)), "vocab_size": len(tokenizer)}
row |= reference_perplexity(counts, np.asarray(ids), len(tokenizer))
table = pd.DataFrame([row])
write_parquet(snakemake.output[0], table)
logging.info("reference perplexities of the held-out split:\n%s", table.to_string(index=False))
