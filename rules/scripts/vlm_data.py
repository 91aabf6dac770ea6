"""Rule vlm_data: the study's LLaVA data (pipeline/multimodal/vlm_data.py): the offline toy corpus,
or the cluster's files checked once."""

from pathlib import Path

from pipeline.multimodal.config import LocalData, VlmConfig, toy_data_config
from pipeline.multimodal.vlm_data import write_local_data, write_toy_data
from pipeline.runtime import setup_logging

setup_logging(snakemake.log[0])
p = snakemake.params.data
out = Path(snakemake.output[0]).parent
if p["source"] == "toy":
    write_toy_data(toy_data_config(p["toy"]), out)
else:
    write_local_data(LocalData(**p["local"]), VlmConfig(on_missing=p["on_missing"]), out)
