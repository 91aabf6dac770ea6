# The judged instruction-following metric (Appendix B.3, docs/alpaca-eval.md): the instruction set,
# each checkpoint's responses before fine-tuning (fine-tuning jobs write their own, from the model
# in memory), and per (checkpoint, task) one judge job: every model against the reference run.
# Judging is its own rule with the judge's own resources (alpaca_eval.resources), so a changed judge
# reruns judging only; the SLURM profile packs several judge jobs in one submission (its `judge`
# group and group-components). The stage is named for the metric (AlpacaEval's win rate); its code is
# pipeline/judge/, named for the work: a judge comparing two responses, whichever judge it is.


rule alpaca_eval_instructions:
    input:
        alpaca_eval_instruction_inputs,
    output:
        study_path(layout.ALPACA_EVAL_INSTRUCTIONS),
    log:
        study_path("logs/alpaca_eval/instructions.log"),
    benchmark:
        study_path("benchmarks/alpaca_eval/instructions.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **fixed_resources(2000, 10),
    params:
        src=alpaca_eval_instruction_params(config),
    script:
        "scripts/alpaca_eval_instructions.py"


rule alpaca_eval_base:
    input:
        checkpoint=checkpoint_dir,
        instructions=study_path(layout.ALPACA_EVAL_INSTRUCTIONS),
    output:
        study_path(layout.BASE_GENERATIONS),
    log:
        study_path("logs/alpaca_eval/base/{checkpoint}.log"),
    benchmark:
        study_path("benchmarks/alpaca_eval/base/{checkpoint}.tsv")
    priority: budget_priority
    conda:
        "../envs/overtrain.yaml"
    threads: config["finetune"]["threads"]
    resources:
        **preset_resources("perturb"),
    params:
        spec=checkpoint_spec,
        generation=generation_params(config),
        device=DEVICE,
    script:
        "scripts/alpaca_eval_base.py"


rule alpaca_eval_judge:
    input:
        unpack(alpaca_eval_judge_inputs),
    output:
        annotations=study_path(layout.JUDGE_ANNOTATIONS),
        metrics=study_path(layout.JUDGE_PART),
    log:
        study_path("logs/alpaca_eval/{judge}/{checkpoint}/{task}.log"),
    benchmark:
        study_path("benchmarks/alpaca_eval/{judge}/{checkpoint}/{task}.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: alpaca_eval_resources()["threads"]
    resources:
        **alpaca_eval_resources()["resources"],
    params:
        judge=judge_params(config),
        cache=study_path(layout.JUDGE_CACHE),
        device=DEVICE,
    script:
        "scripts/alpaca_eval_judge.py"


rule alpaca_eval_figures:
    input:
        metrics=study_path(layout.METRICS),
        tuned=study_path(layout.FINETUNE_TUNED),
    output:
        **figure_outputs("alpaca_eval_figures"),
    log:
        study_path("logs/alpaca_eval_figures.log"),
    benchmark:
        study_path("benchmarks/alpaca_eval_figures.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **fixed_resources(2000, 10),
    params:
        reference=alpaca_eval_reference(config),
    script:
        "scripts/alpaca_eval_figures.py"
