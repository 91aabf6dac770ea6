# Aggregation into one tidy metrics.parquet, analysis tables and figures.


rule metrics:
    input:
        metric_parts(),
    output:
        study_path("metrics.parquet"),
    log:
        study_path("logs/metrics.log"),
    benchmark:
        study_path("benchmarks/metrics.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **fixed_resources(2000, 10),
    params:
        config=provenance_config(),
        repo=workflow.basedir,
    script:
        "scripts/metrics.py"


rule analysis:
    input:
        study_path("metrics.parquet"),
    output:
        deltas=study_path("analysis/deltas.parquet"),
        sensitivity=study_path("analysis/sensitivity.parquet"),
        inflection=study_path("analysis/inflection.parquet"),
    log:
        study_path("logs/analysis.log"),
    benchmark:
        study_path("benchmarks/analysis.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **fixed_resources(2000, 10),
    params:
        bootstrap=config["analysis"]["bootstrap"],
        seed=config["analysis"]["seed"],
        ci=config["analysis"]["ci"],
    script:
        "scripts/analysis.py"


rule figures:
    input:
        metrics=study_path("metrics.parquet"),
        deltas=study_path("analysis/deltas.parquet"),
        inflection=study_path("analysis/inflection.parquet"),
    output:
        sensitivity=report(
            expand(study_path("figures/progressive_sensitivity.{ext}"), ext=FORMATS),
            caption="../report/progressive_sensitivity.rst",
            category="Gaussian perturbations",
        ),
        inflection=report(
            expand(study_path("figures/inflection_point.{ext}"), ext=FORMATS),
            caption="../report/inflection_point.rst",
            category="Gaussian perturbations",
        ),
    log:
        study_path("logs/figures.log"),
    benchmark:
        study_path("benchmarks/figures.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **fixed_resources(2000, 10),
    script:
        "scripts/figures.py"


rule loss_curves:
    input:
        pretrain_dirs(),
    output:
        report(
            expand(study_path("figures/pretrain_loss.{ext}"), ext=FORMATS),
            caption="../report/pretrain_loss.rst",
            category="Pre-training",
        ),
    log:
        study_path("logs/loss_curves.log"),
    benchmark:
        study_path("benchmarks/loss_curves.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **fixed_resources(2000, 10),
    script:
        "scripts/loss_curves.py"
