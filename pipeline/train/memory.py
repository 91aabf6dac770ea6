"""The memory planner of fine-tuning: bytes per GPU of a job, and the GPU count and micro-batch
that fit it with headroom. Torch-free arithmetic on a ModelShape (the Snakefile sizes each job's
resources with it at parse time; the job reads its plan from them).

Per rank, for a model of P parameters sharded over N ranks (N = 1: one process):

- states: float32 master weights, float32 gradients and AdamW's two float32 moments,
  16 B x P / N in both precisions (bf16-mixed computes in bf16 but keeps these in float32);
- working weights: one process with bf16-mixed keeps autocast's bf16 copy of every weight for
  the backward pass (2 B x P); a sharded rank gathers two decoder layers at a time (the current one
  and the prefetched next) in the compute dtype, the embeddings and the float32 output layer, and
  holds one layer's float32 gradients before the reduce-scatter;
- activations: per token and decoder layer, measured with saved-tensor hooks on an OLMo-2 layer
  with SDPA attention (bench/bench_activation_memory.py; CPU and an H100 save the same bytes):
  float32 4 B x (10 h + 4 kv_dim + 4 i); bf16 autocast 35 h + 8 kv_dim + 10 i bytes (bf16 matmul
  inputs beside float32 norm inputs: ~0.69x). An OLMo (v1) layer (non-parametric norms, no q/k
  norm) saves less (0.80x / 0.71x of these), so its plans are conservative. With activation
  checkpointing a layer keeps only its input (4 B x h per token) and one layer at a time is
  recomputed. With attention dropout (the olmo-* presets' 0.1) the planner assumes SDPA leaves its
  fused kernels, so a layer also keeps every head's probabilities, heads x seq_len values per token
  (an H100 peaked 4.4 GiB higher than without for olmo-30m at 64 x 1024 tokens; this term gives
  4.5); which kernel runs is not profiled yet: one setting, DROPOUT_KEEPS_PROBABILITIES;
- logits: one process uses the chunked fused head (float32 logits of at most 256 MiB of rows at a
  time, and their gradient); a sharded model the full float32 logits, their log-softmax and
  gradient (12 B x vocab per token).

A GPU's usable bytes are its memory less `headroom` (10%) and 1.5 GiB that torch's allocator
does not see (CUDA context, NCCL buffers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeline.models.hub import HUB_PRESETS
from pipeline.train.config import FinetuneConfig, resolve_precision

if TYPE_CHECKING:
    from pipeline.models.shapes import ModelShape

GIB = 1 << 30
STATE_BYTES = {"weights": 4, "gradients": 4, "optimizer": 8}  # per parameter, float32
COMPUTE_BYTES = {"fp32": 4, "bf16-mixed": 2}  # bytes of a weight in the forward pass
CUDA_RESERVED = int(1.5 * GIB)
HEADROOM = 0.10
FUSED_HEAD_CHUNK = 256 << 20  # pipeline/models/losses.py DEFAULT_CHUNK_BYTES: float32 logits of a chunk
# Whether training with attention dropout (the olmo-* presets' 0.1) runs SDPA's math kernel, which
# keeps each head's (seq x seq) probabilities for the backward pass; the planner counts them when
# True. An assumption, not a profile: an H100 run peaked 4.4 GiB higher with dropout than without
# for olmo-30m at 64 x 1024 (docs/benchmarks.md), which this term matches (4.5), but which kernel
# ran was not profiled, and torch's flash attention accepts dropout (no probabilities kept). A
# profile (bench/profile_train_step.py on a GPU) settles it; then set this to what it shows.
DROPOUT_KEEPS_PROBABILITIES = True


class PlanError(ValueError):
    """No allowed GPU count fits the job: the message carries the arithmetic."""


def activation_bytes(shape: ModelShape, precision: str = "fp32") -> int:
    """Bytes a decoder layer saves for the backward pass per token (SDPA / flash attention)."""
    h, kv, i = shape.hidden, shape.kv_dim, shape.intermediate
    if precision == "bf16-mixed":
        return 35 * h + 8 * kv + 10 * i
    return 4 * (10 * h + 4 * kv + 4 * i)


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes of one rank at the peak of a training step, by kind."""

    states: int
    working_weights: int
    activations: int
    logits: int

    @property
    def total(self) -> int:
        return self.states + self.working_weights + self.activations + self.logits

    def describe(self) -> str:
        parts = ", ".join(f"{k.replace('_', ' ')} {v / GIB:.1f}" for k, v in vars(self).items())
        return f"{self.total / GIB:.1f} GiB ({parts})"


