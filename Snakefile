# overtrain: checkpoint-sweep studies of catastrophic overtraining.
# `snakemake --cores all` runs the study named in config.yaml (see README.md).
from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config.yaml"


validate(config, "config/schema.yaml")


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/pretrain.smk"
include: "rules/perturb.smk"
include: "rules/lm_eval.smk"
include: "rules/finetune.smk"
include: "rules/analysis.smk"
include: "rules/theory.smk"


rule all:
    default_target: True
    input:
        all_outputs(),


# Before any job starts: hub revisions exist (in the cache when offline); on a cluster, profile
# placeholders and GPU requests. (Snakemake keeps one onstart handler: both checks live here.)
onstart:
    check_hub_revisions(workflow.dag.needrun_jobs())
    check_cluster_jobs(workflow.dag.needrun_jobs(), getattr(workflow.executor_plugin, "name", None))
