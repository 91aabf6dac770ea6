"""The results layout: where each output of a study lives, written once.

Patterns are relative to `results/<study>/`, with Snakemake wildcards in braces; the rules use
them as outputs and the workflow layer (targets, checkpoint sources) formats them into the
concrete paths it asks for, so the two cannot drift apart.
"""

from __future__ import annotations

RESULTS = "results"

# the pre-training data: documents with their split, the training split as one token stream and
# its record (size, the corpus and tokenizer settings it was made with: the start-up budget check),
# the mix per source, and each fine-tuning task's tokens that pre-training never predicts
CORPUS = "data/corpus.parquet"
TOKENIZER = "tokenizer/tokenizer.json"
TRAIN_TOKENS = "data/train_tokens.npy"
TRAIN_TOKENS_INFO = "data/train_tokens.json"
CORPUS_MANIFEST = "data/corpus_manifest.parquet"
# pretrain.text_files: each file's OLMo-format token shard, its documents' start offsets and its record
# (pipeline/data/shard_tokenize.py)
TOKEN_SHARD = "data/shards/{shard}.bin"
TOKEN_SHARD_INDEX = "data/shards/{shard}.idx"
TOKEN_SHARD_INFO = "data/shards/{shard}.json"
TOKEN_COVERAGE = "data/token_coverage.parquet"
# the study's checkpoints as planned (budget, series, coarse-to-fine priority), written before any
# other job: what a partial sweep's findings count their budgets against ("n of N budgets")
SWEEP_PLAN = "data/sweep_plan.parquet"
REFERENCE_PPL = "data/reference_ppl.parquet"  # the held-out split under a unigram model and a uniform guess
# one run of the sweep: a save_pretrained dir (+ init_std.json, loss curve, summary.json)
PRETRAIN_RUN = "pretrain/{model}/seed{pretrain_seed}/{budget}"
# WSD (pretrain.schedule): the stable run's training state at a branch step, where a budget's decay
# starts (pipeline/workflow/pretrain_sweep.py)
PRETRAIN_STABLE = "pretrain/{model}/seed{pretrain_seed}/stable/step{step}"
# WSD with pretrain.stable_twins: the stable run's weights at a budget's tokens, as a checkpoint (the
# budget's undecayed twin)
PRETRAIN_STABLE_TWIN = "pretrain/{model}/seed{pretrain_seed}/stable/{budget}"
PERTURB_PART = "perturb/{checkpoint}.parquet"
LM_EVAL_PART = "lm_eval/{checkpoint}.parquet"
TASK_TABLE = "data/tasks/{task}.parquet"
TASK_BASE_PART = "finetune/{checkpoint}/{task}/base.parquet"
# one fine-tuning run: checkpoint, task, method (finetune.methods), learning rate, λ, seed
FINETUNE_PART = "finetune/{checkpoint}/{task}/{method}/lr{lr}_lam{lam}_seed{seed}.parquet"
# the fine-tuning job's loss along θ_ft − θ_pre (curvature stage; empty when it is off)
FINETUNE_LINE_PART = "finetune/{checkpoint}/{task}/{method}/lr{lr}_lam{lam}_seed{seed}.line.parquet"
# the fine-tuned model's responses to the instruction set (alpaca_eval stage; written in the job)
GENERATIONS = "finetune/{checkpoint}/{task}/{method}/lr{lr}_lam{lam}_seed{seed}.generations.parquet"
TOKEN_CACHE = "finetune/.tokens"  # LM tasks' tokenized training splits, shared by the study's jobs
FINETUNE_BENCHMARK = (
    "benchmarks/finetune/{checkpoint}/{task}/{method}/lr{lr}_lam{lam}_seed{seed}.tsv"  # its run time
)
# the adaptive learning-rate search: its state after each round (the next round reads its learning rates)
LR_SEARCH_ROUND = "finetune/{checkpoint}/{task}/{method}/lr_search/lam{lam}_round{round}.json"
# a finished search's runs: the final round's record, every run's metric rows and line rows
LR_SEARCH_FINAL = "finetune/{checkpoint}/{task}/{method}/lr_search/lam{lam}.json"
LR_SEARCH_RUNS = "finetune/{checkpoint}/{task}/{method}/lr_search/lam{lam}.parquet"
LR_SEARCH_LINES = "finetune/{checkpoint}/{task}/{method}/lr_search/lam{lam}.line.parquet"
LR_SEARCH = "analysis/lr_search.parquet"  # every search's path: one row per evaluated learning rate
LR_SEARCH_COST = "analysis/lr_search_cost.parquet"  # per search: runs and rounds vs the full grid
CURVATURE_LINE_PART = "curvature/{checkpoint}/lines.parquet"  # Gaussian lines of one checkpoint
CURVATURE_SHARPNESS_PART = "curvature/{checkpoint}/sharpness.parquet"  # metric rows
NTK_PART = "curvature/{checkpoint}/ntk.parquet"  # the empirical NTK's metric rows, every task
CURVATURE_LINES = "curvature/lines.parquet"  # every line of the study
CURVATURE_SUMMARY = "analysis/curvature_summary.parquet"  # one row per line
THEORY_METRICS = "theory/metrics.parquet"
THEORY_TRANSFER = "theory/transfer.parquet"  # the transfer stage's table (pipeline/theory/transfer/table.py)
# the judged instruction-following metric (Appendix B.3): the instruction set, each checkpoint's
# responses before fine-tuning, and per judge and (checkpoint, task) every model's annotations
# against the reference run, their metric rows, and the judge job's own annotation cache
ALPACA_EVAL_INSTRUCTIONS = "alpaca_eval/instructions.parquet"
BASE_GENERATIONS = "alpaca_eval/base/{checkpoint}.generations.parquet"
JUDGE_ANNOTATIONS = "alpaca_eval/{judge}/{checkpoint}/{task}.annotations.parquet"
JUDGE_PART = "alpaca_eval/{judge}/{checkpoint}/{task}.parquet"
JUDGE_CACHE = "alpaca_eval/.cache/{judge}/{checkpoint}/{task}.parquet"
# LLaVA (docs/multimodal.md): the study's LLaVA data (where each part is), its vision tower, each
# checkpoint's stage-1 projector, and a stage-2 model in transformers' format (multimodal.save_hf)
VLM_DATA = "data/vlm/data.json"
VLM_TOWER = "data/vlm/tower"
VLM_PROJECTOR = "finetune/{checkpoint}/{task}/projector.pt"
VLM_HF = "finetune/{checkpoint}/{task}/{method}/lr{lr}_lam{lam}_seed{seed}.hf"
METRICS = "metrics.parquet"
INFLECTION = "analysis/inflection.parquet"
# pretrain.stable_twins: the WSD stable twins' rows (the metrics table holds the study's own runs)
STABLE_TWIN_METRICS = "analysis/stable_twin_metrics.parquet"
PRETRAIN_RUNS = "analysis/pretrain_runs.parquet"  # one row per pre-training run: seed, budget, epochs, ...
FINDINGS = "findings.md"  # every registered claim on this study's tables (pipeline/analysis/claims.py)
FINETUNE_TUNED = "analysis/finetune_tuned.parquet"
FIGURE = "figures/{name}.{ext}"


def study_dir(study: str) -> str:
    """results/<study>: everything a study writes."""
    return f"{RESULTS}/{study}"


def study_path(study: str, rel: str, **fields: object) -> str:
    """A path under results/<study>/; `fields` fill the pattern's wildcards (none: the pattern)."""
    path = f"{study_dir(study)}/{rel}"
    return path.format(**fields) if fields else path


def format_hparam(x: float) -> str:
    """A grid value as it appears in file names: 0.003, 1e-05, 0 (6 significant digits)."""
    return f"{float(x):.6g}"
