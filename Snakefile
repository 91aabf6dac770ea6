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
include: "rules/finetune.smk"
include: "rules/analysis.smk"
include: "rules/theory.smk"


rule all:
    default_target: True
    input:
        all_outputs(),


# Cluster runs: profile placeholders and GPU requests are checked before any job is submitted.
onstart:
    check_cluster_jobs(workflow.dag.needrun_jobs(), getattr(workflow.executor_plugin, "name", None))
