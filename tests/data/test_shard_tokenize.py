"""Tokenization fanned out over text files (pipeline/data/shard_tokenize.py): each file's OLMo-format
shard is the study's token stream of its documents bit for bit, whatever the file format; its index
points at each document; a study with `pretrain.text_files` plans one job per file; bad files and
patterns stop with the key named."""

import gzip
import json
import re

import numpy as np
import pandas as pd
import pytest
from workflow_utils import ROOT, planned_jobs, smoke_config, snakemake, workflow_config, write_config

from pipeline.data.shard_tokenize import read_documents, shard_name, tokenize_file
from pipeline.data.token_shards import ShardSet, TokenStream
from pipeline.data.tokenizer import EOS, token_stream
from pipeline.workflow.config import check_config
from pipeline.workflow.schema import ConfigError, load_schema, validate_config


@pytest.fixture(scope="module")
def texts(moby_docs) -> list[str]:
    return [d.text for d in moby_docs[:12]]


def write_jsonl_gz(path, texts: list[str]) -> str:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for i, text in enumerate(texts):
            f.write(json.dumps({"id": i, "text": text}) + "\n")
    return str(path)


def shard(tmp_path, source: str, tokenizer_dir, name: str, **kw) -> tuple[np.ndarray, np.ndarray, dict]:
    out, index, info = (tmp_path / f"{name}{s}" for s in (".bin", ".idx", ".json"))
    record = tokenize_file(source, tokenizer_dir / "tokenizer.json", EOS, out, index, info, **kw)
    assert json.loads(info.read_text()) == record
    return np.fromfile(out, dtype=record["dtype"]), np.fromfile(index, dtype=np.uint64), record


def test_a_files_shard_is_the_token_stream_of_its_documents(texts, tokenizer, tokenizer_dir, tmp_path):
    expected = token_stream(tokenizer, texts)
    jsonl = write_jsonl_gz(tmp_path / "c4-train.00000-of-01024.json.gz", texts)
    parquet = tmp_path / "part.parquet"
    pd.DataFrame({"text": texts}).to_parquet(parquet)
    a, starts, record = shard(tmp_path, jsonl, tokenizer_dir, "a", batch_documents=5)  # batches split docs
    b, _, _ = shard(tmp_path, str(parquet), tokenizer_dir, "b", batch_documents=1024)
    np.testing.assert_array_equal(a, expected)
    np.testing.assert_array_equal(b, expected)
    assert record["dtype"] == "uint16" and record["documents"] == len(texts) == len(starts)
    assert starts[0] == 0 and all(a[int(s) - 1] == tokenizer.eos_token_id for s in starts[1:])
    assert (
        TokenStream.of_shards(ShardSet((str(tmp_path / "a.bin"),), "uint16"))[0 : len(a)].tolist()
        == a.tolist()
    )
    assert shard_name(jsonl) == "c4-train.00000-of-01024"


def test_bad_text_files_name_the_file_and_what_was_expected(texts, tokenizer_dir, tmp_path):
    path = tmp_path / "notext.jsonl"
    path.write_text(json.dumps({"text": "a"}) + "\n" + json.dumps({"body": "x"}) + "\n")
    with pytest.raises(ValueError, match=r"notext.jsonl has a document without a string field 'text'"):
        list(read_documents(path, "text", 8))
    with pytest.raises(ValueError, match=r"expected one of .jsonl"):
        shard_name(tmp_path / "c4.txt")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match="holds no documents"):
        shard(tmp_path, str(empty), tokenizer_dir, "e")
    assert not (tmp_path / "e.bin").exists() and not (tmp_path / "e.json").exists()


def text_files_error(**overrides) -> str:
    cfg = workflow_config(smoke_config(study="text-files", **overrides))
    validate_config(cfg, load_schema(ROOT / "config" / "schema.yaml"))
    with pytest.raises(ConfigError) as err:
        check_config(cfg, check_benchmark_tasks=False)
    return str(err.value)


def test_text_files_that_cannot_be_read_stop_at_start_up(texts, tmp_path):
    assert "give paths (local files) or hub" in text_files_error(
        **{"pretrain.text_files": {"text_field": "text"}}
    )
    missing = str(tmp_path / "c4" / "*.json.gz")
    assert f"pretrain.text_files.paths: {missing} matches no file" in text_files_error(
        **{"pretrain.text_files": {"paths": [missing]}}
    )
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one, two = (write_jsonl_gz(tmp_path / d / "x.json.gz", texts) for d in "ab")
    assert "make the same shard 'x'" in text_files_error(**{"pretrain.text_files": {"paths": [one, two]}})
    shards = {"paths": [one], "dtype": "uint16"}
    both = {"pretrain.text_files": {"paths": [one]}, "pretrain.token_shards": shards}
    assert "give one source of training tokens" in text_files_error(**both)


