"""Parse time of the LLaVA setting (docs/multimodal.md): which fine-tuning tasks are LLaVA's, the
`multimodal:` section as its dataclasses, its checks before any job, and its rules' params.

A LLaVA task (`finetune.tasks: [llava]`) is stage 2: its runs are the fine-tuning sweep's (grid,
search, seeds_at, methods as rows' `modification`), its "base" rows are stage 1's (rule
vlm_projector), its hyperparameters the `finetune:` section's. Light: no torch.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline import layout
from pipeline.fields import changes_numbers
from pipeline.models.hub import cached_commit, download_hint
from pipeline.multimodal.config import (
    VLM_TASKS,
    LocalData,
    Stage1Config,
    TowerConfig,
    ToyDataConfig,
    VlmConfig,
    toy_data_config,
)
from pipeline.multimodal.hub_data import hub_ref, offline, resolve

if TYPE_CHECKING:
    from pipeline.train.config import FinetuneConfig


def vlm_tasks(config: dict) -> list[str]:
    """The study's LLaVA tasks (stage 2), in finetune.tasks order."""
    ft = config["finetune"]
    if not (ft["enabled"] and ft["tasks"]):
        return []
    return [t for t in ft["tasks"] if t in VLM_TASKS]


def text_tasks(config: dict) -> list[str]:
    """The study's other fine-tuning tasks."""
    return [t for t in config["finetune"]["tasks"] if t not in VLM_TASKS]


def multimodal_enabled(config: dict) -> bool:
    return bool(vlm_tasks(config))


def section(config: dict) -> dict:
    return config["multimodal"]


def _numbers(obj: Any) -> dict:
    """The fields of a config dataclass that change numbers (a rule's params)."""
    return {f.name: getattr(obj, f.name) for f in fields(obj) if changes_numbers(f)}


def vlm_config(config: dict) -> VlmConfig:
    s = section(config)
    return VlmConfig(**{f.name: s[f.name] for f in fields(VlmConfig) if f.name in s})


def tower_config(config: dict) -> TowerConfig:
    return TowerConfig(**section(config)["tower"])


def stage1_config(config: dict) -> Stage1Config:
    s = dict(section(config)["stage1"])
    if "betas" in s:
        s["betas"] = tuple(s["betas"])
    return Stage1Config(**s)


def data_source(config: dict) -> str:
    return section(config)["data"]["source"]


def toy_config(config: dict) -> ToyDataConfig:
    return toy_data_config(section(config)["data"]["toy"])


def local_data(config: dict) -> LocalData:
    return LocalData(**section(config)["data"]["local"])


def check_local_data(local: LocalData) -> None:
    """Each local file exists; each hub reference is well formed and, offline, in the hub cache (online,
    rule vlm_data fetches it, the first job). ValueError naming the key."""
    key = "multimodal.data.local"
    entries = [("stage1", local.stage1, None), ("stage2", local.stage2, None)]
    entries += [(f"eval.{name}", value, name) for name, value in local.eval.items()]
    for field, value, eval_set in entries:
        ref = hub_ref(value, eval_set) if value else None
        if ref is not None and offline():
            try:
                resolve(value, f"{key}.{field}", eval_set=eval_set, local_files_only=True)
            except FileNotFoundError as e:
                raise ValueError(str(e)) from None
        elif ref is None and (value is None or not Path(value).exists()):
            raise ValueError(f"{key}.{field}: {value!r} does not exist")
    if local.image_dir is None or not Path(local.image_dir).is_dir():
        raise ValueError(f"{key}.image_dir: {local.image_dir!r} is not a folder (LLaVA's images)")


def check_multimodal(config: dict, methods: dict[str, FinetuneConfig], judged: bool) -> None:
    """What a LLaVA study needs, before any job (`methods`: each fine-tuning method's config; `judged`:
    the judged metric is on); errors (ValueError) name the key."""
    tasks = vlm_tasks(config)
    if config["finetune"]["select_metric"] == "vlm_score" and text_tasks(config):
        raise ValueError(
            f"finetune.select_metric: vlm_score is a LLaVA task's; tasks {text_tasks(config)} have none"
        )
    if not tasks:
        return
    vlm_config(config), stage1_config(config)
    tower = tower_config(config)
    if data_source(config) == "toy":
        toy_config(config)
    else:
        check_local_data(local_data(config))
    if (
        tower.source == "hub"
        and tower.offline
        and cached_commit(tower.model_id, tower.revision, tower.cache_dir) is None
    ):
        raise ValueError(
            f"multimodal.tower.model_id: {tower.model_id}@{tower.revision} is not in the hub cache "
            f"(offline); {download_hint(tower.model_id, tower.revision, tower.cache_dir)}"
        )
    if judged:
        raise ValueError(f"alpaca_eval: the judged metric reads text tasks, not LLaVA's {tasks}")
    for method, cfg in methods.items():
        if cfg.params != "all" or cfg.linearized or cfg.replay_fraction or cfg.wise_ft_alphas:
            raise ValueError(
                f"finetune.methods.{method}: a LLaVA task ({tasks}) trains the projector and the language "
                "model (params: all) without linearization, replay or WiSE-FT; give it a study of its own"
            )


def data_params(config: dict) -> dict:
    """Rule vlm_data's params: where the data come from (the toy's settings, or the local files)."""
    out: dict[str, Any] = {"source": data_source(config), "on_missing": vlm_config(config).on_missing}
    if out["source"] == "toy":
        return out | {"toy": _numbers(toy_config(config))}
    return out | {"local": asdict(local_data(config))}


def tower_params(config: dict) -> dict:
    """Rule vlm_tower's params: every tower setting that changes its weights."""
    return _numbers(tower_config(config))


def stage1_params(config: dict) -> dict:
    """Rule vlm_projector's params: stage 1's hyperparameters and the data settings it reads."""
    return {"stage1": _numbers(stage1_config(config)), "vlm": _numbers(vlm_config(config))}


def stage2_task_params(config: dict, wildcards) -> dict:
    """The record of a LLaVA task in its stage-2 jobs (pipeline/tasks/llava.py LlavaTaskSpec): its data,
    tower and stage-1 projector, the `multimodal:` settings that change numbers, and where the model
    is saved when multimodal.save_hf (which, like the other execution settings, the job reads from
    the config: changing it reruns nothing)."""
    fields = {k: getattr(wildcards, k) for k in ("checkpoint", "task", "method", "lr", "lam", "seed")}
    return {
        "kind": "llava",
        "name": wildcards.task,
        "data": layout.study_path(config["study"], layout.VLM_DATA),
        "tower": layout.study_path(config["study"], layout.VLM_TOWER),
        "projector": layout.study_path(
            config["study"], layout.VLM_PROJECTOR, checkpoint=wildcards.checkpoint, task=wildcards.task
        ),
        "config": _numbers(vlm_config(config)),
        "hf_dir": layout.study_path(config["study"], layout.VLM_HF, **fields),
    }
