# Generalist benchmarks through lm-evaluation-harness (Section 2, Figure 2): one job per checkpoint
# scores its base model and its whole gamma x seed Gaussian grid on every task of eval.benchmarks
# (the checkpoint is loaded once; finished cells are cached). Fine-tuned models are scored inside
# their fine-tuning job (rules/finetune.smk), as their weights are never written to disk. Code:
# pipeline/sweeps/benchmark_grid.py over pipeline/evaluate/benchmarks.py (lm-eval's name for the stage).


rule lm_eval:
    input:
        checkpoint=checkpoint_dir,
    output:
        study_path(layout.LM_EVAL_PART),
    log:
        study_path("logs/lm_eval/{checkpoint}.log"),
    benchmark:
        study_path("benchmarks/lm_eval/{checkpoint}.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: config["perturb"]["threads"]
    resources:
        **preset_resources("perturb"),
    params:
        spec=checkpoint_spec,
        gammas=config["perturb"]["gammas"],
        seeds=config["perturb"]["seeds"],
        bench=bench_config(config),
        cache=lambda wc: study_path(f"lm_eval/.cells/{wc.checkpoint}"),
        device=DEVICE,
    script:
        "scripts/lm_eval.py"


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
