"""Rule finetune's job: a typed record of one fine-tuning run (`FinetuneJob`, JSON on disk for a
job on N ranks) and its one entry point, `execute`, whichever way the job runs:

- in the rule's own process: `execute(job, Whole())` (the model whole in this process);
- on N ranks: `python -m pipeline.train.finetune_job job.json` under torchrun
  (pipeline/train/launch.py), each rank `execute(job, Sharded(ranks))`; rank 0 writes.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from pipeline.models.checkpoints import CheckpointSpec
from pipeline.runtime import pick_device, set_threads, setup_rank_logging
from pipeline.train.config import FinetuneConfig
from pipeline.train.launch import run_on_ranks as launch

MODULE = "pipeline.train.finetune_job"


@dataclass(frozen=True)
class FinetuneJob:
    """One fine-tuning run: what is trained on what, how it is evaluated, where its outputs go."""

    spec: CheckpointSpec
    cfg: FinetuneConfig
    task_name: str
    task_path: str
    corpus_path: str
    eval_cfg: dict  # `eval:` (split, max_tokens, seq_len, batch_size): the pre-training perplexity
    learning_rate: float
    lambda_reg: float
    seed: int
    study: str
    state_dir: str  # resume files of this run, removed at the end
    metrics_path: str
    method: str = "sft"  # the fine-tuning method's name (finetune.methods): the rows' `modification`
    line_path: str | None = None  # the curvature line's rows (Appendix D), when `curvature` is set
    path: str | None = None  # the checkpoint's directory (sweep / local checkpoints)
    device: str = "cpu"  # auto | cpu | cuda; the entry points resolve it (pipeline.runtime.pick_device)
    bench_cfg: dict | None = None  # `eval.benchmarks`: the fine-tuned model on the lm-eval suite
    gpu: dict | None = None  # `gpu:`: the memory planner's micro-batch on CUDA (changes no number)
    token_cache: str | None = None  # where an LM task's tokenized training split is shared by jobs
    generation: dict | None = None  # {instructions, config, output}: responses for the judged metric
    curvature: dict | None = None  # the curvature stage's settings: the line along θ_ft − θ_pre
    # a LLaVA stage-2 task: {data: data.json, tower: dir, projector: stage 1's, config: VlmConfig, hf_dir}
    vlm: dict | None = None
    stop_after: int | None = None  # stop as if killed after this many steps (tests of resumption)
    threads: int = 1

    def __post_init__(self) -> None:
        if self.learning_rate <= 0:
            raise ValueError(
                f"finetune.learning_rates: a learning rate must be > 0, got {self.learning_rate}"
            )
        if self.lambda_reg < 0:
            raise ValueError(f"finetune.lambdas: λ must be >= 0, got {self.lambda_reg}")
        if self.cfg.proximal != "coupled" and self.lambda_reg * self.learning_rate > 1:
            raise ValueError(
                f"finetune.lambdas: the {self.cfg.proximal} proximal step θ ← θ − λη(θ − θ_pre) overshoots "
                f"θ_pre when λη > 1 (λ {self.lambda_reg:g}, learning rate {self.learning_rate:g})"
            )
        if self.curvature is not None and self.line_path is None:
            raise ValueError("a fine-tuning job with the curvature line needs line_path")

    def identity(self) -> dict:
        """The metric-row columns that identify this run."""
        return dict(
            **self.spec.row_fields(self.study),
            modification=self.method,
            task=self.task_name,
            learning_rate=float(self.learning_rate),
            lambda_reg=float(self.lambda_reg),
            seed=int(self.seed),
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> FinetuneJob:
        d = json.loads(text)
        return cls(**{**d, "spec": CheckpointSpec(**d["spec"]), "cfg": FinetuneConfig(**d["cfg"])})


def execute(job: FinetuneJob, placement) -> list[dict]:
    """Fine-tune and evaluate (pipeline.train.finetune.finetune_run), then, where the placement
    holds the whole model, the curvature line; rank 0 writes the metric rows and the line's rows.
    Returns the metric rows (the same on every rank; [] when stopped as if killed)."""
    from pipeline.curvature.lines import write_lines
    from pipeline.curvature.stage import FinetuneLine
    from pipeline.tables import write_metrics
    from pipeline.train.finetune import finetune_run

    line = None
    if job.curvature is not None:
        if not placement.holds_whole_model:
            raise ValueError(
                "the curvature stage's line along θ_ft − θ_pre needs the whole model in one process: "
                "not in a sharded fine-tuning job (finetune.ranks > 1)"
            )
        line = FinetuneLine(job.curvature, job.corpus_path, job.eval_cfg, job.identity())
    rows = finetune_run(job, placement, after=line)
    if placement.ranks.main:
        write_metrics(job.metrics_path, rows)
        if job.line_path is not None:
            write_lines(job.line_path, line.rows if line is not None else [])
    return rows


def run_in_process(job: FinetuneJob) -> list[dict]:
    """The job in this process, the model whole."""
    from pipeline.train.placement import Whole

    set_threads(job.threads)
    return execute(replace(job, device=pick_device(job.device)), Whole())


def run_on_ranks(job: FinetuneJob, ranks: int, job_file: str | Path) -> None:
    """The job on `ranks` processes under torchrun (each with its share of the job's threads),
    the model sharded (any rank count, one included); raises if a rank fails."""
    per_rank = replace(job, threads=max(1, job.threads // ranks))
    launch(MODULE, per_rank.to_json(), ranks, job_file, per_rank.threads)


def main(job_file: str) -> None:
    """One rank of a job started by torchrun: the model sharded over the job's ranks."""
    import torch.distributed as dist

    from pipeline.train.distributed import init_ranks
    from pipeline.train.placement import Sharded

    job = FinetuneJob.from_json(Path(job_file).read_text())
    ranks, device = init_ranks(pick_device(job.device), job.cfg.collective_timeout_s)
    setup_rank_logging(ranks.rank)
    set_threads(job.threads)
    try:
        execute(replace(job, device=device), Sharded(ranks))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
