# Every evaluation of one checkpoint in one job, on one model load (pipeline/train/checkpoint_eval.py):
# the held-out perplexity of its base model and whole gamma x seed Gaussian grid (pipeline/sweeps/
# perturb_grid.py), the lm-eval suite on the same grid when eval.benchmarks is on (Section 2, Figure 2;
# pipeline/sweeps/benchmark_grid.py), and the base model's in-domain metrics on each text task (the
# fine-tuning's baseline). Each evaluation writes its own table and caches its finished cells, so a
# config change that touches one reruns the job and the others come from their caches. Fine-tuned
# models are scored inside their fine-tuning job (rules/finetune.smk): their weights are never written.


rule evaluate:
    input:
        unpack(evaluate_inputs),
    output:
        **targets.evaluate_outputs(config),
    log:
        study_path("logs/evaluate/{checkpoint}.log"),
    benchmark:
        study_path("benchmarks/evaluate/{checkpoint}.tsv")
    priority: budget_priority
    conda:
        "../envs/overtrain.yaml"
    threads: config["perturb"]["threads"]
    resources:
        **preset_resources("perturb"),
    params:
        spec=checkpoint_spec,
        gammas=config["perturb"]["gammas"],
        seeds=config["perturb"]["seeds"],
        eval=eval_config(config),
        bench=benchmark_params(config),
        tasks=targets.base_eval_tasks(config),
        task_hp=task_base_params(config),
        cache=lambda wc: study_path(f"perturb/.cells/{wc.checkpoint}"),
        bench_cache=lambda wc: study_path(f"lm_eval/.cells/{wc.checkpoint}"),
        device=DEVICE,
    script:
        "scripts/evaluate.py"
