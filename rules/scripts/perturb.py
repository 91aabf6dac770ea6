"""Rule perturb: base + gamma x seed Gaussian perturbations of one checkpoint, evaluated in memory."""

from pipeline.models.checkpoints import CheckpointSpec
from pipeline.runtime import pick_device, set_threads, setup_logging
from pipeline.sweeps.cells import Grid
from pipeline.sweeps.perturb_grid import perturbation_grid
from pipeline.tables import write_metrics

setup_logging(snakemake.log[0])
set_threads(snakemake.threads)
grid = Grid(
    CheckpointSpec(**snakemake.params.spec),
    path=snakemake.input.checkpoint[0] if snakemake.input.checkpoint else None,
    gammas=snakemake.params.gammas,
    seeds=snakemake.params.seeds,
    study=snakemake.config["study"],
    cache_dir=snakemake.params.cache,
    device=pick_device(snakemake.params.device),
)
rows = perturbation_grid(grid, corpus_path=snakemake.input.corpus, eval_cfg=snakemake.params.eval)
write_metrics(snakemake.output[0], rows)
