"""muP against standard parameterization (pipeline/models/mup.py): the coordinate check and the
learning-rate transfer, on CPU-sized OLMo-architecture models of growing width.

1. Coordinate check (Yang et al. 2022, arXiv:2203.03466, Section 7 / the `mup` package's coord_check):
   models of widths 32 ... 512 (head dimension 8, 2 layers) take a few Adam steps at one learning
   rate; the mean |activation| of the embedding output, the last layer's output and the logits is
   printed per width and step. Under muP the columns stay flat across widths; under standard
   parameterization the logits (and hidden states) grow with width.
2. Learning-rate transfer: widths 32, 64, 128 (base width 32) trained on Moby-Dick tokens at a grid
   of learning rates 2x apart (0.032 ... 2.048); the best rate per width is printed, and how many
   grid steps apart the widths' best rates are (docs/benchmarks.md has a run's figures).

usage: python bench/bench_mup.py [--coord-steps 5] [--transfer-steps 150] [--threads 2] [--lr-from 5]
       [--skip-coord]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import torch
from transformers import Olmo2Config, Olmo2ForCausalLM

from pipeline.models.mup import attach, init_weights, mup_of
from pipeline.train.config import TrainConfig
from pipeline.train.loop import make_optimizer, make_schedule

ROOT = Path(__file__).resolve().parents[1]
BASE_WIDTH, HEAD_DIM, LAYERS, STD = 32, 8, 2, 0.02


def model_at(width: int, parameterization: str, vocab: int, seed: int = 0):
    """(model, the muP width multiplier or None) of `width`, heads of HEAD_DIM, from `seed`."""
    config = Olmo2Config(
        vocab_size=vocab,
        hidden_size=width,
        num_hidden_layers=LAYERS,
        num_attention_heads=width // HEAD_DIM,
        intermediate_size=4 * width,
        max_position_embeddings=128,
        tie_word_embeddings=False,
        initializer_range=STD,
    )
    torch.manual_seed(seed)
    model = Olmo2ForCausalLM(config)
    if parameterization == "standard":
        return model, None
    mup = mup_of(config, BASE_WIDTH, BASE_WIDTH // HEAD_DIM)
    init_weights(model, mup, STD, seed)
    attach(model, mup)
    return model, mup.mult


def coordinate_check(
    widths: list[int], parameterization: str, tokens: np.ndarray, steps: int, lr: float, vocab: int
) -> dict[int, list[dict[str, float]]]:
    """Per width, per step (0 = at init): mean |x| of the embedding output, the last decoder layer's
    output and the logits on one fixed batch, after that many Adam steps at `lr` on it."""
    batch = torch.as_tensor(tokens[: 8 * 65].astype(np.int64)).view(8, 65)
    x, y = batch[:, :-1], batch[:, 1:]
    out = {}
    for width in widths:
        model, mult = model_at(width, parameterization, vocab)
        cfg = TrainConfig(steps=steps, lr=lr, warmup_fraction=0.0, schedule="constant", mup_width_mult=mult)
        opt = make_optimizer(model, cfg)
        seen: dict[str, torch.Tensor] = {}
        model.get_input_embeddings().register_forward_hook(lambda m, i, o: seen.__setitem__("embedding", o))
        model.get_decoder().layers[-1].register_forward_hook(
            lambda m, i, o: seen.__setitem__("hidden", o[0] if isinstance(o, tuple) else o)
        )
        rows = []
        for _ in range(steps + 1):
            logits = model(input_ids=x).logits
            rows.append({k: float(v.detach().abs().mean()) for k, v in {**seen, "logits": logits}.items()})
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
        out[width] = rows
    return out


def final_loss(
    width: int, parameterization: str, tokens: np.ndarray, lr: float, steps: int, vocab: int
) -> float:
    """Mean training loss over the last tenth of `steps` Adam steps (warmup 10%, cosine) at `lr`."""
    model, mult = model_at(width, parameterization, vocab)
    cfg = TrainConfig(steps=steps, lr=lr, weight_decay=0.0, mup_width_mult=mult)
    opt = make_optimizer(model, cfg)
    sched = make_schedule(opt, cfg)
    rng = np.random.default_rng(0)
    seq, rows, losses = 64, 16, []
    for _ in range(steps):
        starts = rng.integers(0, len(tokens) - seq - 1, rows)
        batch = torch.as_tensor(np.stack([tokens[s : s + seq + 1] for s in starts]).astype(np.int64))
        logits = model(input_ids=batch[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), batch[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    tail = losses[-max(1, steps // 10) :]
    return sum(tail) / len(tail) if all(math.isfinite(v) for v in tail) else math.inf


def moby_tokens(vocab: int) -> np.ndarray:
    """Moby-Dick (a pinned data package) through a byte-level BPE of `vocab` trained on it."""
    import tempfile

    from pipeline.data.corpus import load_embedded
    from pipeline.data.tokenizer import as_hf_tokenizer, token_stream, train_bpe

    docs = load_embedded("moby_dick", ROOT / "data" / "packages")
    texts = [d.text for d in docs[:200]]
    with tempfile.TemporaryDirectory() as tmp:
        train_bpe(texts, vocab_size=vocab).save(f"{tmp}/tokenizer.json")
        return np.asarray(token_stream(as_hf_tokenizer(f"{tmp}/tokenizer.json"), texts))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--coord-steps", type=int, default=5)
    ap.add_argument("--coord-lr", type=float, default=1e-2)
    ap.add_argument("--transfer-steps", type=int, default=150)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr-from", type=int, default=5, help="the grid's first rate is 1e-3 x 2^this")
    ap.add_argument("--skip-coord", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    vocab = 512
    tokens = moby_tokens(vocab)
    widths = [32, 64, 128, 256, 512]
    print(
        f"## coordinate check: mean |x| after t Adam steps at lr {args.coord_lr} "
        f"(head dim {HEAD_DIM}, base width {BASE_WIDTH})"
    )
    for param in () if args.skip_coord else ("standard", "mup"):
        check = coordinate_check(widths, param, tokens, args.coord_steps, args.coord_lr, vocab)
        for where in ("embedding", "hidden", "logits"):
            print(f"\n{param} / {where}: t = " + " ".join(f"{t:>8d}" for t in range(args.coord_steps + 1)))
            for w in widths:
                print(f"  width {w:4d}: " + " ".join(f"{r[where]:8.3g}" for r in check[w]))
            last = [check[w][-1][where] for w in widths]
            print(
                f"  width {widths[-1]} / width {widths[0]} at t = {args.coord_steps}: "
                f"{last[-1] / last[0]:.2f}"
            )
    lrs = [2.0**k * 1e-3 for k in range(args.lr_from, args.lr_from + 7)]  # 2x apart
    transfer_widths = [32, 64, 128]
    print(
        f"\n## learning-rate transfer: final training loss after {args.transfer_steps} steps (grid 2x apart)"
    )
    for param in ("standard", "mup"):
        print(f"\n{param}: lr = " + " ".join(f"{lr:8.4f}" for lr in lrs))
        best = {}
        for w in transfer_widths:
            losses = [final_loss(w, param, tokens, lr, args.transfer_steps, vocab) for lr in lrs]
            best[w] = lrs[int(np.argmin(losses))]
            print(f"  width {w:4d}: " + " ".join(f"{v:8.4f}" for v in losses) + f"  best {best[w]:.4f}")
        steps_apart = math.log2(max(best.values()) / min(best.values()))
        print(f"  best rates {sorted(set(best.values()))}: {steps_apart:.0f} grid step(s) apart")


if __name__ == "__main__":
    main()
