"""Rule theory: the two-layer linear network stage (pipeline/theory/) -> metrics + four figures."""

from pathlib import Path

from pipeline.runtime import setup_logging
from pipeline.tables import write_metrics
from pipeline.theory.figures import plot_theory
from pipeline.theory.stage import run_theory

setup_logging(snakemake.log[0])
df = run_theory(snakemake.params.cfg, study=snakemake.config["study"])
write_metrics(snakemake.output.metrics, df.to_dict("records"))
plot_theory(df, Path(snakemake.output.figures[0]).parent, snakemake.params.formats)
