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
include: "rules/perturb.smk"
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


# Before any job starts: hub revisions exist (in the cache when offline); on a cluster, profile
# placeholders and GPU requests; an endpoint judge answers; every fine-tuning method's LoRA targets
# and parameter patterns exist in each model. (Snakemake keeps one onstart handler: every check
# lives here.)
onstart:
    check_hub_revisions(workflow.dag.needrun_jobs())
    check_cluster_jobs(workflow.dag.needrun_jobs(), getattr(workflow.executor_plugin, "name", None))
    check_judge(workflow.dag.needrun_jobs())
    check_methods(workflow.dag.needrun_jobs())
