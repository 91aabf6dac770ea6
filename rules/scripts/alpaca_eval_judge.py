"""Rule alpaca_eval_judge: every model of one (checkpoint, task) judged against the reference run."""

from pipeline.io import write_parquet
from pipeline.judge.stage import judge_models
from pipeline.runtime import pick_device, set_threads, setup_logging
from pipeline.tables import write_metrics

setup_logging(snakemake.log[0])
set_threads(snakemake.threads)
inp = snakemake.input
annotations, rows = judge_models(
    reference=inp.reference[0],
    models=[*inp.runs, *inp.base],
    params=snakemake.params.judge,
    cache_path=snakemake.params.cache,
    task=snakemake.wildcards.task,
    device=pick_device(snakemake.params.device),
)
write_parquet(snakemake.output.annotations, annotations)
write_metrics(snakemake.output.metrics, rows)
