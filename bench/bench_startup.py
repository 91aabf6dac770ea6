"""Start-up of one fine-tuning job: wall time from process start to its first optimizer step.

The job runs as rule finetune runs it: a fresh interpreter executing Snakemake's script preamble (the
pickled `snakemake` object) followed by rules/scripts/finetune.py, with the default config's
fine-tuning settings (config.yaml, validated and defaulted by the schema) on a tiny real study built
in a temporary directory from the repo's own data, as the tests build theirs (tests/conftest.py
`study_files`): a BPE tokenizer of the config's vocabulary on Moby-Dick, the `tiny` preset saved
with save_pretrained, the corpus table and an LM task table of Moby-Dick chapters.

The first step is the loop's first log record after an optimizer step ("rank 0 of 1 holds ...",
pipeline/train/loop.py), read with its timestamp from the job's log; the job is stopped there.
Each repeat is a fresh process, run two ways alternately:
- warm: as in a local run (config warm_start, the default): the job's process hands the job to a
  fork of the run's warm-start server, started once before the repeats (its import time is printed:
  a run pays it once, beside its first jobs);
- cold: the job in its own process, as on a cluster or with warm_start false.
Printed: wall and CPU seconds (CPU: user + system, the steadier figure on a shared machine; warm:
the job's fork's), best and median; `--baseline DIR` runs another tree's job alternately
(before/after in one run); `--floor` times a fresh interpreter importing only what every cold job
pays whatever the pipeline does (Snakemake's preamble, torch, transformers' OLMo-2 model). Last
line `startup <seconds>`: this tree's best wall time, warm.

    python bench/bench_startup.py [--repeats 5] [--baseline DIR] [--floor]
"""

from __future__ import annotations

import argparse
import os
import pickle
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import yaml

from pipeline import warm_start

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "rules" / "scripts" / "finetune.py"
MARKER = "rank 0 of 1 holds"  # the loop's first record after an optimizer step
TASK = "book"


