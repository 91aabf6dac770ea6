"""Rule alpaca_eval_base: a checkpoint's responses to the instruction set before fine-tuning."""

from pipeline.evaluate.generation import write_responses
from pipeline.models.checkpoints import CheckpointSpec
from pipeline.models.loading import load_checkpoint
from pipeline.runtime import pick_device, set_threads, setup_logging

setup_logging(snakemake.log[0])
set_threads(snakemake.threads)
spec = CheckpointSpec(**snakemake.params.spec)
path = snakemake.input.checkpoint[0] if snakemake.input.checkpoint else None
model, tokenizer, _, _ = load_checkpoint(spec, path, pick_device(snakemake.params.device))
identity = {**spec.row_fields(snakemake.config["study"]), "modification": "none"}
write_responses(
    model, tokenizer, snakemake.input.instructions, snakemake.params.generation, identity, snakemake.output[0]
)
