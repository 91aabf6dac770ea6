"""A local judge: alpaca-eval's own `huggingface_local_completions` against this pipeline's
hf_local backend (pipeline/judge/backends.py), side by side on the same prompts and model.

Why the pipeline has its own: alpaca-eval's loads the model inside every call (one call per
annotation chunk), sends the ChatML template text as plain text (no chat template), and returns
no log-probabilities (so AlpacaEval 2's weighted `logprob_parser` judges cannot run on it). This
prints seconds per prompt (model load included for alpaca-eval's, as it pays it per call; listed
apart for ours, paid once per job) and how many answers each evaluator's parser can read.

The stand-in SmolLM2-135M-Instruct (`make demo` exports it to data/standin/), 8 MBPP pairs (the
reference solution vs the next problem's), the paper's ranking prompt (alpaca_eval_llama3_70b_fn,
40 new tokens, greedy) and AlpacaEval 2's weighted prompt (one forward pass per pair).

    python bench/bench_judge.py [--model data/standin/SmolLM2-135M-Instruct] [--pairs 8] [--threads 2]
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import pandas as pd
import torch

from pipeline.data.task_loading import load_task
from pipeline.judge.annotate import parse_answer
from pipeline.judge.backends import hf_local_backend, load_judge_model
from pipeline.judge.config import JudgeConfig

ROOT = Path(__file__).resolve().parents[1]


def prompts_for(evaluator: dict, pairs: pd.DataFrame) -> list[str]:
    from alpaca_eval.utils import make_prompts

    return make_prompts(pairs, Path(evaluator["prompt_template"]).read_text())[0]


def parsed(evaluator: dict, answers: list) -> int:
    from alpaca_eval import completion_parsers

    parser = getattr(completion_parsers, evaluator["fn_completion_parser"])
    kwargs = evaluator.get("completion_parser_kwargs", {})
    return sum(parse_answer(parser, a, kwargs) is not None for a in answers)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(ROOT / "data" / "standin" / "SmolLM2-135M-Instruct"))
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    from alpaca_eval.decoders.huggingface_local import huggingface_local_completions

    convs = load_task("mbpp", {"source": "embedded"}).splits["test"][: args.pairs + 1]
    sol = [c.messages[1].content for c in convs]
    pairs = pd.DataFrame(
        {
            "instruction": [c.messages[0].content for c in convs[:-1]],
            "output_1": sol[:-1],
            "output_2": sol[1:],
        }
    )
    ranking = JudgeConfig(
        annotator="alpaca_eval_llama3_70b_fn", backend="hf_local", model=args.model, max_tokens=40
    )
    weighted = JudgeConfig(annotator="weighted_alpaca_eval_gpt4_turbo", backend="hf_local", model=args.model)
    t0 = time.perf_counter()
    model, tok = load_judge_model(ranking, "cpu")
    load_s = time.perf_counter() - t0
    rows = []

    prompts = prompts_for(ranking.evaluator, pairs)
    t0 = time.perf_counter()
    try:
        theirs = huggingface_local_completions(
            prompts, model_name=args.model, max_new_tokens=40, batch_size=1, do_sample=False, cache_dir=None
        )["completions"]
        rows.append(
            (
                "alpaca-eval huggingface_local_completions, ranking",
                time.perf_counter() - t0,
                parsed(ranking.evaluator, theirs),
            )
        )
    except TypeError as err:  # on CPU it passes load_in_8bit=False to from_pretrained
        print(f"alpaca-eval huggingface_local_completions fails here: {type(err).__name__}: {err}")
    for cfg, label in (
        (ranking, "ours hf_local, ranking (greedy text)"),
        (weighted, "ours hf_local, weighted (logprobs)"),
    ):
        complete = hf_local_backend(cfg, cfg.evaluator, model, tok)
        p = prompts_for(cfg.evaluator, pairs)
        t0 = time.perf_counter()
        answers = complete(p)["completions"]
        rows.append((label, time.perf_counter() - t0, parsed(cfg.evaluator, answers)))
    print(
        f"{args.pairs} pairs, {args.threads} threads; our backend's model load (once per job): {load_s:.1f} s"
    )
    print(f"{'contender':<55} {'s / prompt':>10} {'parsable':>9}")
    for label, seconds, ok in rows:  # alpaca-eval's, when it runs: model load included
        print(f"{label:<55} {seconds / args.pairs:>10.2f} {ok:>5}/{args.pairs}")


if __name__ == "__main__":
    main()
