"""Rule task_base: in-domain metrics of an unmodified checkpoint on one fine-tuning task."""

from pipeline.models.checkpoints import CheckpointSpec
from pipeline.runtime import pick_device, set_threads, setup_logging
from pipeline.tables import write_metrics
from pipeline.train.config import FinetuneConfig
from pipeline.train.finetune import task_base_rows

setup_logging(snakemake.log[0])
set_threads(snakemake.threads)
rows = task_base_rows(
    CheckpointSpec(**snakemake.params.spec),
    path=snakemake.input.checkpoint[0] if snakemake.input.checkpoint else None,
    task_path=snakemake.input.task,
    task_name=snakemake.wildcards.task,
    cfg=FinetuneConfig(**snakemake.params.hp),
    study=snakemake.config["study"],
    device=pick_device(snakemake.params.device),
)
write_metrics(snakemake.output[0], rows)
