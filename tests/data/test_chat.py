"""Instruction tuning (Section 2, Appendix B.2, Table 2): the chat tasks (Anthropic-HH, TULU v1,
Alpaca) read through `source: hub` from small local files in each dataset's own schema (never the
network), assistant-only loss masks under the default and a real chat template, fine-tuning and
evaluation on assistant tokens, the Table 2 preset, and bad input."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from workflow_utils import ROOT, planned_jobs, smoke_config, snakemake, write_config

from pipeline.analysis.stats import tuned_table
from pipeline.data import task_loading as L
from pipeline.data import tasks as T
from pipeline.data.batches import IGNORE_INDEX
from pipeline.data.chat import (
    DEFAULT_CHAT_TEMPLATE,
    ChatSampler,
    assistant_runs,
    default_chat_spans,
    encode_chats,
)
from pipeline.data.corpus import build_corpus
from pipeline.data.encode import read_task, task_frame
from pipeline.data.heldout import PretrainCorpus
from pipeline.data.task_items import SPLITS, ChatItem, Message, TaskError, item_text
from pipeline.data.task_loading import load_task
from pipeline.data.tokenizer import as_hf_tokenizer
from pipeline.evaluate.tasks import eval_chat
from pipeline.io import write_parquet
from pipeline.models.build import build_model, model_config
from pipeline.models.checkpoints import CheckpointSpec
from pipeline.sweeps.lr_grids import INSTRUCT_FINETUNE_LRS, finetune_lr_grid
from pipeline.tables import metrics_frame
from pipeline.tasks.text import ChatTask, TextTaskSpec
from pipeline.train.config import INSTRUCT_FINETUNE, TrainConfig
from pipeline.train.finetune import FinetuneConfig, finetune_run, task_base_rows
from pipeline.train.finetune_job import FinetuneJob
from pipeline.train.loop import make_optimizer, make_schedule

CREW = ["Ishmael", "Ahab", "Queequeg", "Starbuck", "Stubb", "Flask", "Pip", "Tashtego", "Daggoo"]
CHATML = (
    "{% for m in messages %}"
    "{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


# --- local datasets in the hub schemas ---------------------------------------------------------


def hh_transcript(i: int, salt: str = "") -> str:
    a, b = CREW[i % 9], CREW[(3 * i + 1) % 9]
    return (
        f"\n\nHuman: Who sailed with {a} on voyage {salt}{i}?\n\nAssistant: {b} sailed with {a}."
        f"\n\nHuman: And then?\n\nAssistant: Then {a} saw the whale."
    )


def hh_rows(n: int, salt: str) -> list[dict]:
    return [
        {
            "chosen": hh_transcript(i, salt),
            "rejected": hh_transcript(i, salt).rsplit("Assistant:", 1)[0] + "Assistant: I do not know.",
        }
        for i in range(n)
    ]


def tulu_rows(n: int) -> list[dict]:
    rows = []
    for i in range(n):
        msgs = [
            {"role": "user", "content": f"Name the mate of ship {i}."},
            {"role": "assistant", "content": f"The mate of ship {i} is {CREW[i % 9]}."},
        ]
        if i % 3 == 0:
            msgs = [{"role": "system", "content": "You are a sailor."}] + msgs
        rows.append({"dataset": "oasst1", "id": f"oasst1_{i}", "messages": msgs})
    return rows


def alpaca_rows(n: int) -> list[dict]:
    rows = []
    for i in range(n):
        extra = f"The ship is number {i}." if i % 2 else ""
        rows.append(
            {
                "instruction": f"Tell who keeps watch {i}.",
                "input": extra,
                "output": f"{CREW[i % 9]} keeps the watch.",
                "text": "...",
            }
        )
    return rows


def write_jsonl(path: Path, rows: list[dict], compress: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps(r) + "\n" for r in rows)
    if compress:
        path.write_bytes(gzip.compress(data.encode()))
    else:
        path.write_text(data)
    return path


@pytest.fixture()
def hub_dirs(tmp_path, offline_datasets):
    """HH as a local copy of its hub repository (subsets with train/test .jsonl.gz), TULU as one
    JSONL data file, Alpaca as its repository's data/train-*.parquet."""
    hh = tmp_path / "hh-rlhf"
    write_jsonl(hh / "harmless-base" / "train.jsonl.gz", hh_rows(40, "h"), compress=True)
    write_jsonl(hh / "helpful-base" / "train.jsonl.gz", hh_rows(40, "k"), compress=True)
    write_jsonl(hh / "harmless-base" / "test.jsonl.gz", hh_rows(15, "t"), compress=True)
    write_jsonl(hh / "helpful-base" / "test.jsonl.gz", hh_rows(15, "u"), compress=True)
    tulu = write_jsonl(tmp_path / "tulu_v1_mix.jsonl", tulu_rows(60))
    alpaca = tmp_path / "alpaca"
    (alpaca / "data").mkdir(parents=True)
    pd.DataFrame(alpaca_rows(60)).to_parquet(alpaca / "data" / "train-00000-of-00001.parquet")
    return {"hh": hh, "tulu": tulu, "alpaca": alpaca}