def test_a_study_on_text_files_tokenizes_one_file_per_job(texts, tmp_path):
    files = [write_jsonl_gz(tmp_path / f"c4-train.{i:05d}-of-00003.json.gz", texts[i::3]) for i in range(3)]
    pattern = str(tmp_path / "c4-train.*.json.gz")
    cfg = smoke_config(study="text-files", **{"pretrain.text_files": {"paths": [pattern]}})
    configfile = write_config(tmp_path, cfg)
    jobs = planned_jobs(configfile)
    assert jobs["tokenize_shard"] == len(files), jobs
    # the token coverage is measured on what pre-training reads: the shards
    res = snakemake(configfile, "-n", "results/text-files/data/token_coverage.parquet")
    (inputs,) = re.findall(r"rule token_coverage:\n\s+input: (.*)", res.stdout)
    assert [f"results/text-files/data/shards/{shard_name(p)}.bin" for p in files] == inputs.split(", ")[:3]


def test_a_failed_file_leaves_the_others_tokenized(texts, tmp_path):
    """One bad file among two: its job fails and writes nothing; once fixed, the rerun tokenizes it
    alone (the other shard is not redone)."""
    good = write_jsonl_gz(tmp_path / "c4-train.00000-of-00002.json.gz", texts[:6])
    bad = tmp_path / "c4-train.00001-of-00002.json.gz"
    with gzip.open(bad, "wt") as f:
        f.write(json.dumps({"body": texts[6]}) + "\n")
    study = "text-files-rerun"
    cfg = smoke_config(
        study=study, **{"pretrain.text_files": {"paths": [str(tmp_path / "c4-train.*.json.gz")]}}
    )
    configfile = write_config(tmp_path, cfg)
    shards = ROOT / "results" / study / "data" / "shards"
    targets = [f"results/{study}/data/shards/{shard_name(p)}.json" for p in (good, bad)]
    try:
        res = snakemake(configfile, "--cores", "2", "--keep-going", *targets)
        assert res.returncode != 0 and "has a document without a string field 'text'" in res.stderr
        assert (shards / f"{shard_name(good)}.bin").is_file() and not (
            shards / f"{shard_name(bad)}.bin"
        ).exists()
        write_jsonl_gz(bad, texts[6:8])
        res = snakemake(configfile, "--cores", "2", "-n", *targets)
        assert res.returncode == 0 and re.search(r"^tokenize_shard\s+1$", res.stdout + res.stderr, re.M)
    finally:
        import shutil

        shutil.rmtree(ROOT / "results" / study, ignore_errors=True)


COMMIT = "0123456789abcdef0123456789abcdef01234567"


def hub_dataset_cache(root, files: dict[str, list[str]]) -> str:
    """A hub cache holding allenai/c4 at COMMIT with `files` (path in the dataset -> documents), laid
    out as huggingface_hub keeps a downloaded dataset (snapshots/<commit>/<file>, refs/main)."""
    repo = root / "datasets--allenai--c4"
    for name, docs in files.items():
        (repo / "snapshots" / COMMIT / name).parent.mkdir(parents=True, exist_ok=True)
        write_jsonl_gz(repo / "snapshots" / COMMIT / name, docs)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(COMMIT)
    return str(root)


def test_a_hub_datasets_files_are_tokenized_from_the_cache_one_job_each(texts, tmp_path):
    """`pretrain.text_files.hub`: each file of allenai/c4 at a commit, read offline from the hub cache
    by its own job, is the same shard as the same file given locally."""
    from workflow_utils import workflow_env

    names = [f"en/c4-train.{i:05d}-of-01024.json.gz" for i in range(2)]
    cache = hub_dataset_cache(tmp_path / "hub", {names[0]: texts[:4], names[1]: texts[4:6]})
    study = "text-files-hub"
    hub = {"repo": "allenai/c4", "revision": COMMIT, "files": names}
    configfile = write_config(tmp_path, smoke_config(study=study, **{"pretrain.text_files": {"hub": hub}}))
    assert planned_jobs(configfile)["tokenize_shard"] == 2
    local = write_jsonl_gz(tmp_path / "local.json.gz", texts[:4])
    target = f"results/{study}/data/shards/{shard_name(names[0])}"
    try:
        env = workflow_env(HF_HUB_OFFLINE="1", HF_HUB_CACHE=cache)
        res = snakemake(configfile, "--cores", "1", f"{target}.json", env=env)
        assert res.returncode == 0, res.stderr[-3000:]
        tokenizer = ROOT / "results" / study / "tokenizer" / "tokenizer.json"
        expected, _, _ = shard(tmp_path, local, tokenizer.parent, "local")
        np.testing.assert_array_equal(np.fromfile(ROOT / f"{target}.bin", dtype="uint16"), expected)
        assert json.loads((ROOT / f"{target}.json").read_text())["documents"] == 4
    finally:
        import shutil

        shutil.rmtree(ROOT / "results" / study, ignore_errors=True)
