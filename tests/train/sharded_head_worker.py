"""One rank of tests/train/test_sharded_head.py (run under torchrun, gloo): the tiny model sharded
with FSDP2 trains and evaluates through the fused head; rank 0 writes what it found as JSON."""

from __future__ import annotations

import json
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F

from pipeline.data.batches import IGNORE_INDEX
from pipeline.models import losses
from pipeline.models.build import build_model, model_config
from pipeline.ranks import Ranks
from pipeline.train.distributed import full, shard_model


def main(out: str) -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    ranks = Ranks(dist.get_rank(), dist.get_world_size())
    torch.set_num_threads(1)
    results = {precision: run(ranks, precision) for precision in ("fp32", "bf16-mixed")}
    if ranks.main:
        with open(out, "w") as f:
            json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


def run(ranks: Ranks, precision: str) -> dict:
    """Loss, gradients and evaluation NLL of the sharded model against the whole model's logits."""
    model = build_model(model_config("tiny", 300, 0, 0), seed=0)  # every rank: the same weights
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 300, (4, 24), generator=gen)
    labels = ids.roll(-1, 1)
    labels[0, :5] = IGNORE_INDEX  # a prompt
    labels[3, 20:] = IGNORE_INDEX  # padding

    # the reference: one whole model, full float32 logits, the global batch's mean loss
    reference = build_model(model_config("tiny", 300, 0, 0), seed=0)
    ref = F.cross_entropy(
        reference(input_ids=ids).logits.reshape(-1, 300), labels.reshape(-1), ignore_index=IGNORE_INDEX
    )
    ref.backward()
    scored = labels != IGNORE_INDEX
    with torch.no_grad():
        ref_nll = F.cross_entropy(reference(input_ids=ids).logits[scored], labels[scored], reduction="sum")

    calls = {"fused_linear_cross_entropy": 0, "linear_nll_sum": 0}
    real = {name: getattr(losses, name) for name in calls}
    for name in calls:  # spies: the head the sharded model runs is the fused one

        def spy(*args, _name=name, **kwargs):
            calls[_name] += 1
            return real[_name](*args, **kwargs)

        setattr(losses, name, spy)

    shard_model(model, precision)
    head = losses.fused_head(model)
    assert head is not None, "no fused head for the sharded model"
    mine = ranks.rows(len(ids))
    share = int(scored[mine].sum()) / int(scored.sum())
    loss = head.loss(ids[mine], labels[mine]) * share
    loss.backward()
    total = loss.detach().clone()
    dist.all_reduce(total)
    grads = {n: full(p.grad) for n, p in model.named_parameters()}
    grad_err = {
        n: float((grads[n].float() - p.grad).abs().max() / p.grad.abs().max())
        for n, p in reference.named_parameters()
    }
    model.eval()
    with torch.inference_mode():
        flat = labels.reshape(-1)
        pos = (flat != IGNORE_INDEX).nonzero().squeeze(1)
        nll = head.nll(ids, pos, flat[pos], summed=True)
    for name, fn in real.items():
        setattr(losses, name, fn)
    return {
        "loss": float(total),
        "ref_loss": float(ref.detach()),
        "nll": float(nll),
        "ref_nll": float(ref_nll),
        "grad_err": grad_err,
        "calls": calls,
        "head_is_sharded": type(model.lm_head.weight).__name__,
    }


if __name__ == "__main__":
    main(sys.argv[1])
