"""One job of the perturbation sweep: a checkpoint's whole γ × seed grid, loaded once.

Every evaluated cell is cached on disk (keyed by the checkpoint's fingerprint, γ, seed and
the evaluation settings), so a job killed midway, or rerun because a γ or seed was added
to the config, only computes the cells it does not have yet.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from pathlib import Path
from typing import Callable, Iterator

import pandas as pd
import torch

from pipeline.checkpoints import CheckpointSpec, fingerprint, load_checkpoint
from pipeline.evaluate import EvalSet, build_eval_set, eval_perplexity, select_documents
from pipeline.io import write_json
from pipeline.perturb import perturbed
from pipeline.tables import metric_row
from pipeline.tokenizer import encode_documents

log = logging.getLogger(__name__)

EVAL_METRICS = ("ppl", "bpb", "loss")


def heldout_eval_set(corpus_path: str | Path, split: str, tokenizer, max_len: int, max_tokens: int | None) -> EvalSet:
    """The pre-training corpus's held-out `split` as rolling windows for `tokenizer`."""
    corpus = pd.read_parquet(corpus_path)
    texts = corpus.loc[corpus["split"] == split, "text"].tolist()
    if not texts:
        raise ValueError(f"eval.split: the corpus has no documents in split {split!r}")
    token_docs = encode_documents(tokenizer, texts)
    texts, token_docs = select_documents(texts, token_docs, max_tokens)
    prefix = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    return build_eval_set(token_docs, texts, prefix, max_len, tokenizer.pad_token_id)


def _cell_key(ckpt_fp: str, gamma: float, seed: int, eval_cfg: dict) -> str:
    blob = json.dumps({"ckpt": ckpt_fp, "gamma": gamma, "seed": seed, "eval": eval_cfg}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def grid_cells(gammas: list[float], seeds: list[int]) -> list[tuple[float, int | None]]:
    """The unmodified model (γ 0, seed None) first, then every (γ, seed) perturbation."""
    return [(0.0, None)] + [(float(g), int(s)) for g in gammas for s in seeds]


def evaluate_cells(
    model: torch.nn.Module,
    init_std: dict,
    cells: list[tuple[float, int | None]],
    evaluate: Callable[[torch.nn.Module], dict],
    cache_dir: str | Path,
    cache_key: Callable[[float, int], str],
    describe: Callable[[dict], str],
    name: str,
) -> Iterator[tuple[float, int | None, dict]]:
    """(γ, seed, result) of each cell: `evaluate` on the model perturbed in place (restored after),
    or the cell's cached JSON result from an earlier (killed or smaller) run. Logs rate and ETA."""
    cache_dir = Path(cache_dir)
    t0, computed = time.perf_counter(), 0
    for i, (gamma, seed) in enumerate(cells):
        key_file = cache_dir / f"{cache_key(gamma, seed if seed is not None else -1)}.json"
        if key_file.is_file():
            result = json.loads(key_file.read_text())
        else:
            if seed is None:
                result = evaluate(model)
            else:
                with perturbed(model, init_std, gamma, seed):
                    result = evaluate(model)
            write_json(key_file, result)
            computed += 1
        elapsed = time.perf_counter() - t0
        log.info(
            "[%d/%d] %s gamma=%g seed=%s %s | %.2f cells/s, ETA %.0fs",
            i + 1, len(cells), name, gamma, seed, describe(result), (i + 1) / elapsed, elapsed / (i + 1) * (len(cells) - i - 1),
        )
        yield gamma, seed, result
    log.info("checkpoint %s: %d cells computed, %d from cache", name, computed, len(cells) - computed)


def cell_fields(gamma: float, seed: int | None) -> dict:
    """The metric-row columns of a cell: the base model or a Gaussian perturbation."""
    return {"modification": "none"} if seed is None else {"modification": "gaussian", "gamma": gamma, "seed": seed}


def perturbation_grid(
    spec: CheckpointSpec,
    path: str | None,
    corpus_path: str | Path,
    eval_cfg: dict,
    gammas: list[float],
    seeds: list[int],
    study: str,
    cache_dir: str | Path,
    device: str = "cpu",
) -> list[dict]:
    """Evaluate the unmodified checkpoint and every (γ, seed) perturbation of it; tidy rows."""
    model, tokenizer, init_std, std_source = load_checkpoint(spec, path, device)
    max_len = min(eval_cfg.get("seq_len") or model.config.max_position_embeddings, model.config.max_position_embeddings)
    data = heldout_eval_set(corpus_path, eval_cfg["split"], tokenizer, max_len, eval_cfg.get("max_tokens"))
    log.info("checkpoint %s: %d eval tokens in %d windows of %d; init std %s", spec.name, data.n_tokens, len(data.inputs), max_len, std_source)
    ckpt_fp = fingerprint(spec, path)
    summary_file = Path(path or "", "summary.json") if spec.source != "hub" else None
    summary = json.loads(summary_file.read_text()) if summary_file and summary_file.is_file() else {}
    base_diverged = bool(summary.get("diverged", False))
    common = dict(**spec.row_fields(study), eval_data="pretrain", split=eval_cfg["split"])
    extra = {"init_std_source": std_source, "eval_tokens": data.n_tokens, "tokens_trained": summary.get("tokens_trained")}

    rows = []
    cells = evaluate_cells(
        model, init_std, grid_cells(gammas, seeds), lambda m: eval_perplexity(m, data, batch_size=eval_cfg["batch_size"], device=device),
        cache_dir, lambda g, s: _cell_key(ckpt_fp, g, s, eval_cfg), lambda r: f"ppl={r['ppl']:.3f}", spec.name,
    )
    for gamma, seed, result in cells:
        diverged = base_diverged or not all(map(_finite, (result[m] for m in EVAL_METRICS)))
        rows += [metric_row(**common, **cell_fields(gamma, seed), extra=extra, metric=m, value=result[m], diverged=diverged) for m in EVAL_METRICS]
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return rows


def _finite(x: float) -> bool:
    return x == x and abs(x) != float("inf")
