# How fine-tuning moves a checkpoint ("Linearization Explains Fine-Tuning in Large Language Models"
# across the sweep): the empirical NTK of each checkpoint on every task, loaded once (rule ntk,
# pipeline/curvature/ntk.py) and the stage's figures (pipeline/analysis/linearization_figures.py).
# The fine-tuning jobs write the other rows themselves: the linearization gap (lin_*), WiSE-FT
# (wise_*) and each method's runs (finetune.methods; rules/finetune.smk).


# The empirical NTK of each checkpoint on each fine-tuning task (curvature.ntk_examples > 0):
# its spectrum, kappa(K + sigma I), the kernel-ridge residual and Algorithm 2's per-layer quantities
# (pipeline/curvature/ntk.py). Metric rows, aggregated with the study's metrics.
rule ntk:
    input:
        unpack(ntk_task_tables),
        checkpoint=checkpoint_dir,
    output:
        study_path(layout.NTK_PART),
    log:
        study_path("logs/curvature/{checkpoint}/ntk.log"),
    benchmark:
        study_path("benchmarks/curvature/{checkpoint}/ntk.tsv")
    priority: budget_priority
    conda:
        "../envs/overtrain.yaml"
    threads: config["curvature"]["threads"]
    resources:
        **preset_resources("finetune"),
    params:
        spec=checkpoint_spec,
        ntk=ntk_params(config),
        device=DEVICE,
    script:
        "scripts/ntk.py"


rule linearization_figures:
    input:
        metrics=study_path(layout.METRICS),
        tuned=study_path(layout.FINETUNE_TUNED),
    output:
        **figure_outputs("linearization_figures"),
    log:
        study_path("logs/linearization_figures.log"),
    benchmark:
        study_path("benchmarks/linearization_figures.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **fixed_resources(2000, 10),
    script:
        "scripts/linearization_figures.py"
