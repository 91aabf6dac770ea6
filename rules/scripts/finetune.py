"""Rule finetune: one checkpoint fine-tuned on one task at one (lr, lambda, seed), evaluated in memory."""

from pipeline.models.checkpoints import CheckpointSpec
from pipeline.runtime import pick_device, set_threads, setup_logging
from pipeline.tables import write_metrics
from pipeline.train.config import FinetuneConfig, cadence
from pipeline.train.finetune import finetune_run

setup_logging(snakemake.log[0])
set_threads(snakemake.threads)
wc = snakemake.wildcards
# logging / resume-state cadence is read from the config, not params: changing it reruns nothing
cfg = FinetuneConfig(**snakemake.params.hp, **cadence(FinetuneConfig, snakemake.config["finetune"]))
rows = finetune_run(
    CheckpointSpec(**snakemake.params.spec),
    path=snakemake.input.checkpoint[0] if snakemake.input.checkpoint else None,
    task_path=snakemake.input.task,
    task_name=wc.task,
    corpus_path=snakemake.input.corpus,
    eval_cfg=snakemake.params.eval,
    cfg=cfg,
    learning_rate=float(wc.lr),
    lambda_reg=float(wc.lam),
    seed=int(wc.seed),
    study=snakemake.config["study"],
    state_dir=snakemake.params.state,
    device=pick_device(snakemake.params.device),
    bench_cfg=snakemake.params.bench,
)
write_metrics(snakemake.output[0], rows)
