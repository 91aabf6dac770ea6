"""Rules pretrain and pretrain_stable's job: a typed record of one run of the pre-training sweep
(`PretrainJob`, JSON on disk for a job on N ranks) and its one entry point, `execute`, whichever way
the job runs, as fine-tuning's (pipeline/train/finetune_job.py):

- in the rule's own process: `execute(job, Whole())`;
- on N ranks: `python -m pipeline.train.pretrain_job job.json` under torchrun
  (pipeline/train/launch.py), each rank `execute(job, Sharded(ranks))`: every rank builds the same
  model from the seed and keeps its FSDP2 shards, takes its rows of each global batch, and writes
  its shards of the resume state (torch.distributed.checkpoint); rank 0 writes the checkpoint.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from pipeline.data.token_shards import ShardSet, pretrain_shards
from pipeline.records import from_dict
from pipeline.runtime import pick_device, set_threads
from pipeline.train.config import COLLECTIVE_TIMEOUT_S, PretrainConfig, execution
from pipeline.train.launch import launch_job, run_rank

MODULE = "pipeline.train.pretrain_job"


@dataclass(frozen=True)
class PretrainJob:
    """One run of the sweep: a budget's run (`budget`; under WSD its decay, from `branch_from`) or a
    segment of WSD's stable run (`stable_steps`, from the previous branch point `branch_from`)."""

    train_tokens: str | None  # the study's split (data/train_tokens.npy), or None with `token_shards`
    tokenizer_path: str
    preset: str
    seed: int
    cfg: PretrainConfig
    out: str  # the checkpoint directory (a budget), or the state at the branch step (a segment)
    state_path: str  # this run's own resume state, removed at the end
    budget: int | None = None
    stable_steps: int | None = None
    branch_from: str | None = None
    allow_repeat: bool = False
    device: str = "cpu"  # auto | cpu | cuda; the entry points resolve it (pipeline.runtime.pick_device)
    ranks: int = 1  # processes (1 GPU each on CUDA); > 1: FSDP2 under torchrun
    threads: int = 1
    stop_after: int | None = None  # stop as if killed after this many steps (tests of resumption)
    token_shards: ShardSet | None = None  # `pretrain.token_shards`: pre-tokenized data to train on

    def __post_init__(self) -> None:
        if (self.budget is None) == (self.stable_steps is None):
            raise ValueError("a pre-training job trains a budget or a stable segment: exactly one of the two")
        if self.cfg.batch_size % self.ranks:
            raise ValueError(
                f"pretrain.batch_size {self.cfg.batch_size} cannot be split evenly over "
                f"pretrain.ranks {self.ranks}"
            )

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> PretrainJob:
        return from_dict(cls, json.loads(text))


def rule_job(rule: Any) -> PretrainJob:
    """The job record of a `pretrain` or `pretrain_stable` rule's job (its `snakemake` object): the
    hyperparameters from its params, how the run executes from the config section (cadence,
    activation checkpointing: changing them reruns nothing), the data and the branch point from its
    inputs, the preset, seed and budget (or stable step) from its wildcards."""
    section, wc = rule.config["pretrain"], rule.wildcards
    cfg = PretrainConfig(**rule.params.hp, **execution(PretrainConfig, section))
    shards = pretrain_shards(section, rule.input.tokens)
    return PretrainJob(
        train_tokens=None if shards else rule.input.tokens,
        token_shards=shards,
        tokenizer_path=rule.input.tokenizer,
        preset=wc.model,
        seed=int(wc.pretrain_seed),
        cfg=cfg,
        branch_from=rule.input.get("branch"),
        out=rule.output[0],
        state_path=rule.params.state,
        device=rule.params.device,
        ranks=rule.resources.ranks,
        threads=rule.threads,
        budget=int(wc.budget) if "budget" in wc.keys() else None,
        stable_steps=int(wc.step) if "step" in wc.keys() else None,
        allow_repeat=rule.params.get("allow_repeat", False),
    )


def execute(job: PretrainJob, placement) -> None:
    """Train the job's run where `placement` puts the model (pipeline.train.pretrain): a stable
    segment or a budget."""
    from pipeline.train.pretrain import pretrain_run, stable_run

    (stable_run if job.stable_steps is not None else pretrain_run)(job, placement)


def run(job: PretrainJob, job_file: str | Path) -> None:
    """The job where its record says: in this process (1 rank), else on its ranks (`job_file` holds
    the record they read)."""
    from pipeline.train.placement import Whole

    if job.ranks > 1:
        launch_job(MODULE, job, job_file)
    else:
        set_threads(job.threads)
        execute(replace(job, device=pick_device(job.device)), Whole())


def main(job_file: str) -> None:
    """One rank of a job started by torchrun: the model sharded over the job's ranks."""
    run_rank(PretrainJob.from_json(Path(job_file).read_text()), execute, COLLECTIVE_TIMEOUT_S)


if __name__ == "__main__":
    main(sys.argv[1])
