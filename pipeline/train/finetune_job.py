"""Rule finetune's job from a JSON-serialisable description, in the job's own process or on N
ranks: `python -m pipeline.train.finetune_job job.json`, started by torchrun
(pipeline/train/launch.py); every rank fine-tunes its shards, rank 0 writes the outputs."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import asdict

from pipeline.curvature.lines import write_lines
from pipeline.models.checkpoints import CheckpointSpec
from pipeline.runtime import pick_device, set_threads, setup_rank_logging
from pipeline.tables import write_metrics
from pipeline.train.config import FinetuneConfig
from pipeline.train.distributed import SINGLE, Ranks, init_ranks
from pipeline.train.finetune import finetune_run

MODULE = "pipeline.train.finetune_job"


def describe(spec: CheckpointSpec, cfg: FinetuneConfig, outputs: dict, device: str, **kwargs) -> dict:
    """The job as JSON: the checkpoint, the run config, outputs, the requested device (`auto`,
    `cpu`, `cuda`) and finetune_run's other arguments."""
    return {"spec": asdict(spec), "cfg": asdict(cfg), "outputs": outputs, "device": device, "kwargs": kwargs}


def run(job: dict, device: str, ranks: Ranks = SINGLE, after: Callable | None = None) -> list[dict]:
    """finetune_run on the described job; the metric rows (the same on every rank)."""
    return finetune_run(
        CheckpointSpec(**job["spec"]),
        cfg=FinetuneConfig(**job["cfg"]),
        device=device,
        ranks=ranks,
        after=after,
        **job["kwargs"],
    )


def write_outputs(job: dict, rows: list[dict], line_rows: list[dict]) -> None:
    write_metrics(job["outputs"]["metrics"], rows)
    write_lines(job["outputs"]["line"], line_rows)  # empty when the curvature stage is off


def main(job_file: str) -> None:
    """One rank of a sharded job (under torchrun)."""
    import torch.distributed as dist

    with open(job_file) as f:
        job = json.load(f)
    ranks, device = init_ranks(pick_device(job["device"]), job["cfg"]["collective_timeout_s"])
    setup_rank_logging(ranks.rank)
    set_threads(job["threads"])
    try:
        rows = run(job, device, ranks)
        if ranks.main:
            write_outputs(job, rows, [])  # no curvature line in a sharded run
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
