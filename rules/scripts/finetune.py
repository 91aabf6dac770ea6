"""Rule finetune: one checkpoint fine-tuned on one task at one (lr, lambda, seed), evaluated in
memory; in this process, or on `resources.ranks` processes (FSDP2 under torchrun) when > 1."""

from pathlib import Path

from pipeline.curvature.stage import FinetuneLine
from pipeline.models.checkpoints import CheckpointSpec
from pipeline.runtime import pick_device, set_threads, setup_logging
from pipeline.train import finetune_job
from pipeline.train.config import FinetuneConfig, execution
from pipeline.train.launch import run_on_ranks
from pipeline.workflow.layout import TOKEN_CACHE, study_path

setup_logging(snakemake.log[0])
wc = snakemake.wildcards
# how the run executes (logging / resume cadence, activation checkpointing) is read from the config,
# not params: changing it reruns nothing
cfg = FinetuneConfig(**snakemake.params.hp, **execution(FinetuneConfig, snakemake.config["finetune"]))
spec = CheckpointSpec(**snakemake.params.spec)
job = finetune_job.describe(
    spec,
    cfg,
    outputs={"metrics": snakemake.output.metrics, "line": snakemake.output.line},
    device=snakemake.params.device,
    path=snakemake.input.checkpoint[0] if snakemake.input.checkpoint else None,
    task_path=snakemake.input.task,
    task_name=wc.task,
    corpus_path=snakemake.input.corpus,
    eval_cfg=snakemake.params.eval,
    learning_rate=float(wc.lr),
    lambda_reg=float(wc.lam),
    seed=int(wc.seed),
    study=snakemake.config["study"],
    state_dir=snakemake.params.state,
    bench_cfg=snakemake.params.bench,
    gpu=snakemake.config.get("gpu"),  # the planner's micro-batch on CUDA (changes no number)
    token_cache=study_path(snakemake.config["study"], TOKEN_CACHE),  # the task's tokens, shared by jobs
    # the judged metric (alpaca_eval): responses to the instruction set from the model in memory
    generation={
        "instructions": snakemake.input.instructions,
        "config": snakemake.params.generation,
        "output": snakemake.output.generations,
    }
    if "generations" in snakemake.output.keys()
    else None,
)
ranks = int(snakemake.resources.get("ranks", 1))
if ranks > 1:
    job_file = Path(snakemake.params.state) / "job.json"
    run_on_ranks(finetune_job.MODULE, job, ranks, job_file, snakemake.threads)
else:
    set_threads(snakemake.threads)
    # Appendix D: the loss along θ_ft − θ_pre, once every row is computed (None: the stage is off)
    line = FinetuneLine(
        snakemake.params.curv,
        snakemake.input.corpus,
        snakemake.params.eval,
        dict(
            **spec.row_fields(snakemake.config["study"]),
            task=wc.task,
            learning_rate=float(wc.lr),
            lambda_reg=float(wc.lam),
            seed=int(wc.seed),
        ),
    )
    rows = finetune_job.run(job, pick_device(snakemake.params.device), after=line)
    finetune_job.write_outputs(job, rows, line.rows)
