"""Rule vlm_figures: LLaVA across the sweep (pipeline/analysis/multimodal_figures.py)."""

import json
from pathlib import Path

import pandas as pd

from pipeline.analysis.multimodal_figures import plot_vlm
from pipeline.runtime import setup_logging

setup_logging(snakemake.log[0])
out = Path(snakemake.output.vlm_benchmarks[0])
# the study's own BPE's vocabulary (the uniform guess); unknown for other checkpoints and tokenizers
own = snakemake.config["checkpoints"]["source"] == "sweep" and snakemake.config["tokenizer"]["kind"] == "bpe"
vocab_size = snakemake.config["tokenizer"]["vocab_size"] if own else None
plot_vlm(
    pd.read_parquet(snakemake.input.metrics),
    pd.read_parquet(snakemake.input.tuned),
    out.with_suffix(""),
    snakemake.config["analysis"]["figure_formats"],
    json.loads(Path(snakemake.input.data).read_text()).get("chance"),
    vocab_size,
)
