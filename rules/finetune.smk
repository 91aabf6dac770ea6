# Fine-tuning sweep (Section 3.4): task tables and one job per (checkpoint, task, method, learning
# rate, lambda, seed); the base model's in-domain metrics come from rule evaluate. Grid values are
# wildcards; every other hyperparameter is in params, so a config change reruns exactly the jobs it
# touches.


rule task_data:
    input:
        task_package_files,
    output:
        study_path(layout.TASK_TABLE),
    log:
        study_path("logs/tasks/{task}.log"),
    benchmark:
        study_path("benchmarks/tasks/{task}.tsv")
    priority: priority.DATA
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **fixed_resources(4000, 30),
    params:
        cfg=task_config,
    script:
        "scripts/task_data.py"


rule finetune:
    input:
        **generation_inputs(),
        checkpoint=checkpoint_dir,
        task=study_path(layout.TASK_TABLE),
        corpus=study_path("data/corpus.parquet"),
    output:
        **generation_outputs(),
        metrics=study_path(layout.FINETUNE_PART),
        line=study_path(layout.FINETUNE_LINE_PART),
    log:
        study_path("logs/finetune/{checkpoint}/{task}/{method}/lr{lr}_lam{lam}_seed{seed}.log"),
    benchmark:
        study_path(layout.FINETUNE_BENCHMARK)
    wildcard_constraints:
        task=TEXT_TASK,
    priority: budget_priority
    conda:
        "../envs/overtrain.yaml"
    threads: config["finetune"]["threads"]
    resources:
        **finetune_resources(),
    params:
        **generation_rule_params(),
        spec=checkpoint_spec,
        hp=finetune_method_params,
        task=text_task_params,
        eval=eval_config(config),
        token_cache=study_path(layout.TOKEN_CACHE),
        bench=benchmark_params(config),
        curv=curvature_finetune_params(config),
        state=study_path("finetune/.resume/{checkpoint}/{task}/{method}/lr{lr}_lam{lam}_seed{seed}"),
        device=DEVICE,
    script:
        "scripts/finetune.py"


# finetune.grid_per_job: every rate of the grid for one (checkpoint, task, method, lambda, seed) in
# one job, the process's start-up paid once (CPU toy studies: docs/benchmarks.md); the seeds that
# run at the tuned rate only stay one job per run (rule finetune).
if grid_jobs(config):

    ruleorder: finetune_grid > finetune

    use rule finetune as finetune_grid with:
        output:
            metrics=targets.grid_job_paths(config, layout.FINETUNE_PART),
            line=targets.grid_job_paths(config, layout.FINETUNE_LINE_PART),
        log:
            study_path("logs/finetune/{checkpoint}/{task}/{method}/grid_lam{lam}_seed{seed}.log"),
        benchmark:
            study_path("benchmarks/finetune/{checkpoint}/{task}/{method}/grid_lam{lam}_seed{seed}.tsv")
        wildcard_constraints:
            task=TEXT_TASK,
            seed="|".join(map(str, grid_job_seeds(config))),
        resources:
            **finetune_resources(runs=len(targets.grid_job_rates(config))),
        params:
            spec=checkpoint_spec,
            hp=finetune_method_params,
            task=text_task_params,
            eval=eval_config(config),
            token_cache=study_path(layout.TOKEN_CACHE),
            bench=benchmark_params(config),
            curv=curvature_finetune_params(config),
            state=study_path("finetune/.resume/{checkpoint}/{task}/{method}/grid_lam{lam}_seed{seed}"),
            device=DEVICE,
            learning_rates=targets.grid_job_rates(config),


rule finetune_analysis:
    input:
        study_path(layout.METRICS),
    output:
        tuned=study_path(layout.FINETUNE_TUNED),
        optimal_lr=study_path("analysis/finetune_optimal_lr.parquet"),
    log:
        study_path("logs/finetune_analysis.log"),
    benchmark:
        study_path("benchmarks/finetune_analysis.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **fixed_resources(2000, 10),
    params:
        select=config["finetune"]["select_metric"],
    script:
        "scripts/finetune_analysis.py"


rule finetune_figures:
    input:
        metrics=study_path(layout.METRICS),
        deltas=study_path("analysis/deltas.parquet"),
        inflection=study_path(layout.INFLECTION),
        tuned=study_path(layout.FINETUNE_TUNED),
        optimal_lr=study_path("analysis/finetune_optimal_lr.parquet"),
        reference=reference_ppl,
    output:
        **figure_outputs("finetune_figures"),
    log:
        study_path("logs/finetune_figures.log"),
    benchmark:
        study_path("benchmarks/finetune_figures.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **fixed_resources(2000, 10),
    params:
        max_pretrain_ppl=config["analysis"]["finetune_max_pretrain_ppl"],
        legend=FIGURE_LEGEND,
    script:
        "scripts/finetune_figures.py"


# The adaptive learning-rate search (finetune.learning_rates: {search: ...}, or a grid with
# seeds_at: tuned; docs/lr-search.md): per (checkpoint, task, λ) a chain of rounds; each round is a
# checkpoint, so the workflow reads the next round's learning rates from its JSON and schedules
# those fine-tuning runs. Rounds and their gathering read a few small tables: on a cluster they run
# on the submitting node, without a queue wait between rounds.
localrules:
    lr_search_round,
    lr_search_setting,


checkpoint lr_search_round:
    input:
        unpack(lr_search_round_inputs),
    output:
        study_path(layout.LR_SEARCH_ROUND),
    log:
        study_path("logs/finetune/{checkpoint}/{task}/{method}/lr_search_lam{lam}_round{round}.log"),
    benchmark:
        study_path("benchmarks/finetune/{checkpoint}/{task}/{method}/lr_search_lam{lam}_round{round}.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **fixed_resources(1000, 5),
    params:
        search=lr_search_params(config),
    script:
        "scripts/lr_search_round.py"


rule lr_search_setting:
    input:
        unpack(lr_search_setting_inputs),
    output:
        final=study_path(layout.LR_SEARCH_FINAL),
        runs=study_path(layout.LR_SEARCH_RUNS),
        lines=study_path(layout.LR_SEARCH_LINES),
    log:
        study_path("logs/finetune/{checkpoint}/{task}/{method}/lr_search_lam{lam}.log"),
    benchmark:
        study_path("benchmarks/finetune/{checkpoint}/{task}/{method}/lr_search_lam{lam}.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **fixed_resources(2000, 5),
    script:
        "scripts/lr_search_setting.py"


rule lr_search:
    input:
        targets.search_finals(config, MAIN_CHECKPOINTS),
    output:
        path=study_path(layout.LR_SEARCH),
        cost=study_path(layout.LR_SEARCH_COST),
    log:
        study_path("logs/lr_search.log"),
    benchmark:
        study_path("benchmarks/lr_search.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **fixed_resources(2000, 10),
    params:
        search=lr_search_params(config),
        seeds=config["finetune"]["seeds"],
    script:
        "scripts/lr_search.py"
