"""Rules finetune and vlm_finetune: one checkpoint fine-tuned on one task at one (lr, lambda, seed),
evaluated in memory; in this process, or on `resources.ranks` processes (FSDP2 under torchrun).
Rule finetune_grid (finetune.grid_per_job): the same at each of `params.learning_rates` in turn."""

from dataclasses import replace
from pathlib import Path

from pipeline.curvature.config import CurvatureConfig
from pipeline.data.heldout import PretrainCorpus
from pipeline.evaluate.benchmark_registry import BenchmarkSettings
from pipeline.evaluate.generation_config import GenerationConfig, Responses
from pipeline.models.checkpoints import CheckpointSpec
from pipeline.runtime import setup_logging
from pipeline.tasks.registry import task_record
from pipeline.train.config import FinetuneConfig, execution
from pipeline.train.finetune_job import FinetuneJob, run, run_grid
from pipeline.workflow.plans import run_micro_batch

setup_logging(snakemake.log[0])
wc, params, config = snakemake.wildcards, snakemake.params, snakemake.config
# how the run executes (logging / resume cadence, activation checkpointing, the collective timeout)
# is read from the config, not params: changing it reruns nothing
cfg = FinetuneConfig(**params.hp, **execution(FinetuneConfig, config["finetune"]))
spec, ranks = CheckpointSpec(**params.spec), int(snakemake.resources.get("ranks", 1))
planned = snakemake.resources.get("micro_batch")  # device cuda: the plan that sized the job
micro_batch = run_micro_batch(spec, config, ranks, params.device, int(planned) if planned else None)
cfg = replace(cfg, micro_batch_size=micro_batch)
responses = "generations" in snakemake.output.keys()  # the judged metric (alpaca_eval) is on
grid = params.get("learning_rates")  # rule finetune_grid: its rates, one output of each per rate
job = FinetuneJob(
    spec=spec,
    cfg=cfg,
    task=task_record(params.task, config),
    corpus=PretrainCorpus(snakemake.input.corpus, **params.eval, token_cache=params.token_cache),
    learning_rate=float(grid[0] if grid else wc.lr),
    lambda_reg=float(wc.lam),
    seed=int(wc.seed),
    method=wc.method,
    study=config["study"],
    state_dir=params.state,
    metrics_path=snakemake.output.metrics,
    line_path=snakemake.output.line,
    path=snakemake.input.checkpoint[0] if snakemake.input.checkpoint else None,
    device=params.device,
    ranks=ranks,
    suite=BenchmarkSettings(**params.bench) if params.bench else None,
    generation=Responses(
        snakemake.input.instructions, GenerationConfig(**params.generation), snakemake.output.generations
    )
    if responses
    else None,
    curvature=CurvatureConfig(**params.curv)
    if params.curv
    else None,  # Appendix D: the line along θ_ft − θ_pre
    threads=snakemake.threads,
)
if grid:
    runs = [
        replace(
            job, learning_rate=float(lr), state_dir=f"{params.state}/lr{lr}", metrics_path=m, line_path=line
        )
        for lr, m, line in zip(grid, snakemake.output.metrics, snakemake.output.line, strict=True)
    ]
    run_grid(runs, Path(params.state) / "done")
else:
    run(job, Path(params.state) / "job.json")
