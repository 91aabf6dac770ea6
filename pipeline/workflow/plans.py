"""The memory planner's plans of a study's fine-tuning jobs (pipeline/train/memory.py), from the
config at parse time: the model shape of each checkpoint and the `gpu:` / `finetune:` settings."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

from pipeline.models.families import family_shape
from pipeline.models.hub import HUB_PRESETS, hub_shape
from pipeline.models.presets import SIZE_PRESETS, preset_shape
from pipeline.models.shapes import ModelShape, shape_of
from pipeline.multimodal.config import HUB_TOWERS, tower_shape
from pipeline.runtime import pick_device  # its torch import is inside: parse time stays light
from pipeline.train.config import FinetuneConfig, execution, hyperparameters
from pipeline.train.memory import GpuSettings, Plan, PlanError, plan_run
from pipeline.workflow.multimodal import tower_config, toy_config, vlm_config, vlm_tasks

if TYPE_CHECKING:
    from pipeline.models.checkpoints import CheckpointSpec


def checkpoint_shape(spec: CheckpointSpec, vocab: int | None) -> ModelShape:
    """A checkpoint's model shape at parse time: its size preset (with the study tokenizer's
    `vocab`), its hub preset, or a local directory's config.json."""
    if spec.source == "sweep" and spec.model in SIZE_PRESETS:
        return preset_shape(spec.model, vocab or 50304)
    if spec.source == "local" and spec.path and Path(spec.path, "config.json").is_file():
        return shape_of(SimpleNamespace(**json.loads(Path(spec.path, "config.json").read_text())))
    shape = (hub_shape(spec.model_id) or family_shape(spec.model_id)) if spec.model_id else None
    if shape is None:
        known = ", ".join(p.model_id for p in HUB_PRESETS.values())
        raise PlanError(
            f"checkpoint {spec.name!r}: the memory planner knows the shapes of the size presets, local "
            f"checkpoints and {known}; for {spec.model_id or spec.model} set finetune.ranks (GPUs per job) "
            "and finetune.micro_batch_size"
        )
    return shape


def finetune_plan(spec: CheckpointSpec, config: dict) -> Plan:
    """The planner's GPUs and micro-batch of a fine-tuning job on `spec` on the config's GPUs
    (`gpu:` section); finetune.ranks and micro_batch_size, when set, are kept. PlanError when
    nothing fits."""
    shape = checkpoint_shape(spec, config["tokenizer"]["vocab_size"])
    return _plan(shape, config, config["finetune"]["ranks"])


def job_micro_batch(spec: CheckpointSpec, config: dict, gpus: int) -> int:
    """The micro-batch of a job whose device is chosen as it starts (`device: auto` on a GPU
    machine: no resource carries a plan), by `finetune_plan`'s arithmetic on its `gpus` GPUs. In the
    job: the shape from the checkpoint's architecture (a preset, or a local or cached hub
    checkpoint's config.json), so a hub model without a preset is planned too."""
    from pipeline.models.loading import architecture  # heavy (torch): in the job only

    model = architecture(spec, config["tokenizer"]["vocab_size"])
    return _plan(shape_of(model.config), config, gpus).micro_batch


def run_micro_batch(
    spec: CheckpointSpec, config: dict, gpus: int, device: str, planned: int | None
) -> int | None:
    """The micro-batch a fine-tuning job runs with: finetune.micro_batch_size when set; with
    `device: cuda` the plan's that sized the job (`planned`, its `micro_batch` resource); on a GPU
    the job finds as it starts (`device: auto`) `job_micro_batch`; on the CPU none (whole batches)."""
    micro_batch = config["finetune"].get("micro_batch_size")
    if micro_batch is None and planned is None and pick_device(device) != "cpu":
        return job_micro_batch(spec, config, gpus)
    return micro_batch or planned


def _plan(shape: ModelShape, config: dict, gpus: int | None) -> Plan:
    ft = config["finetune"]
    cfg = FinetuneConfig(**hyperparameters(FinetuneConfig, ft), **execution(FinetuneConfig, ft))
    seq_len = min(cfg.seq_len or shape.context, shape.context)
    if vlm_tasks(config):  # LLaVA's stage 2 takes multimodal.max_length; a job's plan fits the longer
        seq_len = max(seq_len, min(vlm_config(config).max_length, shape.context))
    return plan_run(shape, cfg, seq_len, GpuSettings(**config["gpu"]), gpus=gpus, frozen=vlm_frozen(config))


def vlm_frozen(config: dict) -> int:
    """The frozen tower's parameters beside a LLaVA study's language models (0 for a text study)."""
    if not vlm_tasks(config):
        return 0
    tower = tower_config(config)
    shape = tower_shape(tower, toy_config(config).image_size)
    if shape is None:
        raise PlanError(
            f"multimodal.tower.model_id: the memory planner knows the towers {sorted(HUB_TOWERS)}, not "
            f"{tower.model_id}; set finetune.ranks (GPUs per job) and finetune.micro_batch_size"
        )
    return shape[0]
