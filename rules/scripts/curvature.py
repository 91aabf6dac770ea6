"""Rule curvature: one checkpoint's Gaussian lines (loss vs the quadratic prediction) and sharpness."""

from pipeline.curvature.config import CurvatureConfig
from pipeline.curvature.lines import write_lines
from pipeline.curvature.stage import checkpoint_curvature
from pipeline.models.checkpoints import CheckpointSpec
from pipeline.runtime import pick_device, set_threads, setup_logging
from pipeline.tables import write_metrics

setup_logging(snakemake.log[0])
set_threads(snakemake.threads)
lines, sharpness = checkpoint_curvature(
    CheckpointSpec(**snakemake.params.spec),
    path=snakemake.input.checkpoint[0] if snakemake.input.checkpoint else None,
    corpus_path=snakemake.input.corpus,
    eval_cfg=snakemake.params.eval,
    cfg=CurvatureConfig(**snakemake.params.curv),
    study=snakemake.config["study"],
    device=pick_device(snakemake.params.device),
)
write_lines(snakemake.output.lines, lines)
write_metrics(snakemake.output.sharpness, sharpness)