def hub(path: Path, **kw) -> dict:
    return {"source": "hub", "path": str(path), **kw}


def test_chat_tasks_from_local_hub_copies(hub_dirs, tmp_path):
    hh = load_task("hh", hub(hub_dirs["hh"]))
    assert (
        hh.kind == "chat"
        and len(hh.splits["train"]) == 80
        and len(hh.splits["validation"]) + len(hh.splits["test"]) == 30
    )
    conv = next(c for c in hh.splits["train"] if "voyage h2?" in c.messages[0].content)
    assert conv.messages == (
        Message("user", "Who sailed with Queequeg on voyage h2?"),
        Message("assistant", "Tashtego sailed with Queequeg."),
        Message("user", "And then?"),
        Message("assistant", "Then Queequeg saw the whale."),
    )
    tulu = load_task("tulu", hub(hub_dirs["tulu"], hub_splits=dict.fromkeys(SPLITS, "train")))
    n = {s: len(v) for s, v in tulu.splits.items()}
    assert (
        sum(n.values()) == 60 and n["train"] > n["validation"] > 0 and n["test"] > 0
    )  # one pool, divided by hash
    assert any(c.messages[0] == Message("system", "You are a sailor.") for c in tulu.splits["train"])
    capped = load_task(
        "tulu", hub(hub_dirs["tulu"], hub_splits=dict.fromkeys(SPLITS, "train"), max_items={"train": 10})
    )
    assert (
        capped.splits["train"] == tulu.splits["train"][:10] and capped.splits["test"] == tulu.splits["test"]
    )  # a random subset, deterministic
    assert (
        T.task_config("tulu", {"source": "hub"})["max_items"]["train"] == 200000
    )  # the paper's 200k subset by default
    assert (
        T.task_config("tulu", {"source": "hub", "max_items": {"train": None}})["max_items"]["train"] is None
    )
    alpaca = load_task("alpaca", hub(hub_dirs["alpaca"]))
    convs = {c.messages[0].content: c for s in alpaca.splits.values() for c in s}
    assert convs["Tell who keeps watch 3.\n\nThe ship is number 3."].messages[1] == Message(
        "assistant", "Starbuck keeps the watch."
    )
    assert convs["Tell who keeps watch 2."].messages[1].content == "Queequeg keeps the watch."
    assert T.task_files("hh", hub(hub_dirs["hh"])) == []
    # the task table round trip, and the text the tokenizer may be trained on (tokenizer.extra_texts)
    write_parquet(tmp_path / "hh.parquet", task_frame(hh))
    assert read_task("hh", tmp_path / "hh.parquet").splits == hh.splits
    assert (
        item_text(conv)
        == "<|user|>\nWho sailed with Queequeg on voyage h2?\n<|assistant|>\nTashtego sailed with Queequeg.\n"
        "<|user|>\nAnd then?\n<|assistant|>\nThen Queequeg saw the whale.\n"
    )
    assert L.task_stats(hh)["train"]["assistant_turns"] == 160


# --- chat templates and assistant masks ---------------------------------------------------------

