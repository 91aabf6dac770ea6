# Aggregation into one tidy metrics.parquet, analysis tables and figures.


rule metrics:
    input:
        metric_parts(),
    output:
        study_path("metrics.parquet"),
    params:
        config=provenance_config(),
        repo=workflow.basedir,
    log:
        study_path("logs/metrics.log"),
    benchmark:
        study_path("benchmarks/metrics.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    script:
        "scripts/metrics.py"


rule analysis:
    input:
        study_path("metrics.parquet"),
    output:
        deltas=study_path("analysis/deltas.parquet"),
        sensitivity=study_path("analysis/sensitivity.parquet"),
        inflection=study_path("analysis/inflection.parquet"),
    params:
        bootstrap=config["analysis"]["bootstrap"],
        seed=config["analysis"]["seed"],
        ci=config["analysis"]["ci"],
    log:
        study_path("logs/analysis.log"),
    benchmark:
        study_path("benchmarks/analysis.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    script:
        "scripts/analysis.py"


rule figures:
    input:
        metrics=study_path("metrics.parquet"),
        deltas=study_path("analysis/deltas.parquet"),
        inflection=study_path("analysis/inflection.parquet"),
    output:
        sensitivity=expand(study_path("figures/progressive_sensitivity.{ext}"), ext=FORMATS),
        inflection=expand(study_path("figures/inflection_point.{ext}"), ext=FORMATS),
    log:
        study_path("logs/figures.log"),
    benchmark:
        study_path("benchmarks/figures.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    script:
        "scripts/figures.py"


rule loss_curves:
    input:
        pretrain_dirs(),
    output:
        expand(study_path("figures/pretrain_loss.{ext}"), ext=FORMATS),
    log:
        study_path("logs/loss_curves.log"),
    benchmark:
        study_path("benchmarks/loss_curves.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    script:
        "scripts/loss_curves.py"
