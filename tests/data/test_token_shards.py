"""Pre-tokenized shards in OLMo's format (pipeline/data/token_shards.py): read by memmap as one token
stream, the same batches and the same pre-training run as the study's own split, and the bad shard
sets that stop at start-up."""

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from workflow_utils import ROOT, smoke_config, workflow_config

from pipeline.data.batches import ChunkSampler
from pipeline.data.token_shards import ShardSet, TokenStream, check_shards, shard_set
from pipeline.data.tokenizer import token_stream
from pipeline.workflow.config import check_config
from pipeline.workflow.schema import ConfigError, load_schema, validate_config


@pytest.fixture(scope="module")
def tokens(tokenizer, moby_docs) -> np.ndarray:
    return np.asarray(token_stream(tokenizer, [d.text for d in moby_docs[:20]]), dtype=np.uint16)


def write_shards(tokens: np.ndarray, folder, cuts=(0.3, 0.55)) -> list[str]:
    """Raw uint16 files with no header (OLMo's format), split at `cuts` of the stream."""
    folder.mkdir(exist_ok=True)
    bounds = [0, *(int(c * len(tokens)) for c in cuts), len(tokens)]
    paths = []
    for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
        path = folder / f"part-{i:02d}.npy"
        tokens[a:b].tofile(path)
        paths.append(str(path))
    return paths


def test_shards_read_as_one_stream_give_the_same_batches(tokens, tmp_path):
    paths = write_shards(tokens, tmp_path / "c4")
    stream = TokenStream.of_shards(
        shard_set({"paths": [str(tmp_path / "c4" / "part-*.npy")], "dtype": "uint16"})
    )
    assert len(stream) == len(tokens)
    cut = int(0.3 * len(tokens))
    np.testing.assert_array_equal(stream[cut - 5 : cut + 5], tokens[cut - 5 : cut + 5])  # across a boundary
    np.testing.assert_array_equal(stream[0 : len(tokens)], tokens)
    ours, theirs = ChunkSampler(stream, 32, 8, seed=3), ChunkSampler(tokens, 32, 8, seed=3)
    for step in (0, 7, 40):
        assert torch.equal(ours.batch(step)["input_ids"], theirs.batch(step)["input_ids"])
    assert check_shards(ShardSet(tuple(paths), "uint16"), vocab_size=2048) == len(tokens)


def test_the_studys_split_reads_as_numpy_loads_it(tokens, tmp_path):
    """The .npy split through the same reader: its ids past the header; a 2-D array is refused."""
    np.save(tmp_path / "train.npy", tokens)
    stream = TokenStream.of_npy(tmp_path / "train.npy")
    assert len(stream) == len(tokens)
    np.testing.assert_array_equal(stream[0 : len(tokens)], tokens)
    np.testing.assert_array_equal(stream[17:300], tokens[17:300])
    np.save(tmp_path / "square.npy", tokens[:100].reshape(10, 10))
    with pytest.raises(ValueError, match="square.npy: expected a 1-D array"):
        TokenStream.of_npy(tmp_path / "square.npy")


def test_pretraining_on_shards_is_pretraining_on_the_split(tokens, tokenizer_dir, tmp_path):
    from pipeline.train.config import PretrainConfig
    from pipeline.train.pretrain import pretrain_run
    from pipeline.train.pretrain_job import PretrainJob

    torch.set_num_threads(1)
    np.save(tmp_path / "train.npy", tokens)
    shards = ShardSet(tuple(write_shards(tokens, tmp_path / "c4")), "uint16")
    hp = dict(seq_len=32, batch_size=4, lr=1e-2, betas=[0.9, 0.95], weight_decay=0.1, warmup_fraction=0.1)
    common = dict(
        tokenizer_path=tokenizer_dir, preset="tiny", budget=20 * 4 * 32, seed=0, cfg=PretrainConfig(**hp)
    )
    pretrain_run(
        PretrainJob(
            train_tokens=tmp_path / "train.npy", out=tmp_path / "a", state_path=tmp_path / "sa", **common
        )
    )
    pretrain_run(
        PretrainJob(
            train_tokens=None, token_shards=shards, out=tmp_path / "b", state_path=tmp_path / "sb", **common
        )
    )
    a, b = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


def shards_error(tmp_path, shards: dict, **overrides) -> str:
    cfg = workflow_config(smoke_config(study="shards", **{"pretrain.token_shards": shards, **overrides}))
    validate_config(cfg, load_schema(ROOT / "config" / "schema.yaml"))
    with pytest.raises(ConfigError) as err:
        check_config(cfg, check_benchmark_tasks=False)
    return str(err.value)


