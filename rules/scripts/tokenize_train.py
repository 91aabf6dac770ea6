"""Rule tokenize_train: the training split as one token stream (documents end with EOS)."""

import logging

import numpy as np
import pandas as pd

from pipeline.data.tokenizer import as_hf_tokenizer, token_stream
from pipeline.io import atomic_path
from pipeline.runtime import setup_logging

setup_logging(snakemake.log[0])
corpus = pd.read_parquet(snakemake.input.corpus)
tokens = token_stream(
    as_hf_tokenizer(snakemake.input.tokenizer), corpus.loc[corpus["split"] == "train", "text"].tolist()
)
with atomic_path(snakemake.output[0]) as tmp:
    with open(tmp, "wb") as f:
        np.save(f, tokens)
logging.info("%d training tokens", len(tokens))
