# Aggregation into one tidy metrics.parquet, analysis tables and figures.


rule metrics:
    input:
        targets.metric_parts(config, MAIN_CHECKPOINTS),
    output:
        study_path(layout.METRICS),
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
        config=provenance_config(config),
        repo=workflow.basedir,
    script:
        "scripts/metrics.py"


# pretrain.stable_twins: the twins' rows apart, so every table and figure above holds the study's own
# runs and the schedule claims read the twins beside them (docs/findings.md)
rule stable_twin_metrics:
    input:
        targets.metric_parts(config, targets.stable_twins(CHECKPOINTS)),
    output:
        study_path(layout.STABLE_TWIN_METRICS),
    log:
        study_path("logs/stable_twin_metrics.log"),
    benchmark:
        study_path("benchmarks/stable_twin_metrics.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **fixed_resources(2000, 10),
    params:
        config=provenance_config(config),
        repo=workflow.basedir,
    script:
        "scripts/metrics.py"


rule analysis:
    input:
        study_path(layout.METRICS),
    output:
        deltas=study_path("analysis/deltas.parquet"),
        sensitivity=study_path("analysis/sensitivity.parquet"),
        inflection=study_path(layout.INFLECTION),
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
        ci=config["analysis"]["ci"],
    script:
        "scripts/analysis.py"


rule figures:
    input:
        metrics=study_path(layout.METRICS),
        deltas=study_path("analysis/deltas.parquet"),
        inflection=study_path(layout.INFLECTION),
        reference=reference_ppl,
    output:
        **figure_outputs("figures"),
    log:
        study_path("logs/figures.log"),
    benchmark:
        study_path("benchmarks/figures.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **fixed_resources(2000, 10),
    params:
        legend=FIGURE_LEGEND,
    script:
        "scripts/figures.py"


rule loss_curves:
    input:
        targets.pretrain_dirs(config, CHECKPOINTS),
    output:
        **figure_outputs("loss_curves"),
        runs=study_path(layout.PRETRAIN_RUNS),
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


# The study's checkpoints as planned (series, budget, coarse-to-fine priority), from the config alone
# and before any other job: a partial sweep's findings say "n of N budgets" against it (`make docs`).
localrules:
    sweep_plan,


rule sweep_plan:
    output:
        study_path(layout.SWEEP_PLAN),
    log:
        study_path("logs/sweep_plan.log"),
    benchmark:
        study_path("benchmarks/sweep_plan.tsv")
    priority: priority.FIRST
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **fixed_resources(1000, 5),
    params:
        rows=targets.sweep_plan(CHECKPOINTS),
    script:
        "scripts/sweep_plan.py"


# Every registered claim (pipeline/analysis/claims.py) on this study's tables, with its verdict.
rule findings:
    input:
        findings_inputs,
    output:
        study_path(layout.FINDINGS),
    log:
        study_path("logs/findings.log"),
    benchmark:
        study_path("benchmarks/findings.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **fixed_resources(2000, 10),
    script:
        "scripts/findings.py"
