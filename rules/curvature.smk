# Appendix D: one job per checkpoint computes its Gaussian lines (loss vs the quadratic prediction)
# and its sharpness (pipeline/curvature/stage.py); the fine-tuning jobs write their lines along
# theta_ft - theta_pre themselves (rules/finetune.smk). All lines are gathered into one table for
# the figures.


rule curvature:
    input:
        checkpoint=checkpoint_dir,
        corpus=study_path("data/corpus.parquet"),
    output:
        lines=study_path(layout.CURVATURE_LINE_PART),
        sharpness=study_path(layout.CURVATURE_SHARPNESS_PART),
    log:
        study_path("logs/curvature/{checkpoint}.log"),
    benchmark:
        study_path("benchmarks/curvature/{checkpoint}.tsv")
    priority: budget_priority
    conda:
        "../envs/overtrain.yaml"
    threads: config["curvature"]["threads"]
    resources:
        **preset_resources("finetune"),
    params:
        spec=checkpoint_spec,
        curv=curvature_params(config),
        eval=curvature_eval(config),
        device=DEVICE,
    script:
        "scripts/curvature.py"


rule curvature_lines:
    input:
        targets.curvature_line_parts(config, MAIN_CHECKPOINTS),
    output:
        lines=study_path(layout.CURVATURE_LINES),
        summary=study_path(layout.CURVATURE_SUMMARY),
    log:
        study_path("logs/curvature_lines.log"),
    benchmark:
        study_path("benchmarks/curvature_lines.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **fixed_resources(2000, 10),
    script:
        "scripts/curvature_lines.py"


rule curvature_figures:
    input:
        lines=study_path(layout.CURVATURE_LINES),
        metrics=study_path(layout.METRICS),
    output:
        **figure_outputs("curvature_figures"),
    log:
        study_path("logs/curvature_figures.log"),
    benchmark:
        study_path("benchmarks/curvature_figures.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **fixed_resources(2000, 10),
    params:
        gammas=sorted(config["perturb"]["gammas"]),
    script:
        "scripts/curvature_figures.py"
