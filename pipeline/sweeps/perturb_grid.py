"""The perturbation sweep of one checkpoint: held-out perplexity of its whole γ × seed grid, on the
model its job loaded once (rule evaluate, pipeline/train/checkpoint_eval.py).

Every evaluated cell is cached on disk (keyed by the checkpoint's fingerprint, γ, seed and
the evaluation settings), so a job killed midway, or rerun because a γ or seed was added
to the config, only computes the cells it does not have yet.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.data.heldout import heldout_eval_set
from pipeline.evaluate.perplexity import EVAL_METRICS, eval_perplexity
from pipeline.models.loading import dtype_name, fingerprint, load_checkpoint
from pipeline.sweeps.cells import cell_fields, evaluate_cells
from pipeline.tables import metric_row

if TYPE_CHECKING:
    from pipeline.sweeps.cells import Grid, Loaded

log = logging.getLogger(__name__)


def _cell_key(ckpt_fp: str, gamma: float, seed: int, eval_cfg: dict) -> str:
    blob = json.dumps({"ckpt": ckpt_fp, "gamma": gamma, "seed": seed, "eval": eval_cfg}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def perturbation_grid(
    grid: Grid, corpus_path: str | Path, eval_cfg: dict, loaded: Loaded | None = None
) -> list[dict]:
    """Evaluate the unmodified checkpoint and every (γ, seed) perturbation of it on the corpus's
    held-out split (`eval:` settings); tidy rows. `loaded`: the checkpoint already loaded by the
    job (`load_checkpoint`'s tuple), else it is loaded here."""
    spec, path, device = grid.spec, grid.path, grid.device
    model, tokenizer, init_std, std_source = loaded or load_checkpoint(spec, path, device)
    max_len = min(
        eval_cfg.get("seq_len") or model.config.max_position_embeddings, model.config.max_position_embeddings
    )
    data = heldout_eval_set(corpus_path, eval_cfg["split"], tokenizer, max_len, eval_cfg.get("max_tokens"))
    log.info(
        "checkpoint %s: %d eval tokens in %d windows of %d; init std %s",
        spec.name,
        data.n_tokens,
        len(data.inputs),
        max_len,
        std_source,
    )
    ckpt_fp = fingerprint(spec, path)
    summary_file = Path(path or "", "summary.json") if spec.source != "hub" else None
    summary = json.loads(summary_file.read_text()) if summary_file and summary_file.is_file() else {}
    base_diverged = bool(summary.get("diverged", False))
    common = dict(**spec.row_fields(grid.study), eval_data="pretrain", split=eval_cfg["split"])
    extra = {
        "dtype": dtype_name(model),  # the precision every evaluation of this device runs in
        "init_std_source": std_source,
        "eval_tokens": data.n_tokens,
        "tokens_trained": summary.get("tokens_trained"),
    }

    rows = []
    cells = evaluate_cells(
        model,
        init_std,
        grid.cells(),
        lambda m: eval_perplexity(m, data, batch_size=eval_cfg["batch_size"], device=device),
        grid.cache_dir,
        lambda g, s: _cell_key(ckpt_fp, g, s, eval_cfg),
        lambda r: f"ppl={r['ppl']:.3f}",
        spec.name,
    )
    for gamma, seed, result in cells:
        diverged = base_diverged or not all(map(_finite, (result[m] for m in EVAL_METRICS)))
        rows += [
            metric_row(
                **common,
                **cell_fields(gamma, seed),
                extra=extra,
                metric=m,
                value=result[m],
                diverged=diverged,
            )
            for m in EVAL_METRICS
        ]
    return rows


def _finite(x: float) -> bool:
    return x == x and abs(x) != float("inf")
