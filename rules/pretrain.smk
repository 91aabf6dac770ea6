# The pre-training sweep: one run per (model preset, token budget), cosine to zero at the budget.
# Code: pipeline/train/pretrain.py (train/ runs pre-training and fine-tuning alike).


rule pretrain:
    input:
        tokens=study_path("data/train_tokens.npy"),
        tokenizer=study_path("tokenizer/tokenizer.json"),
    output:
        directory(study_path(layout.PRETRAIN_RUN)),
    log:
        study_path("logs/pretrain/{model}-{budget}.log"),
    benchmark:
        study_path("benchmarks/pretrain/{model}-{budget}.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: config["pretrain"]["threads"]
    resources:
        **preset_resources("pretrain"),
    params:
        hp=pretrain_params(config),
        state=lambda wc: study_path(f"pretrain/.resume/{wc.model}-{wc.budget}"),
        device=DEVICE,
    script:
        "scripts/pretrain.py"
