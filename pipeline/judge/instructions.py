"""The instruction set models answer (config `alpaca_eval.instructions`), as one table in
AlpacaEval's schema: `instruction` (required), `output` (the dataset's own reference answer),
`generator` (who wrote it) and `dataset` (where the instruction is from), plus `index` (its row).

- hub:   a file of a hub dataset repo, read with `huggingface_hub` (AlpacaEval's 805 instructions,
         `tatsu-lab/alpaca_eval`: its loading script does not run under `datasets` 3+);
- local: a .json / .jsonl / .parquet / .csv file in that schema (offline copies);
- task:  the first user turn of each conversation of a chat task's split (offline, real data).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pipeline.data.encode import read_task, split_of_task
from pipeline.judge.config import InstructionSet, JudgeConfigError

COLUMNS = ("index", "instruction", "output", "generator", "dataset")
READERS = {
    ".json": lambda p: pd.read_json(p),
    ".jsonl": lambda p: pd.read_json(p, lines=True),
    ".parquet": pd.read_parquet,
    ".csv": pd.read_csv,
}


def read_instruction_file(path: str | Path, where: str) -> pd.DataFrame:
    """A file in AlpacaEval's schema, checked: an `instruction` column of non-empty strings."""
    path = Path(path)
    if path.suffix not in READERS:
        raise JudgeConfigError(f"{where}: {path} should be one of {', '.join(READERS)}")
    if not path.is_file():
        raise JudgeConfigError(f"{where}: {path} does not exist")
    try:
        df = READERS[path.suffix](path)
    except ValueError as err:
        raise JudgeConfigError(f"{where}: {path} could not be read as {path.suffix}: {err}") from None
    if "instruction" not in df.columns:
        raise JudgeConfigError(
            f"{where}: {path} has no 'instruction' field (columns: {list(df.columns)}); expected "
            "AlpacaEval's schema: instruction, and optionally output, generator, dataset"
        )
    bad = [i for i, x in enumerate(df["instruction"]) if not isinstance(x, str) or not x.strip()]
    if bad:
        raise JudgeConfigError(f"{where}: {path} rows {bad[:5]} have an empty or non-text 'instruction'")
    return df


def _hub_file(src: InstructionSet) -> Path:
    from huggingface_hub import hf_hub_download

    return Path(hf_hub_download(src.path, src.file, repo_type="dataset", revision=src.revision))


def _task_instructions(src: InstructionSet, task_table: str | Path) -> pd.DataFrame:

    task = read_task(src.task, task_table)
    if task.kind != "chat":
        raise JudgeConfigError(
            f"alpaca_eval.instructions.task: {src.task!r} is a {task.kind} task; expected a chat task"
        )
    rows = []
    for conv in split_of_task(task, src.split):
        first = next(i for i, m in enumerate(conv.messages) if m.role == "user")
        reply = next((m.content for m in conv.messages[first:] if m.role == "assistant"), None)
        rows.append({"instruction": conv.messages[first].content, "output": reply, "generator": src.task})
    return pd.DataFrame(rows).assign(dataset=f"{src.task}/{src.split}")


def load_instructions(src: InstructionSet, task_table: str | Path | None = None) -> pd.DataFrame:
    """The instruction table (COLUMNS), its first max_items rows; task_table: the chat task's
    table (source task)."""
    if src.source == "task":
        df = _task_instructions(src, task_table)
    else:
        where = f"alpaca_eval.instructions ({src.source} {src.path})"
        df = read_instruction_file(_hub_file(src) if src.source == "hub" else src.path, where)
    df = df.head(src.max_items) if src.max_items else df
    for column in ("output", "generator", "dataset"):
        if column not in df.columns:
            df = df.assign(**{column: None})
    return df.reset_index(drop=True).reset_index(names="index")[list(COLUMNS)]