CONVS = [
    ChatItem(
        (
            Message("system", "You are a sailor."),
            Message("user", "Who is the captain?"),
            Message("assistant", "Ahab is the captain."),
            Message("user", "And the mate?"),
            Message("assistant", "Starbuck, first mate of the Pequod."),
        )
    ),
    ChatItem((Message("user", "Name a harpooneer."), Message("assistant", "Queequeg."))),
    ChatItem(
        (
            Message("user", "Call me"),
            Message("user", "what?"),
            Message("assistant", "Ishmael. Some years ago\nnever mind how long."),
        )
    ),
]


def check_masks(tok, enc, convs, end_of_turn: str, prefix: list[int]):
    for ids, scored, conv in zip(enc.ids, enc.scored, convs):
        assert list(ids[: len(prefix)]) == prefix and not scored[0]
        want = [m.content + end_of_turn for m in conv.messages if m.role == "assistant"]
        assert [
            tok.decode(r) for r in assistant_runs(ids, scored)
        ] == want  # exactly the replies + end of turn
        assert not any(m.content in tok.decode(ids[~scored]) for m in conv.messages if m.role == "assistant")


def test_default_template_masks_exactly_the_assistant_turns(tokenizer):
    assert not getattr(tokenizer, "chat_template", None)  # the sweep's BPE tokenizers have none
    enc = encode_chats(tokenizer, CONVS, max_len=256)
    assert enc.template == "default" and enc.resegmented == 0 and enc.dropped == 0
    check_masks(tokenizer, enc, CONVS, tokenizer.eos_token, [tokenizer.bos_token_id])
    for ids, conv in zip(enc.ids, CONVS):  # the whole rendered text, tokenized as one
        text, _ = default_chat_spans(conv, tokenizer.eos_token)
        assert list(ids[1:]) == tokenizer(text, add_special_tokens=False)["input_ids"]
        # the fast path renders exactly what the Jinja template does (e.g. saved as a chat_template)
        assert (
            tokenizer.apply_chat_template(
                conv.as_dicts(), tokenize=False, chat_template=DEFAULT_CHAT_TEMPLATE
            )
            == text
        )
    assert (
        tokenizer.decode(enc.ids[1])
        == "<|endoftext|><|user|>\nName a harpooneer.\n<|assistant|>\nQueequeg.<|endoftext|>"
    )


@pytest.fixture()
def chatml_tokenizer(tokenizer_dir):
    tok = as_hf_tokenizer(tokenizer_dir / "tokenizer.json")
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.chat_template = CHATML
    return tok


def test_own_chat_template_masks_exactly_the_assistant_turns(chatml_tokenizer):
    tok = chatml_tokenizer
    enc = encode_chats(tok, CONVS, max_len=256)
    assert enc.template == "tokenizer" and enc.resegmented == 0
    check_masks(tok, enc, CONVS, "<|im_end|>", [])  # the newline after <|im_end|> is not a target
    assert list(enc.ids[1]) == tok.apply_chat_template(CONVS[1].as_dicts(), tokenize=True, return_dict=False)
    # transformers' own mask needs {% generation %} markers; ours agrees with it on a template that has them
    marked = CHATML.replace(
        "{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>' + '\n' }}",
        "{% if m['role'] == 'assistant' %}{{ '<|im_start|>assistant\n' }}"
        "{% generation %}{{ m['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\n' }}"
        "{% else %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>' + '\n' }}{% endif %}",
    )
    for ids, scored, conv in zip(enc.ids, enc.scored, CONVS):
        out = tok.apply_chat_template(
            conv.as_dicts(), chat_template=marked, return_dict=True, return_assistant_tokens_mask=True
        )
        assert out["input_ids"] == list(ids) and out["assistant_masks"] == scored.astype(int).tolist()


def test_merges_across_a_span_boundary_are_tokenized_segment_by_segment(tokenizer_dir):
    tok = as_hf_tokenizer(tokenizer_dir / "tokenizer.json")
    tok.chat_template = (
        "{% for m in messages %}{{ m['content'] }}{% endfor %}"  # no separators: 'the whal' + 'e of ...'
    )
    conv = ChatItem((Message("user", "the whal"), Message("assistant", "e of the sea")))
    pre, whole = (tok(t, add_special_tokens=False)["input_ids"] for t in ("the whal", "the whale of the sea"))
    assert whole[: len(pre)] != pre, "the test needs a BPE merge across the boundary"
    enc = encode_chats(tok, [conv], max_len=64)
    assert enc.resegmented == 1
    assert [tok.decode(r) for r in assistant_runs(enc.ids[0], enc.scored[0])] == ["e of the sea"]
    assert tok.decode(enc.ids[0]) == "the whale of the sea"


