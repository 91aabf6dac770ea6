"""One training run over N processes (ranks) with FSDP2 (`torch.distributed.fsdp.fully_shard`).

Parameters, gradients and AdamW state are sharded per decoder layer, so a rank holds 1/N of the
16 bytes per parameter of float32 weights + gradients + two moments. Every rank reads the same
global batch (a pure function of the step) and computes its own rows; gradients are summed
across ranks, so a step is the one-process step up to float rounding, whatever N. Started by
torchrun inside one job (pipeline/train/launch.py): NCCL on GPUs, gloo on CPUs (the tests).
The checkpoint is read once per job (`load_into_shards`); evaluation code that needs the whole
model gets a gathered copy on every rank (`full_copy`) and shares its work (pipeline/ranks.py).
"""

from __future__ import annotations

import copy as copylib
import logging
import os
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from pipeline.models.attention import use_small_head_attention
from pipeline.models.build import decoder_layers
from pipeline.models.loading import load_checkpoint, load_checkpoint_tokenizer
from pipeline.models.trained_params import base_model
from pipeline.ranks import Ranks
from pipeline.train.precision import fsdp_mixed_precision, output_layer_policy

if TYPE_CHECKING:
    from pipeline.models.checkpoints import CheckpointSpec

log = logging.getLogger(__name__)


def init_ranks(device: str, timeout_s: float) -> tuple[Ranks, str]:
    """This process's Ranks and device from torchrun's environment (WORLD_SIZE, RANK, LOCAL_RANK),
    having joined the process group (NCCL on CUDA, gloo otherwise; one rank too: FSDP2 needs a
    group). timeout_s: a rank waiting this long in a collective (a peer died or hangs) fails the
    job instead of hanging it (finetune.collective_timeout_s)."""
    if "WORLD_SIZE" not in os.environ:
        raise RuntimeError("init_ranks: not started by torchrun (no WORLD_SIZE in the environment)")
    world, rank, local = (int(os.environ[k]) for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK"))
    backend = "gloo"
    if device.startswith("cuda"):
        visible = torch.cuda.device_count()
        if visible < int(os.environ.get("LOCAL_WORLD_SIZE", world)):
            raise RuntimeError(f"{world} ranks on this node, but only {visible} GPUs are visible to the job")
        torch.cuda.set_device(local)
        device, backend = f"cuda:{local}", "nccl"
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    return Ranks(rank, world), device


def check_same(value: object, ranks: Ranks, what: str) -> None:
    """Every rank holds the same `value` (e.g. the run config's fingerprint), else a clear error."""
    values = ranks.all_gather(value)
    if any(v != values[0] for v in values):
        raise RuntimeError(f"the ranks of this job disagree on {what}: {values}")


def vision_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The encoder layers of a LLaVA model's vision tower (none for a causal LM)."""
    tower = getattr(getattr(model, "model", None), "vision_tower", None)
    if tower is None:
        return []
    encoder = getattr(getattr(tower, "vision_model", tower), "encoder", None)
    return list(getattr(encoder, "layers", []))


def plain_class(model: torch.nn.Module) -> type:
    """The model's own class (FSDP2 makes each sharded module an instance of an FSDP subclass)."""
    from torch.distributed.fsdp import FSDPModule

    return next(c for c in type(model).__mro__ if not issubclass(c, FSDPModule))


def tied_output(model: torch.nn.Module) -> bool:
    head, embed = model.get_output_embeddings(), model.get_input_embeddings()
    return head is not None and head.weight is embed.weight


def shard_model(model: torch.nn.Module, precision: str) -> None:
    """fully_shard each decoder layer, the output layer (float32 parameters: the fused head,
    pipeline.models.losses.FusedHead, runs inside its forward and casts them for its matmuls; a model
    without one gets float32 logits) and the root; gradients are summed across ranks (each rank's
    loss is its share of the global mean). A peft (LoRA) model: its causal LM is the root, each
    layer's shard group holding the layer's frozen weights and trained adapters together (FSDP2
    reduces gradients of the trained ones)."""
    from torch.distributed.fsdp import FSDPModule, fully_shard

    model = base_model(model)
    policy = fsdp_mixed_precision(precision)
    for layer in [*vision_layers(model), *decoder_layers(model)]:  # a LLaVA model's frozen tower too
        fully_shard(layer, mp_policy=policy)
    if tied_output(model):
        log.warning("tied input/output embeddings: the output layer computes in the root's precision")
    else:
        fully_shard(model.get_output_embeddings(), mp_policy=output_layer_policy())
    fully_shard(model, mp_policy=policy)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)  # plain SUM: gloo has no PREMUL_SUM


