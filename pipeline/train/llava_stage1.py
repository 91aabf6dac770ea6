"""Rule vlm_projector's job: LLaVA's stage 1 on one checkpoint (Liu et al., 2023; the paper's
Table 2, stage 1): the projector between the frozen vision tower and the frozen language model
learns to caption (the `plain` template on stage 1's captions), AdamW with warmup and a cosine
schedule, through the pipeline's training loop (a killed job resumes from its last state file).
Every stage-2 run of the checkpoint starts from the projector it saves. The stage-1 model is then
scored on the five benchmarks: the task's base rows (`modification` none, `extra.stage` stage1), what
stage 2 is compared with (the checkpoint with a projector, before instruction tuning).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from pipeline.io import atomic_path
from pipeline.models.loading import default_dtype, dtype_name
from pipeline.models.shapes import shape_of
from pipeline.multimodal.vlm_task import PROJECTOR, VlmTask
from pipeline.tables import metric_row, write_metrics
from pipeline.train import resume
from pipeline.train.config import TrainConfig, resolve_precision, warmup_fraction_of
from pipeline.train.loop import train
from pipeline.train.memory import GpuSettings, plan_finetune
from pipeline.train.placement import WHOLE

if TYPE_CHECKING:
    from pipeline.models.checkpoints import CheckpointSpec
    from pipeline.multimodal.config import Stage1Config, VlmConfig

log = logging.getLogger(__name__)
STAGE = "stage1"


@dataclass(frozen=True)
class Stage1Job:
    """One checkpoint's stage 1: where its inputs are and where its outputs go."""

    spec: CheckpointSpec
    path: str | None
    task: str  # the LLaVA task (finetune.tasks) whose base rows these are
    data_json: str
    tower_dir: str
    stage1: Stage1Config
    vlm: VlmConfig
    study: str
    projector_path: str
    metrics_path: str
    state_dir: str
    device: str = "cpu"
    gpu: GpuSettings | None = None  # `gpu:`: the memory planner's micro-batch on CUDA (changes no number)


def steps_of(per_epoch: int, cfg: Stage1Config) -> int:
    total = per_epoch * cfg.epochs
    return total if cfg.max_steps is None else min(total, cfg.max_steps)


def planned_micro_batch(model, cfg: Stage1Config, seq_len: int, precision: str, job: Stage1Job) -> int | None:
    """On CUDA, the micro-batch the memory planner fits on one GPU (the projector trains; the
    language model and the tower are frozen, the loss still backpropagates through the former)."""
    if torch.device(job.device).type != "cuda" or job.gpu is None:
        return None
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    tower = sum(p.numel() for p in model.model.vision_tower.parameters())
    text = model.config.text_config
    plan = plan_finetune(
        shape_of(text),
        cfg.batch_size,
        seq_len,
        precision,
        False,
        job.gpu.memory_gb,
        1,
        headroom=job.gpu.headroom,
        frozen=tower,
        trained=trained,
    )
    log.info("memory plan: %s", plan.describe())
    return plan.micro_batch


def run_stage1(job: Stage1Job) -> list[dict]:
    """Train the projector (module docstring), save it, score the stage-1 model; its rows."""
    cfg = job.stage1
    precision = resolve_precision(cfg.precision, job.device)
    torch.manual_seed(cfg.seed)
    task = VlmTask.open(job.task, "stage1", job.data_json, job.tower_dir, job.vlm, projector_seed=cfg.seed)
    model, tokenizer = WHOLE.load_model(job.spec, job.path, job.device, precision, False, build=task.build)
    context = model.config.text_config.max_position_embeddings
    batch_fn, per_epoch = task.train_batches(tokenizer, context, cfg.batch_size, cfg.seed)
    steps = steps_of(per_epoch, cfg)
    log.info(
        "stage 1 on %s: the projector (%d parameters) on %d captions, %d steps (%d per epoch)",
        job.spec.name,
        sum(p.numel() for p in model.parameters() if p.requires_grad),
        len(task.data.records),
        steps,
        per_epoch,
    )
    train_cfg = TrainConfig(
        steps=steps,
        lr=cfg.lr,
        betas=tuple(cfg.betas),
        weight_decay=cfg.weight_decay,
        warmup_fraction=warmup_fraction_of(0.0, cfg.warmup_steps, steps),
        schedule=cfg.schedule,
        grad_clip=cfg.grad_clip,
        precision=precision,
    )
    state = Path(job.state_dir) / "train"
    micro = cfg.micro_batch_size or planned_micro_batch(model, cfg, task.max_len(context), precision, job)
    result = train(model, batch_fn, train_cfg, state_path=state, micro_batch_size=micro)
    projector = {k: v.detach().cpu() for k, v in model.state_dict().items() if k.startswith(PROJECTOR)}
    with atomic_path(job.projector_path) as tmp:
        torch.save(projector, tmp)
    dtype = default_dtype(torch.device(job.device))
    model = model.to(dtype).eval()
    common = dict(
        **job.spec.row_fields(job.study),
        modification="none",
        task=job.task,
        extra={
            "stage": STAGE,
            **dataclasses.asdict(cfg),
            "steps": result.steps_done,
            "dtype": dtype_name(model),
        },
    )
    rows = task.benchmark_rows(model, tokenizer, common, WHOLE.ranks)
    rows.append(
        metric_row(
            **common,
            eval_data=job.task,
            split="train",
            metric="final_train_loss",
            value=result.losses[-1] if result.losses else float("nan"),
        )
    )
    write_metrics(job.metrics_path, rows)
    resume.remove(state, WHOLE.ranks)
    return rows
