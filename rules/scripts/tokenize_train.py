"""Rule tokenize_train: the training split as one token stream (documents end with EOS), its record
(size and the settings it was made with) and the corpus manifest (the mix per source and split)."""

import logging

import numpy as np
import pandas as pd

from pipeline.data.corpus import SOURCE_KINDS
from pipeline.data.manifest import corpus_manifest
from pipeline.data.tokenizer import as_hf_tokenizer, encode_documents, pack_documents
from pipeline.io import atomic_path, write_json, write_parquet
from pipeline.runtime import set_tokenizer_threads, setup_logging

setup_logging(snakemake.log[0])
set_tokenizer_threads(snakemake.threads)
corpus = pd.read_parquet(snakemake.input.corpus)
tokenizer = as_hf_tokenizer(snakemake.input.tokenizer)
ids = encode_documents(tokenizer, corpus["text"].tolist())
train = (corpus["split"] == "train").to_numpy()
tokens = pack_documents([d for d, t in zip(ids, train) if t], tokenizer.eos_token_id, len(tokenizer))
with atomic_path(snakemake.output.tokens) as tmp:
    with open(tmp, "wb") as f:
        np.save(f, tokens)
write_json(snakemake.output.info, {"tokens": int(len(tokens)), **snakemake.params.made_with})
manifest = corpus_manifest(corpus, [len(d) + 1 for d in ids], SOURCE_KINDS)
write_parquet(snakemake.output.manifest, manifest)
logging.info("%d training tokens; the corpus mix:\n%s", len(tokens), manifest.to_string(index=False))
