"""One run of the pre-training sweep: a model preset trained to one token budget."""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.data.batches import ChunkSampler
from pipeline.data.tokenizer import load_tokenizer
from pipeline.io import atomic_path, write_json
from pipeline.models.build import build_model, count_parameters, init_std, model_config
from pipeline.ranks import SINGLE
from pipeline.train import resume
from pipeline.train.config import PretrainConfig, check_repeat, steps_for_budget
from pipeline.train.loop import train
from pipeline.train.recompute import enable_activation_checkpointing

log = logging.getLogger(__name__)


def pretrain_run(
    train_tokens: str | Path,
    tokenizer_path: str | Path,
    preset: str,
    budget: int,
    seed: int,
    cfg: PretrainConfig,
    out_dir: str | Path,
    state_path: str | Path,
    device: str = "cpu",
    stop_after: int | None = None,
    allow_repeat: bool = False,
) -> dict:
    """Train `preset` on `budget` tokens from initialisation and data order `seed` and write a
    self-contained checkpoint directory.

    out_dir gets: the HF model + tokenizer (save_pretrained), init_std.json (per-tensor
    std at initialisation, used by the perturbation), loss_curve.parquet and summary.json (with the
    epochs over the training split: a budget beyond the split repeats data, and stops here before
    any step unless `allow_repeat`).
    """
    tokenizer = load_tokenizer(tokenizer_path)
    config = model_config(preset, len(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id)
    if cfg.seq_len > config.max_position_embeddings:
        raise ValueError(
            f"pretrain.seq_len {cfg.seq_len} exceeds the context of preset {preset!r} "
            f"({config.max_position_embeddings})"
        )
    tokens = np.load(train_tokens, mmap_mode="r")
    sampler = ChunkSampler(tokens, cfg.seq_len, cfg.batch_size, seed=seed)
    train_cfg = cfg.train_config(steps_for_budget(budget, cfg.batch_size, cfg.seq_len), device)
    tokens_per_step = cfg.batch_size * cfg.seq_len
    available = sampler.n_chunks * cfg.seq_len  # the split's tokens in whole training chunks
    check_repeat(budget, train_cfg.steps * tokens_per_step, available, allow_repeat, str(train_tokens))
    model = build_model(config, seed=seed)
    stds = init_std(model)
    model.to(device)
    if cfg.activation_checkpointing:
        enable_activation_checkpointing(model)
    log.info(
        "pre-training %s (%d params, seed %d) for %d steps = %d tokens (budget %d, %.2f epochs)",
        preset,
        count_parameters(model),
        seed,
        train_cfg.steps,
        train_cfg.steps * cfg.batch_size * cfg.seq_len,
        budget,
        train_cfg.steps * tokens_per_step / available,
    )
    result = train(model, sampler.batch, train_cfg, state_path=state_path, stop_after=stop_after)
    if stop_after is not None and result.steps_done < train_cfg.steps:
        return {"stopped_at": result.steps_done}
    summary = {
        "preset": preset,
        "budget": budget,
        "seed": seed,
        "tokens_trained": result.steps_done * tokens_per_step,
        "steps": result.steps_done,
        "final_loss": result.losses[-1] if result.losses else None,
        "diverged": result.diverged,
        "seconds": result.seconds,
        "tokens_per_second": (result.steps_done - result.resumed_from)
        * tokens_per_step
        / max(result.seconds, 1e-9),
        "resumed_from_step": result.resumed_from,
        "parameters": count_parameters(model),
        "vocab_size": len(tokenizer),
        "non_embedding_parameters": count_parameters(model, non_embedding=True),
        "train_tokens_available": int(len(tokens)),
        "epochs": result.steps_done * tokens_per_step / available,  # > 1: data repeated
        "hyperparameters": {**asdict(cfg), **asdict(train_cfg), "seed": seed},
    }
    curve = pd.DataFrame(
        {
            "step": np.arange(1, len(result.losses) + 1),
            "lr": result.lrs[: len(result.losses)],
            "loss": result.losses,
        }
    )
    curve["tokens"] = curve["step"] * tokens_per_step
    with atomic_path(out_dir) as tmp:
        tmp.mkdir()
        model.to("cpu").save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        write_json(tmp / "init_std.json", stds)
        write_json(tmp / "summary.json", summary)
        curve.to_parquet(tmp / "loss_curve.parquet", index=False)
    resume.remove(state_path, SINGLE)  # the run is done
    log.info(
        "wrote %s (final loss %.4f, %.0f tok/s)",
        out_dir,
        summary["final_loss"] or float("nan"),
        summary["tokens_per_second"],
    )
    return summary
