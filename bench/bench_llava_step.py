"""Time of one LLaVA stage-2 training step (forward + backward) three ways:

1. the model's own logits: every position goes through the output layer and the log-softmax;
2. the training loop's fused head (pipeline/models/losses.py): the body takes the images and only
   the scored rows reach the head (a LLaVA batch scores its replies only: the toy's ~6% of the
   positions);
3. as 2, in micro-batches of the batch's rows sorted by length, each cut after its longest row
   (pipeline.train.loop._micro_batches): less padding, more calls. Measured 5% (4 rows) to 9%
   (8 rows) under 2 (docs/benchmarks.md): not adopted.

Same model, same batch, the contenders alternating in one process (the machine is noisy); medians
of `--repeats` rounds. Shapes default to the offline demo's (config/vlm-demo.yaml): the `small`
preset (width 64, 2 layers; vocabulary 2,049), the toy tower (width 64, 4 layers, 32 px, 16 image
tokens), 16 conversations of 100-256 tokens (the toy's mean is 173) with 16 scored each.

usage: python bench/bench_llava_step.py [--threads 1] [--repeats 7] [--micro 4]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from pipeline.data.batches import IGNORE_INDEX, pad_masked_batch
from pipeline.models.build import build_model, model_config
from pipeline.models.losses import fused_head
from pipeline.multimodal.config import TowerConfig, ToyDataConfig
from pipeline.multimodal.llava import build_llava
from pipeline.multimodal.tower import patch_tokens, toy_vision_config
from pipeline.train.loop import _batch_loss, _micro_batches, lm_loss


def toy_llava(preset: str, vocab: int) -> torch.nn.Module:
    """The demo's LLaVA at random weights: a size preset's language model (`vocab` rows, the last the
    image token) around the toy tower of `multimodal.tower`'s defaults on the toy's images."""
    from transformers import CLIPVisionModel

    lm = build_model(model_config(preset, vocab, eos_token_id=2, pad_token_id=0), seed=0)
    torch.manual_seed(0)
    tower = CLIPVisionModel(toy_vision_config(TowerConfig(), ToyDataConfig().image_size))
    return build_llava(lm, tower.eval(), image_token=vocab - 1, projector_seed=0).train()


def batch(
    model, rows: int, shortest: int, longest: int, scored: int, by_length: bool
) -> dict[str, torch.Tensor]:
    """`rows` conversations of random lengths: BOS, the image tokens, text whose last `scored`
    tokens are scored; right-padded (rows sorted longest first if `by_length`)."""
    g = torch.Generator().manual_seed(1)
    n = patch_tokens(model.config.vision_config)
    vocab = model.config.text_config.vocab_size
    lengths = torch.randint(shortest, longest + 1, (rows,), generator=g).tolist()
    if by_length:
        lengths.sort(reverse=True)
    seqs, marks = [], []
    for length in lengths:
        text = torch.randint(3, vocab - 1, (length - n - 1,), generator=g).tolist()
        seqs.append(np.array([1] + [model.config.image_token_id] * n + text))
        marks.append(np.arange(length) >= length - scored)
    out = pad_masked_batch(seqs, marks, pad=0)
    return out | {"pixel_values": torch.randn(rows, 3, 32, 32, generator=g)}


def micro_batched(model, head, b: dict[str, torch.Tensor], size: int) -> None:
    """Forward + backward of `b` in row slices of `size`, each weighted by its share of the scored
    tokens (the training loop's path for a micro-batched step)."""
    scored = int((b["labels"] != IGNORE_INDEX).sum())
    for part in _micro_batches(b, size):
        share = int((part["labels"] != IGNORE_INDEX).sum()) / scored
        (_batch_loss(model, head, part) * share).backward()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--steps", type=int, default=5, help="steps per timed round")
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--shortest", type=int, default=100)
    ap.add_argument("--longest", type=int, default=256)
    ap.add_argument("--scored", type=int, default=16, help="scored positions per conversation")
    ap.add_argument("--micro", type=int, default=4, help="rows per micro-batch of contender 3")
    ap.add_argument("--preset", default="small", help="the language model's size preset")
    ap.add_argument("--vocab", type=int, default=2049, help="embedding rows (the toy BPE's 2,048 + <image>)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = toy_llava(args.preset, args.vocab)
    for n, p in model.named_parameters():
        p.requires_grad_(not n.startswith("model.vision_tower."))
    b = batch(model, args.rows, args.shortest, args.longest, args.scored, by_length=False)
    by_length = batch(model, args.rows, args.shortest, args.longest, args.scored, by_length=True)
    inputs = {k: v for k, v in b.items() if k != "labels"}
    head = fused_head(model)
    contenders = {
        "model logits": lambda: lm_loss(model(**inputs).logits, b["labels"]).backward(),
        "fused head, scored rows": lambda: _batch_loss(model, head, b).backward(),
        f"+ sorted micro-batches of {args.micro}": lambda: micro_batched(model, head, by_length, args.micro),
    }
    times: dict[str, list[float]] = {k: [] for k in contenders}
    for r in range(args.repeats + 1):  # round 0 warms up
        for name, loss_fn in contenders.items():
            t0 = time.perf_counter()
            for _ in range(args.steps):
                loss_fn()
                model.zero_grad(set_to_none=True)
            if r:
                times[name].append((time.perf_counter() - t0) / args.steps)
    print(
        f"LLaVA stage-2 step, {args.rows} conversations of {args.shortest}-{args.longest} tokens "
        f"({args.scored} scored each, padded to {b['input_ids'].shape[1]}), vocabulary "
        f"{args.vocab}, preset {args.preset}, {args.threads} thread(s), "
        f"median of {args.repeats} rounds of {args.steps} steps"
    )
    base = statistics.median(times["model logits"])
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:32s} {1000 * med:7.1f} ms/step  (min {1000 * min(ts):.1f})  {base / med:.2f}x")


if __name__ == "__main__":
    main()
