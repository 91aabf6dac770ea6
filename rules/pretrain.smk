# The pre-training sweep: one run per (model preset, pre-training seed, token budget), cosine to zero
# at the budget.
# Code: pipeline/train/pretrain.py (train/ runs pre-training and fine-tuning alike).


rule pretrain:
    input:
        tokens=study_path(layout.TRAIN_TOKENS),
        tokenizer=study_path(layout.TOKENIZER),
    output:
        directory(study_path(layout.PRETRAIN_RUN)),
    log:
        study_path("logs/pretrain/{model}-{budget}-s{pretrain_seed}.log"),
    benchmark:
        study_path("benchmarks/pretrain/{model}-{budget}-s{pretrain_seed}.tsv")
    # the sweep before the jobs of its first checkpoints: the longest budget is the critical path
    priority: 1
    conda:
        "../envs/overtrain.yaml"
    threads: config["pretrain"]["threads"]
    resources:
        **preset_resources("pretrain"),
    params:
        hp=pretrain_params(config),
        state=lambda wc: study_path(f"pretrain/.resume/{wc.model}-{wc.budget}-s{wc.pretrain_seed}"),
        allow_repeat=config["pretrain"]["allow_repeat"],
        device=DEVICE,
    script:
        "scripts/pretrain.py"
