"""Rule theory_transfer: the transfer stage (pipeline/theory/transfer/stage.py) -> its table + 8 figures."""

from pathlib import Path

from pipeline.runtime import setup_logging
from pipeline.theory.transfer.figures import plot_transfer
from pipeline.theory.transfer.stage import run_transfer
from pipeline.theory.transfer.table import write_transfer

setup_logging(snakemake.log[0])
df = run_transfer(snakemake.params.cfg, study=snakemake.config["study"])
write_transfer(snakemake.output.table, df)
reference_sigma = snakemake.params.cfg["transfer"]["features_are_fate"]["reference_sigma"]
plot_transfer(df, Path(snakemake.output.figures[0]).parent, reference_sigma, snakemake.params.formats)
