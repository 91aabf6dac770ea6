# Data: the pre-training corpus (split by document), its tokenizer, and training tokens. Their jobs
# come first (priority.DATA): every budget is made from them. The tokenizer's jobs run on one thread
# (its Rust pool sized by pipeline.runtime.set_tokenizer_threads): on 2 cores a 2-thread job waited
# for a 1-thread theory job to end, one core idle (docs/benchmarks.md, "make study").


rule corpus:
    input:
        corpus_packages,
    output:
        study_path(layout.CORPUS),
    log:
        study_path("logs/corpus.log"),
    benchmark:
        study_path("benchmarks/corpus.tsv")
    priority: priority.DATA
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **fixed_resources(4000, 30),
    params:
        corpus=config["corpus"],
    script:
        "scripts/corpus.py"


rule tokenizer:
    input:
        corpus=study_path(layout.CORPUS),
        tasks=tokenizer_task_tables,
    output:
        study_path(layout.TOKENIZER),
    log:
        study_path("logs/tokenizer.log"),
    benchmark:
        study_path("benchmarks/tokenizer.tsv")
    priority: priority.DATA
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **fixed_resources(4000, 30),
    params:
        tokenizer=config["tokenizer"],
    script:
        "scripts/tokenizer.py"


rule tokenize_train:
    input:
        corpus=study_path(layout.CORPUS),
        tokenizer=study_path(layout.TOKENIZER),
    output:
        tokens=study_path(layout.TRAIN_TOKENS),
        info=study_path(layout.TRAIN_TOKENS_INFO),
        manifest=study_path(layout.CORPUS_MANIFEST),
    log:
        study_path("logs/tokenize_train.log"),
    benchmark:
        study_path("benchmarks/tokenize_train.tsv")
    priority: priority.DATA
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **fixed_resources(4000, 30),
    params:
        made_with={"corpus": config["corpus"], "tokenizer": config["tokenizer"]},
    script:
        "scripts/tokenize_train.py"


# pretrain.text_files: one job per text file, its OLMo-format token shard (pipeline/data/shard_tokenize.py)
rule tokenize_shard:
    input:
        text=text_file,
        tokenizer=study_path(layout.TOKENIZER),
    output:
        tokens=study_path(layout.TOKEN_SHARD),
        index=study_path(layout.TOKEN_SHARD_INDEX),
        info=study_path(layout.TOKEN_SHARD_INFO),
    log:
        study_path("logs/tokenize_shard/{shard}.log"),
    benchmark:
        study_path("benchmarks/tokenize_shard/{shard}.tsv")
    priority: priority.DATA
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **fixed_resources(2000, 60),
    params:
        source=lambda wc: TEXT_FILES[wc.shard],
        field=config["pretrain"]["text_files"]["text_field"] if TEXT_FILES else None,
        batch=config["pretrain"]["text_files"]["batch_documents"] if TEXT_FILES else None,
    script:
        "scripts/tokenize_shard.py"


# Every fine-tuning text task's validation / test tokens against the training split: the share
# whose id pre-training never predicts (pipeline/data/manifest.py).
rule token_coverage:
    input:
        tokens=pretrain_tokens(),
        tokenizer=study_path(layout.TOKENIZER),
        tasks=coverage_task_tables,
    output:
        study_path(layout.TOKEN_COVERAGE),
    log:
        study_path("logs/token_coverage.log"),
    benchmark:
        study_path("benchmarks/token_coverage.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **cluster.scan_resources(4000, 30, mb_per_minute=6000),
    script:
        "scripts/token_coverage.py"


# The held-out split scored by a unigram model of the training targets and by a uniform guess: the
# reference lines of the pre-training-perplexity panels and the U claims' exclusion threshold
# (pipeline/data/manifest.py).
rule reference_ppl:
    input:
        tokens=pretrain_tokens(),
        tokenizer=study_path(layout.TOKENIZER),
        corpus=study_path(layout.CORPUS),
    output:
        study_path(layout.REFERENCE_PPL),
    log:
        study_path("logs/reference_ppl.log"),
    benchmark:
        study_path("benchmarks/reference_ppl.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **cluster.scan_resources(4000, 30, mb_per_minute=6000),
    params:
        split=config["eval"]["split"],
        max_tokens=config["eval"]["max_tokens"],
    script:
        "scripts/reference_ppl.py"
