# The pre-training sweep: one run per (model preset, pre-training seed, token budget), cosine to zero
# at the budget; or, with pretrain.schedule: wsd, one stable run per (preset, seed) cut at the
# budgets' branch steps (rule pretrain_stable) and each budget's decay from there (rule pretrain);
# with pretrain.stable_twins, each budget's undecayed twin too (rule pretrain_stable_twin). Code: pipeline/train/pretrain.py (train/ runs pre-training and fine-tuning alike); the WSD DAG:
# pipeline/workflow/pretrain_sweep.py.


rule pretrain:
    input:
        unpack(wsd_decay_input),
        tokens=pretrain_tokens(),
        tokenizer=study_path(layout.TOKENIZER),
    output:
        directory(study_path(layout.PRETRAIN_RUN)),
    log:
        study_path("logs/pretrain/{model}-{budget}-s{pretrain_seed}.log"),
    benchmark:
        study_path("benchmarks/pretrain/{model}-{budget}-s{pretrain_seed}.tsv")
    # coarse to fine (pipeline/workflow/priority.py): the longest budget first (the critical path),
    # then the shortest and the middle; every job on a budget shares its priority
    priority: budget_priority
    conda:
        "../envs/overtrain.yaml"
    threads: config["pretrain"]["threads"]
    resources:
        **pretrain_resources(lambda wc: pretrain_sweep.job_tokens(config, budget=int(wc.budget))),
    params:
        hp=pretrain_params(config),
        state=lambda wc: study_path(f"pretrain/.resume/{wc.model}-{wc.budget}-s{wc.pretrain_seed}"),
        allow_repeat=config["pretrain"]["allow_repeat"],
        device=DEVICE,
    script:
        "scripts/pretrain.py"


rule pretrain_stable:
    input:
        unpack(wsd_stable_input),
        tokens=pretrain_tokens(),
        tokenizer=study_path(layout.TOKENIZER),
    output:
        directory(study_path(layout.PRETRAIN_STABLE)),
    log:
        study_path("logs/pretrain/{model}-stable-step{step}-s{pretrain_seed}.log"),
    benchmark:
        study_path("benchmarks/pretrain/{model}-stable-step{step}-s{pretrain_seed}.tsv")
    priority: budget_priority
    conda:
        "../envs/overtrain.yaml"
    threads: config["pretrain"]["threads"]
    resources:
        **pretrain_resources(lambda wc: pretrain_sweep.job_tokens(config, stable_step=int(wc.step))),
    params:
        hp=pretrain_params(config),
        state=lambda wc: study_path(f"pretrain/.resume/{wc.model}-stable-step{wc.step}-s{wc.pretrain_seed}"),
        device=DEVICE,
    script:
        "scripts/pretrain_stable.py"


rule pretrain_stable_twin:
    input:
        unpack(wsd_twin_input),
        tokens=pretrain_tokens(),
        tokenizer=study_path(layout.TOKENIZER),
    output:
        directory(study_path(layout.PRETRAIN_STABLE_TWIN)),
    log:
        study_path("logs/pretrain/{model}-{budget}-s{pretrain_seed}-stable.log"),
    benchmark:
        study_path("benchmarks/pretrain/{model}-{budget}-s{pretrain_seed}-stable.tsv")
    priority: budget_priority
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **preset_resources("perturb") | {"gpu": 0},  # one model on the host, no training
    params:
        hp=pretrain_params(config),
        state=lambda wc: study_path(f"pretrain/.resume/{wc.model}-{wc.budget}-s{wc.pretrain_seed}-stable"),
        device="cpu",  # trains nothing: reads a state, writes a checkpoint
    script:
        "scripts/pretrain_stable_twin.py"