def test_truncation_keeps_the_alignment(tokenizer):
    enc = encode_chats(tokenizer, CONVS, max_len=256)
    full = len(enc.ids[0])
    assert full < 257
    cut = encode_chats(tokenizer, CONVS[:1], max_len=full - 4)
    assert len(cut.ids[0]) == full - 3
    np.testing.assert_array_equal(cut.ids[0], enc.ids[0][: full - 3])
    np.testing.assert_array_equal(cut.scored[0], enc.scored[0][: full - 3])
    last = tokenizer.decode(assistant_runs(cut.ids[0], cut.scored[0])[-1])
    assert ("Starbuck, first mate of the Pequod." + tokenizer.eos_token).startswith(last) and len(last) > 5
    # a conversation whose reply starts after the cut is skipped; none left is an error
    first = [
        int(np.argmax(m)) for m in encode_chats(tokenizer, CONVS[:2], max_len=256).scored
    ]  # first assistant token
    assert first[1] < first[0]
    enc = encode_chats(tokenizer, CONVS[:2], max_len=first[1])
    assert len(enc) == 1 and enc.dropped == 1 and len(enc.ids[0]) == first[1] + 1 and enc.scored[0].sum() == 1
    with pytest.raises(TaskError, match="no conversation has an assistant token within the first 4 tokens"):
        encode_chats(tokenizer, CONVS[:1], max_len=4)
    # eval_max_tokens: the first conversations whose tokens fit (at least one)
    assert len(encode_chats(tokenizer, CONVS, 256, max_tokens=1)) == 1
    assert len(encode_chats(tokenizer, CONVS, 256, max_tokens=10_000)) == 3


def test_chat_batches_score_only_assistant_tokens(tokenizer):
    enc = encode_chats(tokenizer, CONVS, max_len=256)
    batch = ChatSampler(enc, 3, seed=0, pad_token=tokenizer.pad_token_id).batch(0)
    x, y = batch["input_ids"], batch["labels"]
    assert x.shape == y.shape == (3, max(len(i) for i in enc.ids) - 1)
    got = sorted(tokenizer.decode(y[r][y[r] != IGNORE_INDEX]) for r in range(3))
    want = sorted(
        "".join(m.content + tokenizer.eos_token for m in c.messages if m.role == "assistant") for c in CONVS
    )
    assert got == want
    for r in range(3):  # labels are the next input tokens wherever they are scored (the last one is the end)
        pos = (y[r] != IGNORE_INDEX).nonzero().flatten()[:-1]
        assert torch.equal(x[r, pos + 1], y[r, pos])
        assert (x[r, pos[-1] + 2 :] == tokenizer.pad_token_id).all()


# --- fine-tuning and the ID metric -------------------------------------------------------------