def build_study(out: Path, config: dict) -> dict:
    """The job's inputs on disk: checkpoint dir, corpus table, task table (conftest's study_files,
    at the config's vocabulary)."""
    from pipeline.data.corpus import build_corpus, load_embedded
    from pipeline.data.encode import task_frame
    from pipeline.data.task_items import Task
    from pipeline.data.tokenizer import as_hf_tokenizer, train_bpe
    from pipeline.io import write_parquet
    from pipeline.models.build import build_model, model_config

    docs = load_embedded("moby_dick", ROOT / "data" / "packages")
    tok = train_bpe([d.text for d in docs[:60]], vocab_size=config["tokenizer"]["vocab_size"])
    tok.save(str(out / "tokenizer.json"))
    tokenizer = as_hf_tokenizer(out / "tokenizer.json")
    preset = config["pretrain"]["presets"][0]
    cfg = model_config(preset, len(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id)
    ckpt = out / "ckpt"
    build_model(cfg, seed=0).save_pretrained(ckpt)
    tokenizer.save_pretrained(ckpt)
    write_parquet(out / "corpus.parquet", build_corpus(docs, config["corpus"]["split_fractions"]))
    splits = {"train": [d.text for d in docs[60:70]], "validation": [docs[70].text], "test": [docs[71].text]}
    write_parquet(out / "task.parquet", task_frame(Task(TASK, "lm", splits, "moby_dick")))
    return {"ckpt": str(ckpt), "preset": preset}


def job_record(out: Path) -> bytes:
    """The pickled `snakemake` object of one rule finetune job on the tiny study built in `out`."""
    from snakemake.iocontainers import (
        InputFiles,
        Log,
        OutputFiles,
        Params,
        ResourceList,
        Snakemake,
        Wildcards,
    )

    from pipeline.models.checkpoints import CheckpointSpec
    from pipeline.workflow.config import eval_config
    from pipeline.workflow.params import (
        benchmark_params,
        checkpoint_params,
        curvature_finetune_params,
        finetune_params,
    )
    from pipeline.workflow.schema import load_schema, validate_config

    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["study"] = "startup"
    validate_config(config, load_schema(ROOT / "config" / "schema.yaml"))
    study = build_study(out, config)
    spec = CheckpointSpec("tiny-startup", "local", study["preset"], 1000, path=study["ckpt"])
    method, lr, lam, seed = "sft", "0.1", "0.0", "0"
    wildcards = Wildcards(
        fromdict=dict(checkpoint=spec.name, task=TASK, method=method, lr=lr, lam=lam, seed=seed)
    )
    params = Params(
        fromdict=dict(
            spec=checkpoint_params(spec),
            hp=finetune_params(config, method),
            task={"kind": "text", "name": TASK, "table": str(out / "task.parquet"), "token_cache": None},
            eval=eval_config(config),
            token_cache=None,
            bench=benchmark_params(config),
            curv=curvature_finetune_params(config),
            state=str(out / "state"),
            device="cpu",
        )
    )
    inputs = InputFiles([study["ckpt"], str(out / "task.parquet"), str(out / "corpus.parquet")])
    for i, name in enumerate(["checkpoint", "task", "corpus"]):  # checkpoint: a list of one, as the rule's
        inputs._set_name(name, i, i + 1 if name == "checkpoint" else None)
    job = Snakemake(
        inputs,
        OutputFiles(fromdict=dict(metrics=str(out / "metrics.parquet"), line=str(out / "line.parquet"))),
        params,
        wildcards,
        config["finetune"]["threads"],
        ResourceList(fromdict={"ranks": 1}),
        Log(fromdict={"log": str(out / "job.log")}),
        config,
        "finetune",
        None,
        str(SCRIPT.parent),
    )
    return pickle.dumps(job, protocol=4)


def job_script(out: Path, root: Path, record: bytes) -> Path:
    """The script Snakemake runs for the job with the code of the tree at `root`: its preamble that
    unpickles `snakemake`, then that tree's rules/scripts/finetune.py."""
    script = root / "rules" / "scripts" / "finetune.py"
    preamble = (
        f"import sys; sys.path.extend({[str(root)]!r}); import pickle; "
        f"snakemake = pickle.loads({record!r}); "
        "from snakemake.logging import logger; from snakemake.iocontainers import Snakemake; "
        f"__real_file__ = __file__; __file__ = {str(script)!r};\n"
    )
    path = out / f"finetune_job_{abs(hash(str(root)))}.py"
    path.write_text(preamble + script.read_text())
    return path


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_children(server: warm_start.Server) -> list[int]:
    """The warm server's forks now running (or not yet reaped)."""
    pid = server.process.pid
    return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def job_pid(proc: subprocess.Popen, server: warm_start.Server | None) -> int:
    """The process running the job: the job's own, or (warm) the server's fork of it."""
    if server is None:
        return proc.pid
    children = server_children(server)
    if len(children) != 1:
        raise RuntimeError(
            f"the warm server runs {len(children)} jobs, not this one alone; "
            f"its log:\n{server.log.read_text()}"
        )
    return children[0]


def first_step(
    script: Path, root: Path, log: Path, server: warm_start.Server | None = None, timeout: float = 300.0
) -> tuple[float, float]:
    """(wall, CPU) seconds from starting the job's process to its first optimizer step: wall to the
    marker's timestamp in the job's log; CPU (of the process running the job) when the bench sees
    the marker (polled every 50 ms, so up to ~50 ms of the step after it). The job is stopped there.
    With `server`, the job's process hands the job to it."""
    log.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k != warm_start.WARM_ENV} | {"PYTHONPATH": str(root)}
    env |= {warm_start.WARM_ENV: str(server.socket)} if server else {}
    t0 = time.time()
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        while time.time() - t0 < timeout:
            text = log.read_text() if log.is_file() else ""
            line = next((x for x in text.splitlines() if MARKER in x), None)
            if line is not None:
                cpu = cpu_seconds(job_pid(proc, server))
                stamp = datetime.strptime(" ".join(line.split()[:2]), "%Y-%m-%d %H:%M:%S,%f")
                return stamp.timestamp() - t0, cpu
            if proc.poll() is not None:
                raise RuntimeError(
                    f"the job exited ({proc.returncode}) before its first step:\n{text[-3000:]}"
                )
            time.sleep(0.05)
        raise RuntimeError(f"no first step within {timeout} s")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # (warm: its fork follows it)
            proc.wait()
        while server and server_children(server):
            time.sleep(0.05)  # the fork gone and reaped before the next job


