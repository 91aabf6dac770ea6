"""Rule vlm_projector: LLaVA's stage 1 on one checkpoint (pipeline/train/llava_stage1.py)."""

from pipeline.models.checkpoints import CheckpointSpec
from pipeline.runtime import pick_device, set_threads, setup_logging
from pipeline.train.llava_stage1 import Stage1Job, run_stage1
from pipeline.train.memory import GpuSettings
from pipeline.workflow.multimodal import stage1_config, vlm_config

setup_logging(snakemake.log[0])
set_threads(snakemake.threads)
# the hyperparameters are in params (a change reruns the job); how it executes (the evaluation
# batch) comes from the config
job = Stage1Job(
    spec=CheckpointSpec(**snakemake.params.spec),
    path=snakemake.input.checkpoint[0] if snakemake.input.checkpoint else None,
    task=snakemake.wildcards.task,
    data_json=snakemake.input.data,
    tower_dir=snakemake.input.tower,
    stage1=stage1_config(snakemake.config),
    vlm=vlm_config(snakemake.config),
    study=snakemake.config["study"],
    projector_path=snakemake.output.projector,
    metrics_path=snakemake.output.base,
    state_dir=snakemake.params.state,
    device=pick_device(snakemake.params.device),
    gpu=GpuSettings(**snakemake.config["gpu"]),  # the planner's micro-batch on CUDA (changes no number)
)
run_stage1(job)
