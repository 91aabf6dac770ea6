"""Bad input: every config error names the key and what was expected, before any job starts."""

import pytest
from workflow_utils import smoke_config, snakemake, write_config

from pipeline.data.corpus import CorpusError, Document, build_corpus

CASES = [
    ({"pertub": {"gammas": [1]}}, "pertub"),
    ({"perturb.gammas": "big"}, "gammas"),
    ({"perturb.gammas": [1, -0.5]}, "-0.5"),
    ({"pretrain.budgets": [100]}, "token budget 100 is smaller than one batch"),
    ({"pretrain.presets": ["olmo-1t"]}, "olmo-1t"),
    ({"pretrain.lr": 0}, "lr"),
    ({"corpus.embedded": ["wikipedia"]}, "wikipedia"),
    (
        {
            "checkpoints.source": "local",
            "checkpoints.local": [{"name": "a", "path": "/nonexistent/dir", "tokens": 5}],
        },
        "/nonexistent/dir",
    ),
    ({"checkpoints.source": "local", "checkpoints.local": [{"name": "a", "path": "/tmp"}]}, "tokens"),
    ({"finetune.tasks": ["code", "imdb"]}, "imdb"),
    ({"finetune.learning_rates": [1.0e-3, 0]}, "learning_rates"),
    ({"finetune.learning_rates": "all"}, "learning_rates"),
    ({"finetune.learning_rates": [1.0e-3, 1.0000001e-3]}, "differ only beyond 6 significant digits"),
    ({"finetune.schedule": "linear"}, "linear"),
]


@pytest.mark.parametrize("change, needle", CASES, ids=[c[1][:20] for c in CASES])
def test_bad_config_is_rejected_with_a_clear_message(tmp_path, change, needle):
    cfg = smoke_config(study="bad-config", **{k: v for k, v in change.items() if "." in k})
    cfg.update({k: v for k, v in change.items() if "." not in k})
    res = snakemake(write_config(tmp_path, cfg), "-n", "--cores", "1")
    text = res.stdout + res.stderr
    assert res.returncode != 0
    assert needle in text, text[-3000:]
    assert "Traceback" not in text, text[-3000:]


def test_empty_split_is_a_clear_error():
    docs = [Document(f"d{i}", "x", "some text") for i in range(3)]
    with pytest.raises(CorpusError, match="split .* is empty"):
        build_corpus(docs, {"validation": 0.01, "test": 0.01})


def test_missing_data_package_names_the_file(tmp_path):
    from pipeline.data.corpus import load_embedded

    with pytest.raises(CorpusError, match="make setup"):
        load_embedded("sotu", tmp_path)
