"""Rule finetune's job: a typed record of one fine-tuning run (`FinetuneJob`, JSON on disk for a
job on N ranks) and its one entry point, `execute`, whichever way the job runs:

- in the rule's own process: `execute(job, Whole())` (the model whole in this process);
- on N ranks: `python -m pipeline.train.finetune_job job.json` under torchrun
  (pipeline/train/launch.py), each rank `execute(job, Sharded(ranks))`; rank 0 writes.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

# the record's field types are imported at run time: from_json rebuilds them from their hints
from pipeline.curvature.config import CurvatureConfig  # noqa: TC001
from pipeline.data.heldout import PretrainCorpus  # noqa: TC001
from pipeline.evaluate.benchmark_registry import BenchmarkSettings  # noqa: TC001
from pipeline.evaluate.generation_config import Responses  # noqa: TC001
from pipeline.io import atomic_path
from pipeline.models.checkpoints import CheckpointSpec  # noqa: TC001
from pipeline.records import from_dict
from pipeline.runtime import pick_device, set_threads
from pipeline.tasks.registry import SPECS, TaskSpec  # noqa: TC001
from pipeline.train.config import FinetuneConfig  # noqa: TC001
from pipeline.train.launch import launch_job, run_rank

MODULE = "pipeline.train.finetune_job"


@dataclass(frozen=True)
class FinetuneJob:
    """One fine-tuning run: what is trained on what, how it is evaluated, where its outputs go, and on
    how many ranks it runs."""

    spec: CheckpointSpec
    cfg: FinetuneConfig
    task: TaskSpec  # the task's record: it opens as the task (pipeline/tasks/)
    corpus: PretrainCorpus  # the pre-training corpus: held-out perplexity, replay
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
    ranks: int = 1  # processes (1 GPU each on CUDA); > 1: FSDP2 under torchrun
    suite: BenchmarkSettings | None = None  # `eval.benchmarks`: the fine-tuned model on the lm-eval suite
    generation: Responses | None = None  # responses to the instruction set for the judged metric
    curvature: CurvatureConfig | None = None  # the curvature stage's settings: the line along θ_ft − θ_pre
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
            task=self.task.name,
            learning_rate=float(self.learning_rate),
            lambda_reg=float(self.lambda_reg),
            seed=int(self.seed),
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> FinetuneJob:
        """The record `to_json` wrote; its task record's type from the registry, by its `kind`."""
        d = json.loads(text)
        kind = d["task"].get("kind")
        if kind not in SPECS:
            raise ValueError(
                f"job record: task kind {kind!r} is not one of {sorted(SPECS)} (pipeline/tasks/registry.py)"
            )
        task = from_dict(SPECS[kind], d["task"])
        return from_dict(cls, d | {"task": task})


def execute(job: FinetuneJob, placement) -> list[dict]:
    """Fine-tune and evaluate (pipeline.train.finetune.finetune_run); rank 0 writes the metric rows.
    Returns them (the same on every rank; [] when stopped as if killed)."""
    from pipeline.tables import write_metrics
    from pipeline.train.finetune import finetune_run

    rows = finetune_run(job, placement)
    if placement.ranks.main:
        write_metrics(job.metrics_path, rows)
    return rows


def run(job: FinetuneJob, job_file: str | Path) -> None:
    """The job where its record says: in this process (1 rank), else on its ranks (`job_file` holds
    the record they read)."""
    if job.ranks > 1:
        run_on_ranks(job, job_file)
    else:
        run_in_process(job)


def run_grid(jobs: list[FinetuneJob], state_dir: str | Path) -> None:
    """Several runs in one job, one after another (`finetune.grid_per_job`: the grid's rates of one
    setting), each as `run` runs it alone; their outputs written once all have run. Each finished
    run's outputs are kept under `state_dir` beside its record: a job killed and started again
    (Snakemake removes a failed job's outputs) copies back the runs whose record is unchanged and
    trains only the others."""
    held = []
    for i, job in enumerate(jobs):
        kept = Path(state_dir) / f"run{i}"
        line = str(kept / "line.parquet") if job.line_path else None
        run_here = replace(job, metrics_path=str(kept / "metrics.parquet"), line_path=line)
        record = kept / "job.json"
        if not (record.is_file() and record.read_text() == run_here.to_json()):
            shutil.rmtree(kept, ignore_errors=True)
            kept.mkdir(parents=True)
            run(run_here, Path(job.state_dir) / "job.json")
            record.write_text(run_here.to_json())  # last: the run's outputs are complete
        held.append(run_here)
    for job, run_here in zip(jobs, held, strict=True):
        for src, dst in [(run_here.metrics_path, job.metrics_path), (run_here.line_path, job.line_path)]:
            if dst:
                with atomic_path(dst) as tmp:
                    shutil.copyfile(src, tmp)
    shutil.rmtree(state_dir)


def run_in_process(job: FinetuneJob) -> list[dict]:
    """The job in this process, the model whole."""
    from pipeline.train.placement import Whole

    set_threads(job.threads)
    return execute(replace(job, device=pick_device(job.device)), Whole())


def run_on_ranks(job: FinetuneJob, job_file: str | Path) -> None:
    """The job on its `ranks` processes under torchrun (each with its share of the job's threads),
    the model sharded (any rank count, one included); raises if a rank fails."""
    launch_job(MODULE, job, job_file)


def main(job_file: str) -> None:
    """One rank of a job started by torchrun: the model sharded over the job's ranks."""
    job = FinetuneJob.from_json(Path(job_file).read_text())
    run_rank(job, execute, job.cfg.collective_timeout_s)


if __name__ == "__main__":
    main(sys.argv[1])
