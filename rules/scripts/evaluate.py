"""Rule evaluate: every evaluation of one checkpoint (held-out perplexity and the lm-eval suite on its
Gaussian grid, base in-domain metrics per text task) on one loaded model, each to its own table."""

from pipeline.models.checkpoints import CheckpointSpec
from pipeline.runtime import pick_device, set_threads, setup_logging
from pipeline.sweeps.cells import Grid
from pipeline.tables import write_metrics
from pipeline.train.checkpoint_eval import Evaluations, evaluate_checkpoint
from pipeline.train.config import FinetuneConfig

setup_logging(snakemake.log[0])
set_threads(snakemake.threads)
params, output = snakemake.params, snakemake.output
grid = Grid(
    CheckpointSpec(**params.spec),
    path=snakemake.input.checkpoint[0] if snakemake.input.checkpoint else None,
    gammas=params.gammas,
    seeds=params.seeds,
    study=snakemake.config["study"],
    cache_dir=params.cache,
    device=pick_device(params.device),
)
evals = Evaluations(
    corpus=snakemake.input.corpus,
    eval_cfg=params.eval,
    bench=params.bench,
    bench_cache=params.bench_cache,
    tasks=dict(zip(params.tasks, snakemake.input.tasks, strict=True)),
    task_cfg=FinetuneConfig(**params.task_hp) if params.task_hp is not None else None,
)
rows = evaluate_checkpoint(grid, evals)
write_metrics(output.perturb, rows.perturb)
if rows.lm_eval is not None:
    write_metrics(output.lm_eval, rows.lm_eval)
for task, path in zip(params.tasks, output.get("base", []), strict=True):
    write_metrics(path, rows.base[task])
