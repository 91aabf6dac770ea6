"""Rule ntk: the empirical NTK of one checkpoint on every fine-tuning task (pipeline/curvature/ntk.py)."""

from pipeline.curvature.config import CurvatureConfig
from pipeline.curvature.ntk import ntk_rows
from pipeline.models.checkpoints import CheckpointSpec
from pipeline.runtime import pick_device, set_threads, setup_logging
from pipeline.tables import write_metrics

setup_logging(snakemake.log[0])
set_threads(snakemake.threads)
p = dict(snakemake.params.ntk)
seq_len, methods, seed = p.pop("seq_len"), p.pop("methods"), p.pop("seed")
# the block size changes no number: read from the config, not params (changing it reruns nothing)
block = snakemake.config["curvature"].get("ntk_block_gib", CurvatureConfig.ntk_block_gib)
tasks = {name: snakemake.input[name] for name in snakemake.input.keys() if name != "checkpoint"}
rows = ntk_rows(
    CheckpointSpec(**snakemake.params.spec),
    path=snakemake.input.checkpoint[0] if snakemake.input.checkpoint else None,
    tasks=tasks,
    max_len=seq_len,
    cfg=CurvatureConfig(**p, ntk_block_gib=block),
    study=snakemake.config["study"],
    device=pick_device(snakemake.params.device),
    methods=methods,
    seed=seed,
)
write_metrics(snakemake.output[0], rows)
