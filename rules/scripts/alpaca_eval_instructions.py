"""Rule alpaca_eval_instructions: the instruction set every model answers, in AlpacaEval's schema."""

import logging

from pipeline.io import write_parquet
from pipeline.judge.config import InstructionSet
from pipeline.judge.instructions import load_instructions
from pipeline.runtime import setup_logging

setup_logging(snakemake.log[0])
src = InstructionSet(**snakemake.params.src)
table = load_instructions(src, snakemake.input[0] if snakemake.input else None)
write_parquet(snakemake.output[0], table)
logging.info(
    "%d instructions from %s %s", len(table), src.source, src.path if src.source != "task" else src.task
)
