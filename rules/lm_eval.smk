# The generalist benchmarks' figure (Section 2, Figure 2): the lm-eval suite's rows of the base models
# and their perturbations (rule evaluate, rules/evaluate.smk) and of the fine-tuned models.


rule benchmark_figures:
    input:
        unpack(benchmark_figure_inputs),
    output:
        **figure_outputs("benchmark_figures"),
    log:
        study_path("logs/benchmark_figures.log"),
    benchmark:
        study_path("benchmarks/benchmark_figures.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **fixed_resources(2000, 10),
    script:
        "scripts/benchmark_figures.py"
