"""Rule finetune: one checkpoint fine-tuned on one task at one (lr, lambda, seed), evaluated in memory."""

from pipeline.curvature.lines import write_lines
from pipeline.curvature.stage import FinetuneLine
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
spec = CheckpointSpec(**snakemake.params.spec)
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
rows = finetune_run(
    spec,
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
    after=line,
)
write_metrics(snakemake.output.metrics, rows)
write_lines(snakemake.output.line, line.rows)  # empty when the curvature stage is off
