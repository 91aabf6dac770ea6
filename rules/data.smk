# Data: the pre-training corpus (split by document), its tokenizer, and training tokens.


rule corpus:
    input:
        corpus_packages,
    output:
        study_path("data/corpus.parquet"),
    log:
        study_path("logs/corpus.log"),
    benchmark:
        study_path("benchmarks/corpus.tsv")
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
        corpus=study_path("data/corpus.parquet"),
        tasks=tokenizer_task_tables,
    output:
        study_path("tokenizer/tokenizer.json"),
    log:
        study_path("logs/tokenizer.log"),
    benchmark:
        study_path("benchmarks/tokenizer.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 2
    resources:
        **fixed_resources(4000, 30),
    params:
        tokenizer=config["tokenizer"],
    script:
        "scripts/tokenizer.py"


rule tokenize_train:
    input:
        corpus=study_path("data/corpus.parquet"),
        tokenizer=study_path("tokenizer/tokenizer.json"),
    output:
        study_path("data/train_tokens.npy"),
    log:
        study_path("logs/tokenize_train.log"),
    benchmark:
        study_path("benchmarks/tokenize_train.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 2
    resources:
        **fixed_resources(4000, 30),
    script:
        "scripts/tokenize_train.py"
