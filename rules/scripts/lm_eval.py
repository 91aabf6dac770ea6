"""Rule lm_eval: the lm-eval benchmark suite on a checkpoint's base model and its Gaussian perturbations."""

from pipeline.models.checkpoints import CheckpointSpec
from pipeline.runtime import pick_device, set_threads, setup_logging
from pipeline.sweeps.benchmark_grid import benchmark_grid
from pipeline.sweeps.cells import Grid
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
rows = benchmark_grid(grid, bench_cfg=snakemake.params.bench)
write_metrics(snakemake.output[0], rows)
