# overtrain: checkpoint-sweep studies of catastrophic overtraining.
# `snakemake --cores all` runs the study named in config.yaml (see README.md).
from pathlib import Path

from snakemake.utils import min_version

from pipeline.workflow.schema import load_schema, validate_config

min_version("9.0")


configfile: "config.yaml"


# schema errors as one or two lines each (key, given, expected); then the schema's defaults
validate_config(config, load_schema(Path(workflow.basedir, "config", "schema.yaml")))


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/pretrain.smk"
include: "rules/evaluate.smk"
include: "rules/lm_eval.smk"
include: "rules/finetune.smk"
include: "rules/alpaca_eval.smk"
include: "rules/curvature.smk"
include: "rules/linearization.smk"
include: "rules/multimodal.smk"
include: "rules/analysis.smk"
include: "rules/theory.smk"


rule all:
    default_target: True
    input:
        targets.all_outputs(config, CHECKPOINTS),


# Before any job starts, what needs the network or the jobs to run (every other check runs at parse
# time, dry run included): hub revisions exist (in the cache when offline) and, on the hub checkpoints
# not in the cache, every fine-tuning method's LoRA targets and parameter patterns; on a cluster,
# profile placeholders and GPU requests; an endpoint judge answers. (Snakemake keeps one onstart
# handler: every such check lives here.) Then a local run's warm-start server (config warm_start).
onstart:
    check_hub_revisions(workflow.dag.needrun_jobs())
    check_hub_methods()
    check_cluster_jobs(workflow.dag.needrun_jobs(), getattr(workflow.executor_plugin, "name", None))
    check_judge(workflow.dag.needrun_jobs())
    start_warm_server(getattr(workflow.executor_plugin, "name", None))


onsuccess:
    stop_warm_server()


onerror:
    stop_warm_server()
