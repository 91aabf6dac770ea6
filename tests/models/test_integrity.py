"""Revision integrity (pipeline/models/integrity.py) against a hub-format cache
(models--org--name/{refs,snapshots,blobs}) holding deliberately duplicated weights: each revision
locked to one commit, its weights' sha256 recorded (from the cache offline, from the hub's LFS
metadata online: a fake hub on 127.0.0.1), identical weights under two budgets stopping the study
before any job starts, the lock pinning commits, and rows carrying (repo, revision, commit)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import huggingface_hub.constants
import numpy as np
import pytest
from safetensors.numpy import save_file

from pipeline.models.checkpoints import hub_checkpoints
from pipeline.models.hub import HubRevisionError, file_sha256, snapshot_into_cache
from pipeline.models.integrity import lock_study, read_lock, weights_digest
from pipeline.models.loading import hub_kwargs

MODEL = "overtrain-test/tiny-dup"


def tiny_model(path: Path, seed: int, note: str) -> Path:
    """A model directory: config.json (with `note`, so equal weights can sit in different commits)
    and a model.safetensors of seeded weights."""
    path.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    save_file({"w": rng.standard_normal((8, 4)).astype(np.float32)}, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps({"model_type": "llama", "note": note}))
    return path


@pytest.fixture()
def dup_cache(tmp_path):
    """step1000 and step3000 serve the same weights (seed 0) from different commits; step2000 its own."""
    cache = tmp_path / "hf-cache"
    commits = {}
    for rev, seed in {"step1000-tokens4M": 0, "step2000-tokens8M": 1, "step3000-tokens12M": 0}.items():
        commits[rev] = snapshot_into_cache(tiny_model(tmp_path / rev, seed, rev), MODEL, rev, cache)
    return cache, commits


def specs(cache, revs, lock, **kw):
    return hub_checkpoints(MODEL, list(revs), cache_dir=str(cache), offline=True, lock=str(lock), **kw)


def test_cache_layout_holds_duplicated_weights(dup_cache):
    cache, commits = dup_cache
    repo = cache / ("models--" + MODEL.replace("/", "--"))
    assert len(set(commits.values())) == 3  # three commits ...
    blobs = {p.name for p in (repo / "blobs").iterdir()}
    weights = {
        rev: (repo / "snapshots" / c / "model.safetensors").resolve().name for rev, c in commits.items()
    }
    assert weights["step1000-tokens4M"] == weights["step3000-tokens12M"] != weights["step2000-tokens8M"]
    assert set(weights.values()) <= blobs  # ... two weight blobs
    assert (repo / "refs" / "step3000-tokens12M").read_text() == commits["step3000-tokens12M"]


def test_lock_records_commits_and_weight_hashes(dup_cache, tmp_path):
    """Offline: each revision's commit from refs/<revision>, its weights' sha256 computed from the
    cached file; the lock is written and every row names repo, revision and commit."""
    cache, commits = dup_cache
    lock = tmp_path / "results" / "s" / "hub" / "lock.json"
    study = specs(cache, ["step1000-tokens4M", "step2000-tokens8M"], lock)
    records = lock_study(study, lock)
    on_disk = json.loads(lock.read_text())
    assert on_disk == records and set(records) == {s.name for s in study}
    for spec in study:
        rec = records[spec.name]
        assert (rec["repo"], rec["revision"], rec["commit"]) == (MODEL, spec.revision, commits[spec.revision])
        snap = cache / ("models--" + MODEL.replace("/", "--")) / "snapshots" / rec["commit"]
        assert rec["weights"] == {"model.safetensors": file_sha256(snap / "model.safetensors")}
        assert rec["weights_from"] == "cache"
        row = spec.row_fields("s")
        assert (row["repo"], row["revision"], row["commit"]) == (MODEL, spec.revision, commits[spec.revision])
        # a job loads the locked commit, from the cache alone even without offline mode
        online = hub_checkpoints(MODEL, [spec.revision], cache_dir=str(cache), offline=False, lock=str(lock))[
            0
        ]
        assert hub_kwargs(online) == {
            "revision": rec["commit"],
            "cache_dir": str(cache),
            "local_files_only": True,
        }


def test_identical_weights_stop_the_study_naming_both_revisions(dup_cache, tmp_path):
    cache, commits = dup_cache
    lock = tmp_path / "lock.json"
    study = specs(cache, ["step1000-tokens4M", "step2000-tokens8M", "step3000-tokens12M"], lock)
    with pytest.raises(HubRevisionError) as err:
        lock_study(study, lock)
    msg = str(err.value)
    snap = cache / ("models--" + MODEL.replace("/", "--")) / "snapshots" / commits["step1000-tokens4M"]
    digest = file_sha256(snap / "model.safetensors")
    assert f"{MODEL}@step1000-tokens4M" in msg and f"{MODEL}@step3000-tokens12M" in msg and digest in msg
    assert "step2000" not in msg and not lock.exists()  # nothing locked: no job may use them


def test_revision_absent_from_the_cache_is_an_error_naming_it(dup_cache, tmp_path):
    cache, _ = dup_cache
    study = specs(cache, ["step1000-tokens4M", "step9000-tokens36M"], tmp_path / "lock.json")
    with pytest.raises(
        HubRevisionError, match=r"revision 'step9000-tokens36M' of overtrain-test/tiny-dup is not in"
    ):
        lock_study(study, tmp_path / "lock.json")


def test_the_lock_pins_each_commit(dup_cache, tmp_path):
    """A revision re-pointed on the hub after the study locked it is an error naming both commits."""
    cache, commits = dup_cache
    lock = tmp_path / "lock.json"
    study = specs(cache, ["step2000-tokens8M"], lock)
    lock_study(study, lock)
    moved = snapshot_into_cache(
        tiny_model(tmp_path / "new", 7, "re-upload"), MODEL, "step2000-tokens8M", cache
    )
    with pytest.raises(
        HubRevisionError, match=f"now points to commit {moved}.*has {commits['step2000-tokens8M']}"
    ):
        lock_study(study, lock)
    assert read_lock(lock)[study[0].name]["commit"] == commits["step2000-tokens8M"]


# --- online: the hub's LFS metadata, no download ----------------------------------------------------


class _Hub(BaseHTTPRequestHandler):
    """A fake hub: refs and per-revision file metadata (LFS sha256) of MODEL; two branches whose
    model.safetensors have the same LFS sha256, as pythia-2.8b's branches in EleutherAI/pythia#205."""

    BRANCHES = {"step1000-tokens4M": "a" * 40, "step2000-tokens8M": "b" * 40, "step3000-tokens12M": "c" * 40}
    SHA = {"a" * 40: "1" * 64, "b" * 40: "2" * 64, "c" * 40: "1" * 64}

    def do_GET(self):
        base = f"/api/models/{MODEL}"
        if self.path.startswith(f"{base}/refs"):
            body = {
                "branches": [
                    {"name": n, "ref": f"refs/heads/{n}", "targetCommit": c} for n, c in self.BRANCHES.items()
                ],
                "tags": [],
                "converts": [],
            }
        elif self.path.startswith(f"{base}/revision/"):
            commit = self.path.split("/revision/")[1].split("?")[0]
            body = {
                "id": MODEL,
                "sha": commit,
                "siblings": [
                    {"rfilename": "config.json", "size": 40},
                    {
                        "rfilename": "model.safetensors",
                        "size": 200,
                        "lfs": {"sha256": self.SHA[commit], "size": 200, "pointerSize": 134},
                    },
                ],
            }
        else:
            self.send_response(404)
            self.end_headers()
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture()
def fake_hub(monkeypatch):
    server = HTTPServer(("127.0.0.1", 0), _Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    yield
    server.shutdown()
    server.server_close()


def test_online_hashes_come_from_lfs_metadata_without_download(fake_hub, tmp_path):
    lock = tmp_path / "lock.json"
    study = hub_checkpoints(
        MODEL,
        ["step1000-tokens4M", "step2000-tokens8M"],
        cache_dir=str(tmp_path),
        offline=False,
        lock=str(lock),
    )
    records = lock_study(study, lock)
    assert {r["revision"]: (r["commit"], r["weights"]) for r in records.values()} == {
        "step1000-tokens4M": ("a" * 40, {"model.safetensors": "1" * 64}),
        "step2000-tokens8M": ("b" * 40, {"model.safetensors": "2" * 64}),
    }
    assert {r["weights_from"] for r in records.values()} == {"lfs"}
    assert not any(tmp_path.glob("models--*"))  # nothing downloaded
    study = hub_checkpoints(
        MODEL,
        ["step1000-tokens4M", "step3000-tokens12M"],
        cache_dir=str(tmp_path),
        offline=False,
        lock=str(tmp_path / "l2.json"),
    )
    with pytest.raises(HubRevisionError, match=r"step1000-tokens4M .*step3000-tokens12M .*sha256 1{64}"):
        lock_study(study, tmp_path / "l2.json")


def test_sharded_weights_digest_is_order_free():
    a = {"model-00001-of-00002.safetensors": "1" * 64, "model-00002-of-00002.safetensors": "2" * 64}
    assert weights_digest(a) == weights_digest(dict(reversed(a.items()))) != weights_digest({"x": "1" * 64})
    assert weights_digest({"model.safetensors": "3" * 64}) == "3" * 64


def test_rows_carry_repo_revision_commit_through_aggregation(dup_cache, tmp_path):
    """A hub row written after the lock names its commit in the study table; a part written
    before the columns existed aggregates with them null."""
    import pandas as pd

    from pipeline.tables import aggregate_metrics, metric_row, write_metrics

    cache, commits = dup_cache
    lock = tmp_path / "lock.json"
    (spec,) = specs(cache, ["step2000-tokens8M"], lock)
    lock_study([spec], lock)
    new = tmp_path / "new.parquet"
    write_metrics(new, [metric_row(**spec.row_fields("s"), modification="none", metric="ppl", value=3.0)])
    old = tmp_path / "old.parquet"
    frame = pd.read_parquet(new).drop(columns=["repo", "revision", "commit"]).assign(checkpoint="older")
    frame.to_parquet(old)
    table = aggregate_metrics([new, old], {"config_hash": "x", "git_commit": "y", "packages": "z"})
    row = table.set_index("checkpoint").loc[spec.name]
    assert (row["repo"], row["revision"], row["commit"]) == (
        MODEL,
        "step2000-tokens8M",
        commits["step2000-tokens8M"],
    )
    assert table.set_index("checkpoint").loc["older", ["repo", "revision", "commit"]].isna().all()