# what every fine-tuning job imports whatever the pipeline does: Snakemake's preamble, torch and
# transformers' OLMo-2 model (with modeling_utils): the start-up no change here can remove
FLOOR = (
    "from snakemake.logging import logger; from snakemake.iocontainers import Snakemake; "
    "import torch; import transformers.models.olmo2.modeling_olmo2"
)


def floor_seconds() -> tuple[float, float]:
    """(wall, CPU) seconds from starting a fresh interpreter to the end of its FLOOR imports (read
    in the process itself, as the jobs' are at their marker: its exit is not counted)."""
    t0 = time.time()
    done = subprocess.run(
        [sys.executable, "-c", f"{FLOOR}; import time; print(time.time(), time.process_time())"],
        check=True,
        capture_output=True,
        text=True,
    )
    end, cpu = map(float, done.stdout.split()[-2:])
    return end - t0, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--baseline",
        type=Path,
        help="another source tree (e.g. `git archive <commit> pipeline rules | tar -x -C DIR`): its job "
        "runs alternately with this tree's, as the baseline",
    )
    ap.add_argument(
        "--floor",
        action="store_true",
        help="also time FLOOR (imports every job pays) alternately with the jobs",
    )
    args = ap.parse_args()
    trees = {"this tree": ROOT} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        out = Path(tmp)
        record = job_record(out)
        scripts = {name: job_script(out, root, record) for name, root in trees.items()}
        os.environ["PYTHONPATH"] = str(ROOT)  # the server's environment is its jobs' (first_step)
        t0 = time.time()
        server = warm_start.start(out / "logs")
        if server is None:
            raise SystemExit(f"warm start cannot run here: {warm_start.available()}")
        while not server.socket.exists():
            time.sleep(0.05)
        print(f"warm-start server ready {time.time() - t0:.2f} s after its start (once per run)", flush=True)
        # (name, tree, server): this tree warm and cold, the baseline as its tree runs it
        variants = [("this tree (warm)", ROOT, server), ("this tree (cold)", ROOT, None)]
        variants += [("baseline", trees["baseline"], None)] if args.baseline else []
        times: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in variants}
        times |= {"floor": []} if args.floor else {}
        try:
            for i in range(args.repeats):
                for name, root, warm in variants:
                    script = scripts["baseline" if name == "baseline" else "this tree"]
                    times[name].append(first_step(script, root, out / "job.log", warm))
                    wall, cpu = times[name][-1]
                    line = f"run {i + 1} {name}: {wall:.2f} s wall, {cpu:.2f} s CPU to the first step"
                    print(line, flush=True)
                if args.floor:
                    times["floor"].append(floor_seconds())
                    wall, cpu = times["floor"][-1]
                    print(f"run {i + 1} floor: {wall:.2f} s wall, {cpu:.2f} s CPU (imports only)", flush=True)
        finally:
            warm_start.stop(server)
    for name, runs in times.items():
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        print(
            f"{name}: wall best {min(walls):.2f} s, median {statistics.median(walls):.2f} s; "
            f"CPU best {min(cpus):.2f} s, median {statistics.median(cpus):.2f} s ({len(runs)} processes)"
        )
    print(f"startup {min(w for w, _ in times['this tree (warm)']):.2f}")


if __name__ == "__main__":
    main()
