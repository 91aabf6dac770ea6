# overtrain: checkpoint-sweep studies of catastrophic overtraining.
# `snakemake --cores all` runs the study named in config.yaml (see README.md).
from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config.yaml"


validate(config, "config/schema.yaml")


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/pretrain.smk"
include: "rules/perturb.smk"
include: "rules/finetune.smk"
include: "rules/analysis.smk"
include: "rules/theory.smk"


rule all:
    input:
        all_outputs(),
    default_target: True
