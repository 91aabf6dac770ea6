"""The instruction set (pipeline/judge/instructions.py): AlpacaEval's schema from a local file, a
chat task's held-out prompts, and clear errors for files that are not in the schema."""

import json

import pandas as pd
import pytest

from pipeline.judge.config import InstructionSet, JudgeConfigError
from pipeline.judge.instructions import COLUMNS, load_instructions


@pytest.fixture(scope="module")
def mbpp_test():
    from pipeline.data.task_loading import load_task

    return load_task("mbpp", {"source": "embedded"}).splits["test"]


def alpaca_rows(convs) -> list[dict]:
    """Real instructions in AlpacaEval's schema (instruction, output, generator, dataset)."""
    return [
        {
            "instruction": c.messages[0].content,
            "output": c.messages[1].content,
            "generator": "mbpp",
            "dataset": "mbpp",
        }
        for c in convs
    ]


@pytest.mark.parametrize("suffix", [".json", ".jsonl", ".parquet", ".csv"])
def test_local_file_in_alpaca_eval_schema(tmp_path, mbpp_test, suffix):
    rows = alpaca_rows(mbpp_test[:5])
    path = tmp_path / f"eval{suffix}"
    df = pd.DataFrame(rows)
    {
        ".json": lambda: path.write_text(json.dumps(rows)),
        ".jsonl": lambda: df.to_json(path, orient="records", lines=True),
        ".parquet": lambda: df.to_parquet(path),
        ".csv": lambda: df.to_csv(path, index=False),
    }[suffix]()
    table = load_instructions(InstructionSet(source="local", path=str(path), max_items=3))
    assert list(table.columns) == list(COLUMNS) and table["index"].tolist() == [0, 1, 2]
    assert table["instruction"].tolist() == [r["instruction"] for r in rows[:3]]
    assert table["output"].tolist() == [r["output"] for r in rows[:3]]


def test_chat_task_prompts(tmp_path, mbpp_test):
    from pipeline.data.encode import task_frame
    from pipeline.data.task_loading import load_task
    from pipeline.io import write_parquet

    table_path = tmp_path / "mbpp.parquet"
    write_parquet(table_path, task_frame(load_task("mbpp", {"source": "embedded"})))
    table = load_instructions(InstructionSet(source="task", task="mbpp", split="test"), table_path)
    assert len(table) == len(mbpp_test)
    assert table["instruction"].tolist() == [c.messages[0].content for c in mbpp_test]
    assert (table["dataset"] == "mbpp/test").all() and table["output"].notna().all()


def test_files_outside_the_schema_are_clear_errors(tmp_path, mbpp_test):
    no_field = tmp_path / "prompts.json"
    no_field.write_text(json.dumps([{"prompt": c.messages[0].content} for c in mbpp_test[:2]]))
    with pytest.raises(
        JudgeConfigError, match=r"prompts.json has no 'instruction' field \(columns: \['prompt'\]\)"
    ):
        load_instructions(InstructionSet(source="local", path=str(no_field)))
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"instruction": "Write a function."}\n{"instruction": "  "}\n')
    with pytest.raises(JudgeConfigError, match=r"rows \[1\] have an empty or non-text 'instruction'"):
        load_instructions(InstructionSet(source="local", path=str(empty)))
    with pytest.raises(JudgeConfigError, match=r"should be one of .json, .jsonl, .parquet, .csv"):
        load_instructions(InstructionSet(source="local", path=str(tmp_path / "x.txt")))
    with pytest.raises(JudgeConfigError, match="source task needs a chat task's name"):
        InstructionSet(source="task")