@pytest.fixture()
def chat_study(tmp_path, tokenizer, moby_docs, hub_dirs):
    torch.set_num_threads(1)
    cfg = model_config("tiny", len(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id)
    cfg.max_position_embeddings = 64
    ckpt = tmp_path / "ckpt"
    build_model(cfg, seed=0).save_pretrained(ckpt)
    tokenizer.save_pretrained(ckpt)
    write_parquet(tmp_path / "corpus.parquet", build_corpus(moby_docs[:40], {"validation": 0.2, "test": 0.2}))
    write_parquet(tmp_path / "hh.parquet", task_frame(load_task("hh", hub(hub_dirs["hh"]))))
    return {
        "dir": tmp_path,
        "spec": CheckpointSpec("tiny-chat", "local", "tiny", 1000, path=str(ckpt)),
        "ckpt": str(ckpt),
    }


EVAL = {"split": "validation", "max_tokens": 2000, "seq_len": None, "batch_size": 32}
CFG = FinetuneConfig(
    epochs=2, batch_size=8, micro_batch_size=3, seq_len=64, warmup_steps=3, eval_batch_size=16, log_every=5
)


def test_finetune_run_on_a_chat_task(chat_study):
    s = chat_study
    task_path = s["dir"] / "hh.parquet"
    base = metrics_frame(task_base_rows(s["spec"], s["ckpt"], task_path, "hh", CFG, "t"))
    assert set(base["metric"]) == set(ChatTask.metrics) == {"ppl", "loss"} and set(base["split"]) == {
        "validation",
        "test",
    }
    runs = {}
    for lr in (1e-4, 3e-3):
        job = FinetuneJob(
            spec=s["spec"],
            cfg=CFG,
            task=TextTaskSpec("hh", str(task_path)),
            corpus=PretrainCorpus(str(s["dir"] / "corpus.parquet"), **EVAL),
            learning_rate=lr,
            lambda_reg=0.0,
            seed=0,
            study="t",
            state_dir=str(s["dir"] / f"state-{lr}"),
            metrics_path=str(s["dir"] / f"metrics-{lr}.parquet"),
            path=str(s["ckpt"]),
            device="cpu",
        )
        rows = finetune_run(job)
        runs[lr] = metrics_frame(rows)
    df = runs[3e-3]
    hh = df[df["eval_data"] == "hh"]
    assert sorted(zip(hh["split"], hh["metric"])) == [
        ("test", "loss"),
        ("test", "ppl"),
        ("validation", "loss"),
        ("validation", "ppl"),
    ]
    assert set(df["eval_data"]) == {"pretrain", "hh", "weights"} and not df["diverged"].any()

    def val(frame, split, metric):
        return float(
            frame[(frame["eval_data"] == "hh") & (frame["split"] == split) & (frame["metric"] == metric)][
                "value"
            ].iloc[0]
        )

    for split in ("validation", "test"):
        assert val(df, split, "ppl") == pytest.approx(math.exp(val(df, split, "loss")))
        assert val(df, split, "loss") < val(base, split, "loss") - 1.0, (
            "fine-tuning must lower the assistant-token loss"
        )
    extra = json.loads(df["extra"].iloc[0])
    assert (
        extra["warmup_steps"] == 3 and extra["steps_per_epoch"] == 10 and extra["steps"] == 20
    )  # 80 conversations / 8
    assert [h["step"] for h in extra["history"]] == [10, 20]
    # tuned learning rate per checkpoint on the ID validation ppl: chat tasks need no special case
    tuned = tuned_table(pd.concat([base, *runs.values()]))
    assert set(tuned["learning_rate"]) == {3e-3} and set(tuned["task"]) == {"hh"}
    row = tuned[(tuned["eval_data"] == "hh") & (tuned["split"] == "test") & (tuned["metric"] == "ppl")].iloc[
        0
    ]
    assert row["mean"] == pytest.approx(val(df, "test", "ppl")) and row["base"] == pytest.approx(
        val(base, "test", "ppl")
    )


def test_eval_chat_is_the_mean_nll_of_the_assistant_tokens(tiny_model, tokenizer):
    enc = encode_chats(tokenizer, CONVS, max_len=64)
    res = eval_chat(tiny_model, enc, tokenizer.pad_token_id, batch_size=2)
    nll, n = 0.0, 0
    with torch.no_grad():
        for ids, scored in zip(enc.ids, enc.scored):
            logits = tiny_model(input_ids=torch.tensor(ids[None, :-1])).logits[0].float()
            lp = torch.log_softmax(logits, -1)[torch.arange(len(ids) - 1), torch.tensor(ids[1:])]
            nll -= float(lp[torch.from_numpy(scored[1:])].sum())
            n += int(scored.sum())
    assert res["tokens"] == n and res["items"] == 3
    assert res["loss"] == pytest.approx(nll / n, rel=1e-5) and res["ppl"] == pytest.approx(
        math.exp(nll / n), rel=1e-5
    )


# --- Table 2 preset -----------------------------------------------------------------------------


def test_table2_preset_and_config_overlay():
    assert INSTRUCT_FINETUNE_LRS == (1e-6, 5e-6, 1e-5, 5e-5, 8e-5, 1e-4, 2e-4)
    assert finetune_lr_grid("instruct") == INSTRUCT_FINETUNE_LRS and finetune_lr_grid([1e-3]) == (1e-3,)
    assert len(finetune_lr_grid("paper")) == 27
    with pytest.raises(ValueError, match="unknown grid 'tulu'"):
        finetune_lr_grid("tulu")
    assert {k: INSTRUCT_FINETUNE[k] for k in ("batch_size", "schedule", "warmup_steps", "weight_decay")} == {
        "batch_size": 256,
        "schedule": "cosine",
        "warmup_steps": 20,
        "weight_decay": 0.0,
    }
    overlay = yaml.safe_load((ROOT / "config" / "instruct.yaml").read_text())["finetune"]
    assert {k: overlay[k] for k in INSTRUCT_FINETUNE} == INSTRUCT_FINETUNE
    assert (
        set(overlay["tasks"]) == {"hh", "tulu", "alpaca"}
        and overlay["task_data"]["tulu"]["max_items"]["train"] == 200000
    )
    # merged into the default config it is a valid config (what `--configfile config/instruct.yaml` runs)
    from snakemake.utils import update_config

    from pipeline.workflow.schema import load_schema, validate_config

    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    update_config(cfg, {"finetune": overlay})
    validate_config(cfg, load_schema(ROOT / "config" / "schema.yaml"))
    keys = {
        "epochs",
        "max_steps",
        "batch_size",
        "micro_batch_size",
        "seq_len",
        "schedule",
        "warmup_fraction",
        "warmup_steps",
        "betas",
        "weight_decay",
        "grad_clip",
        "eval_batch_size",
        "eval_max_tokens",
    }
    ft = FinetuneConfig(**{k: v for k, v in cfg["finetune"].items() if k in keys})
    assert ft.micro_batch_size is None and ft.batch_size == 256  # on GPUs the memory planner fits it
    # 20 warmup steps exactly, whatever the run's length; the schedule then decays to zero (cosine)
    for total in (25, 100, 1234):
        sched = make_schedule(
            make_optimizer(torch.nn.Linear(2, 2), TrainConfig(steps=total, lr=1.0)),
            TrainConfig(steps=total, lr=1.0, warmup_fraction=ft.warmup_fraction_of(total)),
        )
        lrs = []
        for _ in range(total):
            lrs.append(sched.get_last_lr()[0])
            sched.optimizer.step()
            sched.step()
        assert lrs[19] < 1.0 and lrs[20] == pytest.approx(1.0) and lrs[-1] < lrs[21]
    assert FinetuneConfig(warmup_steps=20).warmup_fraction_of(10) == 1.0
    with pytest.raises(ValueError, match="warmup_steps"):
        FinetuneConfig(warmup_steps=-1)


def test_workflow_plans_a_chat_task(tmp_path, hub_dirs):
    """A chat task read from a local hub copy, with Table 2's grid: one job per (checkpoint, LR)
    and one task table, whose rule has no package-file inputs."""
    cfg = smoke_config(
        study="test-instruct-plan",
        **{
            "finetune.tasks": ["hh"],
            "finetune.task_data": {"hh": hub(hub_dirs["hh"])},
            "finetune.learning_rates": "instruct",
            "finetune.warmup_steps": 20,
        },
    )
    jobs = planned_jobs(write_config(tmp_path, cfg))
    assert (
        jobs["finetune"] == len(cfg["pretrain"]["budgets"]) * 7
        and jobs["task_data"] == 1
        and jobs["evaluate"] == len(cfg["pretrain"]["budgets"])
    )


# --- bad input ----------------------------------------------------------------------------------


def test_bad_chat_input_names_the_culprit(tmp_path, offline_datasets):
    for name in ("hh", "tulu", "alpaca"):
        with pytest.raises(
            TaskError, match=rf"task {name}: there is no embedded copy.*source: hub, path: <hub id"
        ):
            load_task(name)
    with pytest.raises(TaskError, match="there is no embedded copy"):
        T.task_files("hh", {"source": "embedded"})

    def hh_error(text: str, match: str, **kw):
        d = tmp_path / f"hh{abs(hash(text))}"
        write_jsonl(
            d / "train.jsonl",
            [{"chosen": hh_transcript(i), "rejected": ""} for i in range(20)]
            + [{"chosen": text, "rejected": ""}],
        )
        with pytest.raises(TaskError, match=match):
            load_task("hh", hub(d, hub_splits=dict.fromkeys(SPLITS, "train"), **kw))
        return d

    d = hh_error(
        "Who sailed? Nobody.",
        r"task hh: dataset '.*' split 'train' row 20: field 'chosen' is not an Anthropic-HH transcript "
        r"'\\n\\nHuman: \.\.\.\\n\\nAssistant: \.\.\.', got 'Who sailed\? Nobody\.'.*invalid_rows: skip",
    )
    hh_error(
        "\n\nHuman: Hi\n\nAssistant:  \n\nHuman: Hello?", r"row 20: message 1 is an empty assistant turn"
    )
    hh_error("\n\nHuman: Hi there\n\nHuman: Anyone?", r"row 20: the conversation has no assistant turn")
    hh_error(
        "\n\nAssistant: I start.\n\nHuman: Odd.",
        r"row 20: the first assistant turn comes before any user turn",
    )
    # invalid_rows: skip drops such rows and says so
    task = load_task(
        "hh",
        hub(
            d,
            hub_splits=dict.fromkeys(SPLITS, "train"),
            invalid_rows="skip",
            split_fractions={"validation": 0.3, "test": 0.3},
        ),
    )
    assert sum(map(len, task.splits.values())) == 20 and any(
        "1 invalid rows" in n and "row 20" in n for n in task.notes
    )

    def tulu_error(messages, match: str):
        f = write_jsonl(
            tmp_path / f"tulu{abs(hash(json.dumps(messages)))}.jsonl",
            tulu_rows(3) + [{"dataset": "x", "id": "x_9", "messages": messages}],
        )
        with pytest.raises(TaskError, match=match):
            load_task("tulu", hub(f, hub_splits=dict.fromkeys(SPLITS, "train")))

    tulu_error(
        [{"role": "user", "content": "hi"}, {"role": "gpt", "content": "hello"}],
        r"row 3: message 1 has unknown role 'gpt'; expected one of \['system', 'user', 'assistant'\]",
    )
    tulu_error([{"role": "user", "content": "hi"}], r"row 3: the conversation has no assistant turn")
    tulu_error(
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": " "}],
        r"row 3: message 1 is an empty assistant turn",
    )
    tulu_error([{"role": "user", "text": "hi"}], r"row 3: message 0 is not \{role: str, content: str\}")
    tulu_error([], r"row 3: the conversation has no assistant turn")
    with pytest.raises(TaskError, match=r"a local data file is one split, 'train'"):
        load_task("hh", hub(write_jsonl(tmp_path / "hh.jsonl", hh_rows(5, "x"))))
    write_jsonl(tmp_path / "alpaca-bad" / "train.jsonl", [{"instruction": "Say hi.", "input": ""}])
    with pytest.raises(
        TaskError, match=r"task alpaca: dataset '.*alpaca-bad' split 'train': missing field 'output'"
    ):
        load_task("alpaca", hub(tmp_path / "alpaca-bad"))
    write_jsonl(
        tmp_path / "alpaca-empty" / "train.jsonl", [{"instruction": "Say hi.", "input": "", "output": ""}]
    )
    with pytest.raises(
        TaskError, match=r"row 0: message 1 is an empty assistant turn \(expected an Alpaca row"
    ):
        load_task("alpaca", hub(tmp_path / "alpaca-empty"))
    with pytest.raises(TaskError, match="invalid_rows must be 'error' or 'skip'"):
        load_task("hh", {"source": "hub", "invalid_rows": "drop"})


def test_chat_task_without_hub_source_fails_before_any_job(tmp_path):
    cfg = smoke_config(study="bad-instruct", **{"finetune.tasks": ["code", "tulu"]})
    res = snakemake(write_config(tmp_path, cfg), "-n", "--cores", "1")
    text = res.stdout + res.stderr
    assert (
        res.returncode != 0 and "task tulu: there is no embedded copy" in text and "Traceback" not in text
    ), text[-3000:]
