"""pipeline/fields.py: one vocabulary for a config field's role, used by every config dataclass."""

import ast
from dataclasses import fields
from pathlib import Path

import pytest

from pipeline import fields as roles
from pipeline.curvature.config import CurvatureConfig
from pipeline.fields import NEITHER, NUMBERS, RECORDED, meta
from pipeline.judge.annotate import NOT_IDENTITY
from pipeline.judge.config import JudgeConfig
from pipeline.train.config import FinetuneConfig, PretrainConfig

ROOT = Path(__file__).resolve().parents[1]


def test_a_leaf_module():
    tree = ast.parse((ROOT / "pipeline" / "fields.py").read_text())
    imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m.split(".")[0] == "pipeline"], imported


def test_roles():
    assert meta() == {"role": NUMBERS} and meta(NEITHER, base_eval=True) == {
        "role": NEITHER,
        "base_eval": True,
    }
    with pytest.raises(ValueError, match="field role 'params'"):
        meta("params")
    by_role = {r: roles.names(FinetuneConfig, r) for r in roles.ROLES}
    assert set(by_role[NEITHER]) == {
        "activation_checkpointing",
        "compile",
        "checkpoint_every",
        "checkpoint_seconds",
        "log_every",
        "collective_timeout_s",
    }
    assert not by_role[RECORDED] and "micro_batch_size" in by_role[NUMBERS]
    mb = roles.field_named(FinetuneConfig, "micro_batch_size")
    assert roles.changes_numbers(mb) and not roles.is_recorded(mb)  # reruns, but rows do not record it
    assert set(roles.names(PretrainConfig, NEITHER)) == {
        "activation_checkpointing",
        "compile",
        "checkpoint_every",
        "checkpoint_seconds",
        "log_every",
    }
    # the NTK's block size only decides how much memory its gradients take at once
    assert {f.name for f in fields(CurvatureConfig) if not roles.changes_numbers(f)} == {"ntk_block_gib"}


def test_the_judges_identity_is_its_numbers_fields():
    """The annotation cache's key (judge_identity) leaves out exactly the fields that cannot change
    an answer: the set it had as a hand-kept tuple (a change would orphan every cached answer)."""
    assert NOT_IDENTITY == {
        "name",
        "batch_size",
        "max_retries",
        "length_controlled",
        "base_url",
        "api_key_env",
    }
    assert roles.names(JudgeConfig, RECORDED) == ("name",)