def test_bad_shard_sets_stop_at_start_up(tokens, tmp_path):
    paths = write_shards(tokens, tmp_path / "c4")
    with open(paths[1], "ab") as f:
        f.write(b"\x00")  # a shard cut mid-id
    assert f"pretrain.token_shards: {paths[1]} is truncated or empty" in shards_error(
        tmp_path, {"paths": paths, "dtype": "uint16"}
    )
    missing = str(tmp_path / "nowhere" / "*.npy")
    assert f"pretrain.token_shards.paths: {missing} matches no file" in shards_error(
        tmp_path, {"paths": [missing], "dtype": "uint16"}
    )
    whole = write_shards(tokens, tmp_path / "ok")
    assert "pretrain.token_shards.dtype: uint16 holds ids below 65,536, but the vocabulary has 70,000" in (
        shards_error(tmp_path, {"paths": whole, "dtype": "uint16"}, **{"tokenizer.vocab_size": 70000})
    )
    budget = 262144  # the smoke study's largest budget, past these shards' tokens
    assert (
        f"pretrain.budgets: budget {budget:,} tokens exceeds the training split (pretrain.token_shards"
        in (shards_error(tmp_path, {"paths": whole, "dtype": "uint16"}))
    )


@pytest.mark.parametrize("n", [1, 2, 3, 7, 1000, 4097])
def test_an_order_too_large_to_hold_is_a_seeded_permutation_in_constant_memory(n):
    """Above `in_memory` examples an epoch's order is a keyed Feistel permutation: every example once
    per epoch, the same for the same (seed, epoch), another for the next epoch; below it, numpy's
    permutation as before (the studies' orders unchanged)."""
    from pipeline.data.batches import EpochOrder

    order = EpochOrder(n, seed=3, in_memory=0)
    first, second = order.take(0, n), order.take(n, n)
    assert sorted(first) == sorted(second) == list(range(n))
    assert first == EpochOrder(n, seed=3, in_memory=0).take(0, n)
    if n > 3:
        assert first != second and first != EpochOrder(n, seed=4, in_memory=0).take(0, n)
    assert EpochOrder(n, seed=3).take(0, n) == np.random.default_rng([3, 0]).permutation(n).tolist()


def test_a_paper_scale_order_costs_no_memory():
    """128B tokens in chunks of 1024: 125M examples, drawn index by index (no 1 GiB array)."""
    from pipeline.data.batches import EpochOrder

    order = EpochOrder(125_000_000, seed=0)
    picks = order.take(10**9, 256)
    assert len(set(picks)) == 256 and all(0 <= p < 125_000_000 for p in picks)
    assert not isinstance(order._order(10**9 // 125_000_000), np.ndarray)


def test_token_coverage_scans_the_shards_in_chunks_as_it_would_the_array(tokens, tmp_path):
    """Rule token_coverage on a study with shards: the ids seen as targets, read a chunk at a time
    across shard boundaries, are the array's; an id beyond every id seen counts as unseen."""
    from pipeline.data.manifest import seen_targets, token_coverage

    stream = TokenStream.of_shards(ShardSet(tuple(write_shards(tokens, tmp_path / "c4")), "uint16"))
    seen = seen_targets(stream, chunk=1000)
    whole = np.zeros(int(tokens.max()) + 1, dtype=bool)
    whole[tokens[1:]] = True
    np.testing.assert_array_equal(seen, whole)
    beyond = len(seen) + 5
    table = token_coverage(seen, {("t", "test"): [int(tokens[1]), beyond, beyond]})
    assert table[["tokens", "unseen_tokens", "unseen_ids"]].values.tolist() == [[3, 2, 1]]


def test_reference_perplexities_count_targets_across_chunks(tokens, tmp_path):
    """Rule reference_ppl: the targets counted a chunk at a time across shards are the array's
    counts; the unigram model's perplexity is exp of the mean add-one log loss, and never above a
    uniform guess on text that follows the training frequencies."""
    from pipeline.data.manifest import reference_perplexity, target_counts

    stream = TokenStream.of_shards(ShardSet(tuple(write_shards(tokens, tmp_path / "c4")), "uint16"))
    counts = target_counts(stream, chunk=1000)
    np.testing.assert_array_equal(counts, np.bincount(tokens[1:].astype(np.int64)))
    vocab = int(tokens.max()) + 10
    heldout = tokens[1:500]
    ref = reference_perplexity(counts, heldout, vocab)
    p = (np.concatenate([counts, np.zeros(vocab - len(counts))]) + 1) / (counts.sum() + vocab)
    assert ref["unigram_ppl"] == pytest.approx(float(np.exp(-np.log(p[heldout.astype(int)]).mean())))
    assert ref["unigram_ppl"] < ref["uniform_ppl"] == vocab
    with pytest.raises(ValueError, match="vocabulary size"):
        reference_perplexity(counts, np.array([vocab]), vocab)
