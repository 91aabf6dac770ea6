"""Rule findings: every registered claim on this study's tables, rendered with its verdict."""

import logging
from pathlib import Path

from pipeline.analysis.findings import study_findings
from pipeline.io import atomic_path
from pipeline.runtime import setup_logging

setup_logging(snakemake.log[0])
out = Path(snakemake.output[0])
page = study_findings(out.parent, snakemake.config["study"])
with atomic_path(out) as tmp:
    tmp.write_text(page)
logging.info("wrote %s", out)
