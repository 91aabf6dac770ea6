"""Rule finetune: one checkpoint fine-tuned on one task at one (lr, lambda, seed), evaluated in
memory; in this process, or on `resources.ranks` processes (FSDP2 under torchrun) when > 1."""

from dataclasses import asdict
from pathlib import Path

from pipeline.layout import TOKEN_CACHE, VLM_HF, study_path
from pipeline.models.checkpoints import CheckpointSpec
from pipeline.runtime import setup_logging
from pipeline.train.config import FinetuneConfig, execution
from pipeline.train.finetune_job import FinetuneJob, run_in_process, run_on_ranks
from pipeline.workflow.multimodal import vlm_config

setup_logging(snakemake.log[0])
wc = snakemake.wildcards
# a LLaVA task's stage 2 (rules/multimodal.smk): its data, tower and stage-1 projector; how it
# executes (the evaluation batch, saving the model) comes from the config
vlm = None
if "projector" in snakemake.input.keys():
    settings = vlm_config(snakemake.config)
    hf_dir = study_path(snakemake.config["study"], VLM_HF, **dict(wc.items())) if settings.save_hf else None
    vlm = {
        "data": snakemake.input.data,
        "tower": snakemake.input.tower,
        "projector": snakemake.input.projector,
        "config": asdict(settings),
        "hf_dir": hf_dir,
    }
# how the run executes (logging / resume cadence, activation checkpointing, the collective timeout)
# is read from the config, not params: changing it reruns nothing
cfg = FinetuneConfig(**snakemake.params.hp, **execution(FinetuneConfig, snakemake.config["finetune"]))
job = FinetuneJob(
    spec=CheckpointSpec(**snakemake.params.spec),
    cfg=cfg,
    task_name=wc.task,
    task_path=snakemake.input.data if vlm else snakemake.input.task,
    corpus_path=snakemake.input.corpus,
    eval_cfg=snakemake.params.eval,
    learning_rate=float(wc.lr),
    lambda_reg=float(wc.lam),
    seed=int(wc.seed),
    method=wc.method,
    study=snakemake.config["study"],
    state_dir=snakemake.params.state,
    metrics_path=snakemake.output.metrics,
    line_path=snakemake.output.line,
    path=snakemake.input.checkpoint[0] if snakemake.input.checkpoint else None,
    device=snakemake.params.device,
    bench_cfg=snakemake.params.bench,
    gpu=snakemake.config["gpu"],  # the planner's micro-batch on CUDA (changes no number)
    token_cache=study_path(snakemake.config["study"], TOKEN_CACHE),  # the task's tokens, shared by jobs
    # the judged metric (alpaca_eval): responses to the instruction set from the model in memory
    generation={
        "instructions": snakemake.input.instructions,
        "config": snakemake.params.generation,
        "output": snakemake.output.generations,
    }
    if "generations" in snakemake.output.keys()
    else None,
    curvature=snakemake.params.curv,  # Appendix D: the loss along θ_ft − θ_pre (None: the stage is off)
    vlm=vlm,
    threads=snakemake.threads,
)
ranks = int(snakemake.resources.get("ranks", 1))
if ranks > 1:
    run_on_ranks(job, ranks, Path(snakemake.params.state) / "job.json")
else:
    run_in_process(job)