def estimate(
    shape: ModelShape,
    ranks: int,
    micro_batch: int,
    seq_len: int,
    precision: str,
    activation_checkpointing: bool,
    frozen: int = 0,
    trained: int | None = None,
) -> MemoryEstimate:
    """Peak bytes per rank of fine-tuning `shape` on `ranks` ranks, `micro_batch` sequences of
    `seq_len` tokens per forward pass; `frozen` more parameters that do not train (a LLaVA model's
    vision tower: float32 weights, sharded, and their working copy; no gradients, no optimizer state,
    no saved activations); `trained`: how many of the model's own parameters train (None: all; the
    others count as frozen; LLaVA's stage 1 trains its projector only)."""
    if trained is not None:
        frozen, shape_params = frozen + shape.params - trained, trained
    else:
        shape_params = shape.params
    p = shape_params
    states = -(-(sum(STATE_BYTES.values()) * p + STATE_BYTES["weights"] * frozen) // ranks)  # ceil: padded
    w = COMPUTE_BYTES[precision]
    if ranks == 1:
        working = 2 * (p + frozen) if precision == "bf16-mixed" else 0
    else:
        embeddings = shape.vocab * shape.hidden * (w + (0 if shape.tied else 4))
        working = 2 * shape.layer_params * w + embeddings + shape.layer_params * 4 + w * frozen // ranks
    tokens = micro_batch * seq_len
    per_layer = activation_bytes(shape, precision) * tokens
    if shape.attention_dropout > 0 and DROPOUT_KEEPS_PROBABILITIES:  # each head's, in the compute dtype
        per_layer += shape.heads * seq_len * COMPUTE_BYTES[precision] * tokens
    if activation_checkpointing:
        activations = shape.layers * 4 * shape.hidden * tokens + per_layer
    else:
        activations = shape.layers * per_layer
    logits = 2 * min(4 * shape.vocab * tokens, FUSED_HEAD_CHUNK) if ranks == 1 else 12 * shape.vocab * tokens
    return MemoryEstimate(states, working, activations, logits)


def usable_bytes(gpu_memory_gb: float, headroom: float = HEADROOM) -> int:
    """What a job may plan to use on one GPU of `gpu_memory_gb` GB (10^9 bytes, as sold)."""
    return int(gpu_memory_gb * 1e9 * (1 - headroom)) - CUDA_RESERVED


@dataclass(frozen=True)
class Plan:
    """GPUs of one job and the micro-batch each rank runs, with the estimate that chose them."""

    gpus: int
    micro_batch: int
    estimate: MemoryEstimate
    usable: int

    def describe(self) -> str:
        return (
            f"{self.gpus} GPU(s), micro-batch {self.micro_batch}: {self.estimate.describe()} of "
            f"{self.usable / GIB:.1f} GiB usable per GPU"
        )


def gpu_counts(gpus_per_node: int) -> list[int]:
    """The GPU counts a job may use: powers of two up to a node."""
    return [n for n in (1, 2, 4, 8, 16, 32) if n <= gpus_per_node]


def plan_finetune(
    shape: ModelShape,
    batch_size: int,
    seq_len: int,
    precision: str,
    activation_checkpointing: bool,
    gpu_memory_gb: float,
    gpus_per_node: int,
    micro_batch: int | None = None,
    headroom: float = HEADROOM,
    gpus: int | None = None,
    frozen: int = 0,
    trained: int | None = None,
) -> Plan:
    """The fewest GPUs (of one node) on which a fine-tuning step fits, and the largest micro-batch
    that fits there (`micro_batch`, when given, is kept; `gpus`, when given, is the only count
    tried; `frozen`, `trained`: parameters that do not train, see `estimate`). The global
    batch stays `batch_size` rows: each of N ranks runs batch_size / N of them in micro-batches.
    Raises PlanError with the arithmetic when no count fits."""
    usable = usable_bytes(gpu_memory_gb, headroom)
    counts = [gpus] if gpus else gpu_counts(gpus_per_node)
    for gpus in counts:
        if batch_size % gpus:
            continue
        rows = batch_size // gpus
        sizes = [micro_batch] if micro_batch else [m for m in range(rows, 0, -1) if rows % m == 0]
        for m in sizes:
            if m > rows:
                continue
            est = estimate(shape, gpus, m, seq_len, precision, activation_checkpointing, frozen, trained)
            if est.total <= usable:
                return Plan(gpus, m, est, usable)
    gpus = max((n for n in counts if batch_size % n == 0), default=counts[-1])
    smallest = estimate(
        shape, gpus, micro_batch or 1, seq_len, precision, activation_checkpointing, frozen, trained
    )
    fixes = ["turn on finetune.activation_checkpointing"] if not activation_checkpointing else []
    fixes += (
        ["lower finetune.micro_batch_size (or null: the planner's)"]
        if micro_batch and micro_batch > 1
        else []
    )
    fixes += ["shorten finetune.seq_len", "allow more GPUs per job (gpu.per_node, finetune.ranks)"]
    raise PlanError(
        f"fine-tuning a {shape.params / 1e6:,.1f}M-parameter model ({shape.layers} layers, hidden "
        f"{shape.hidden}) does not fit: on {gpus} GPU(s) of {gpu_memory_gb:g} GB with micro-batch "
        f"{micro_batch or 1} of {seq_len} tokens, {precision}, activation checkpointing "
        f"{'on' if activation_checkpointing else 'off'}, a rank needs {smallest.describe()}, but "
        f"{usable / GIB:.1f} GiB are usable ({gpu_memory_gb:g} GB less {headroom:.0%} headroom and "
        f"{CUDA_RESERVED / GIB:.1f} GiB CUDA context); " + ", or ".join(fixes)
    )


GAP_WINDOWS = 8  # windows per batch of the linearization gap (linearization.finetuned_gap)
# bytes per logit of the gap's batch: f(θ_pre), Jδ and f(θ_ft) in float32, their float64 copies at
# the scored positions and two float64 log-softmaxes
GAP_LOGIT_BYTES = 3 * 4 + 3 * 8 + 2 * 8


def gap_bytes(shape: ModelShape, params: int, ranks: int, max_tokens: int) -> int:
    """Peak bytes per rank of the linearization gap after training (finetune.linearization_tokens):
    this rank's float32 master weights and gradients (8 B x P / N), the whole model gathered in
    float32 (θ_ft), θ_pre and δ of the trained parameters beside it (counted as all: 8 B x P), and
    one batch of windows of the model's context through the jvp (logits; one layer's activations,
    primal and tangent, with eager attention's probabilities)."""
    windows = min(GAP_WINDOWS, (max_tokens - 1) // (shape.context - 1) + 1)  # full windows (first_windows)
    tokens = windows * shape.context
    logits = GAP_LOGIT_BYTES * shape.vocab * tokens
    layer = 2 * (activation_bytes(shape) + 4 * shape.heads * shape.context) * tokens
    return -(-8 * params // ranks) + 12 * params + logits + layer


# What one GPU delivers to pre-training, by the project's FLOP formula
# (ModelShape.train_flops_per_token): the GPU kit's olmo-30m pre-training step on one NVIDIA H100
# 80GB HBM3, 2026-11-26 (docs/benchmarks.md, "The GPU kit"): 219,706 tokens/s x 229.2 MFLOP per
# token = 50.4 TFLOP/s. The default of `gpu.tflops`; measure your GPU with `make gpu-check`.
MEASURED_TFLOPS = 50.0


@dataclass(frozen=True)
class GpuSettings:
    """The `gpu:` section: one GPU's memory (GB, as sold), GPUs per node, the fraction left free; and
    the training throughput one GPU delivers (TFLOP/s by the project's FLOP formula), which sizes
    the sweep's GPU-hours and pre-training jobs' time limits (pipeline/workflow/pretrain_sweep.py)."""

    memory_gb: float = 80.0
    per_node: int = 8
    headroom: float = HEADROOM
    tflops: float = MEASURED_TFLOPS

    def __post_init__(self) -> None:
        if self.tflops is None or not self.tflops > 0:
            raise ValueError(
                f"gpu.tflops: the training throughput one GPU delivers (TFLOP/s) must be a number > 0, "
                f"got {self.tflops!r} (the GPU kit measures it: make gpu-check)"
            )


def plan_run(
    shape: ModelShape,
    cfg: FinetuneConfig,
    seq_len: int,
    gpu: GpuSettings,
    gpus: int | None = None,
    frozen: int = 0,
) -> Plan:
    """`plan_finetune` of a fine-tuning run config (its batch, precision on CUDA, activation
    checkpointing and micro-batch) on the config's `gpu:` section.
    With the linearization gap on, its peak after training must fit too (it does not shrink with
    more GPUs: each holds the whole model), else PlanError naming the key."""
    plan = _plan_training(shape, cfg, seq_len, gpu, gpus, frozen)
    if cfg.linearization_tokens:
        need = gap_bytes(shape, shape.params, plan.gpus, cfg.linearization_tokens)
        if need > plan.usable:
            raise PlanError(
                f"finetune.linearization_tokens: the linearization gap holds the whole "
                f"{shape.params / 1e6:,.1f}M-parameter model in float32 with θ_pre and δ beside it on "
                f"every GPU, {need / GIB:.1f} GiB per GPU, but {plan.usable / GIB:.1f} GiB are usable; "
                "set finetune.linearization_tokens: 0 for this model"
            )
    return plan


def _plan_training(
    shape: ModelShape, cfg: FinetuneConfig, seq_len: int, gpu: GpuSettings, gpus: int | None, frozen: int
) -> Plan:
    return plan_finetune(
        shape,
        batch_size=cfg.batch_size,
        seq_len=seq_len,
        precision=resolve_precision(cfg.precision, "cuda"),
        activation_checkpointing=cfg.activation_checkpointing,
        gpu_memory_gb=gpu.memory_gb,
        gpus_per_node=gpu.per_node,
        micro_batch=cfg.micro_batch_size,
        headroom=gpu.headroom,
        gpus=gpus,
        frozen=frozen,
    )


PAPER_MODELS = ("olmo-1b", "olmo-2-7b", "amber")


def plans_table(batch_size: int = 256, seq_len: int = 2048, precision: str = "bf16-mixed") -> str:
    """Markdown table of the plans of the paper's hub models on 40 and 80 GB GPUs (docs/scaling.md)."""

    header = ["model", "GPU", "activation checkpointing", "GPUs per job", "micro-batch"]
    header.append("per GPU (GiB): total = states + working weights + activations + logits (of usable)")
    rows = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for name in PAPER_MODELS:
        preset = HUB_PRESETS[name]
        for gb in (40, 80):
            for recompute in (False, True):
                try:
                    plan = plan_finetune(preset.shape, batch_size, seq_len, precision, recompute, gb, 8)
                    e = plan.estimate
                    cells = [str(plan.gpus), str(plan.micro_batch)]
                    cells.append(
                        f"{e.total / GIB:.1f} = {e.states / GIB:.1f} + {e.working_weights / GIB:.1f} + "
                        f"{e.activations / GIB:.1f} + {e.logits / GIB:.1f} (of {plan.usable / GIB:.1f})"
                    )
                except PlanError:
                    cells = ["does not fit on 8", "-", "-"]
                row = [preset.model_id, f"{gb} GB", "on" if recompute else "off", *cells]
                rows.append("| " + " | ".join(row) + " |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(plans_table())