def reshard(model: torch.nn.Module) -> None:
    """Free the gathered parameters FSDP2 keeps after a forward without backward (evaluation; the
    root keeps its own by default), so the parameters are this rank's shards again."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def local(t: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a (possibly sharded) tensor; the tensor itself when not sharded."""
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes this process holds (its shards) of the parameters, their gradients and the optimizer
    state: what sharding divides by N (activations and gathered layers come on top)."""
    params = [local(p) for p in model.parameters()]
    grads = [local(p.grad) for p in model.parameters() if p.grad is not None]
    moments = [
        local(v) for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v) and v.dim()
    ]
    return {
        "parameters": sum(t.nbytes for t in params),
        "gradients": sum(t.nbytes for t in grads),
        "optimizer": sum(t.nbytes for t in moments),
    }


@torch.no_grad()
def full_copy(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """A whole, unsharded copy of `model` in `dtype` on its device, in eval mode, its parameters
    trained where the model's are (`requires_grad`): what evaluation code that runs a model in one
    process (lm-eval, `generate`, the linearization gap) gets on every rank. A sharded model is
    gathered one tensor at a time (a collective: every rank calls it), so the transient memory is
    one float32 tensor beside the copy."""
    device = next(model.parameters()).device
    with torch.device(device):
        copy = plain_class(model)._from_config(copylib.deepcopy(model.config), dtype=dtype)
    copy.generation_config = model.generation_config
    attention = getattr(model.config, "_attn_implementation", None)
    if attention is not None:
        copy.set_attn_implementation(attention)
    target = copy.state_dict()
    for name, tensor in model.state_dict().items():
        target[name].copy_(full(tensor))
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    for n, p in copy.named_parameters():
        p.requires_grad_(n in trained)
    return copy.eval()


def full(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a (possibly sharded) tensor: a collective for a sharded one."""
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t


def full_like(part: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The whole tensor of which `part` is this rank's shard, sharded as parameter `like` is (a
    collective when `like` is sharded; `part` itself when not): e.g. θ_pre kept as shards."""
    from torch.distributed.tensor import DTensor

    if not isinstance(like, DTensor):
        return part
    spread = DTensor.from_local(
        part.to(like.device),
        like.device_mesh,
        like.placements,
        run_check=False,
        shape=like.shape,
        stride=like.stride(),
    )
    return spread.full_tensor()


def load_into_shards(
    spec: CheckpointSpec,
    path: str | None,
    device: str,
    ranks: Ranks,
    shard: Callable[[torch.nn.Module], None],
    build: Callable[[torch.nn.Module, object], torch.nn.Module] | None = None,
) -> tuple[torch.nn.Module, object]:
    """(model, tokenizer) of a checkpoint, sharded by `shard`, with one read of the checkpoint per
    job: rank 0 loads it in float32 on the host; the other ranks build the model on the meta
    device, shard it and allocate their shards on `device`; rank 0 broadcasts one tensor at a time
    and each rank keeps its slice; then rank 0 shards its own copy (which frees the rest of it).
    build: what to make of the loaded model (and its tokenizer) before it is sharded (e.g. wrap it
    in LoRA adapters), on every rank, so rank 0's values of what it adds (random adapters) reach
    every rank too.
    Host memory: one float32 copy on rank 0; each other rank its shards and one tensor in flight."""
    from transformers import AutoModelForCausalLM

    build = build or (lambda m, t: m)
    config = generation = None
    if ranks.main:
        model, tokenizer, _, _ = load_checkpoint(spec, path, "cpu", dtype=torch.float32)
        config, generation = model.config, model.generation_config
        model = build(model, tokenizer)
    else:
        tokenizer = load_checkpoint_tokenizer(spec, path)
    config, generation = ranks.broadcast((config, generation))
    if not ranks.main:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.generation_config = generation
        use_small_head_attention(model)
        model = build(model, tokenizer)
        shard(model)
        model.to_empty(device=device)
    with torch.no_grad():  # parameters, and buffers (rotary frequencies are in no state dict)
        for _, tensor in [*model.named_parameters(), *model.named_buffers()]:
            _broadcast_into(tensor, ranks, device)
    if ranks.main:
        shard(model)
    return model.eval(), tokenizer


def _broadcast_into(target: torch.Tensor, ranks: Ranks, device: str) -> None:
    """Rank 0 sends its whole tensor `target`; another rank fills its `target` (a shard, or a
    replicated tensor) with its slice of it."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    if ranks.main:
        dist.broadcast(target.to(device), src=0)
        return
    whole = torch.empty(target.shape, dtype=target.dtype, device=device)  # a DTensor's global shape
    dist.broadcast(whole, src=0)
    if isinstance(target, DTensor):  # this rank's slice, cut locally (src_data_rank=None: no traffic)
        mine = distribute_tensor(whole, target.device_mesh, target.placements, src_data_rank=None)
        target.to_local().copy_(mine.to_local())
    else:
        target.copy_(whole)
