"""Rule ntk (pipeline/curvature/ntk.py): the per-group kernels add up to the full NTK, blocks change
no number, and a checkpoint's rows hold its spectrum, κ, the ridge residual and Algorithm 2's numbers."""

from __future__ import annotations

import json

import pytest
import torch

from pipeline.curvature.config import CurvatureConfig
from pipeline.curvature.linearization import empirical_ntk, group_kernels, spectral_perturbation
from pipeline.curvature.ntk import ntk_rows, parameter_group
from pipeline.tables import metrics_frame


def test_groups_add_up_to_the_kernel_and_blocks_change_nothing():
    g = torch.Generator().manual_seed(0)
    w1, w2 = (
        torch.randn(6, 4, generator=g, dtype=torch.float64),
        torch.randn(6, generator=g, dtype=torch.float64),
    )
    x = torch.randn(5, 4, generator=g, dtype=torch.float64)

    def scalar(p, i):
        return torch.tanh(p["w1"] @ x[i]) @ p["w2"]

    full, s = empirical_ntk(scalar, {"w1": w1, "w2": w2}, 5)
    one_block, s1 = group_kernels(scalar, {"a": {"w1": w1}, "b": {"w2": w2}}, 5)
    blocked, s2 = group_kernels(scalar, {"a": {"w1": w1}, "b": {"w2": w2}}, 5, block_bytes=1)
    torch.testing.assert_close(one_block["a"] + one_block["b"], full)
    for k in ("a", "b"):
        assert torch.equal(blocked[k], one_block[k])
    assert torch.equal(s, s1) and torch.equal(s1, s2)


def test_spectral_perturbation_numbers():
    k = torch.diag(torch.tensor([4.0, 1.0], dtype=torch.float64))
    s = torch.diag(torch.tensor([0.0, 3.0], dtype=torch.float64))
    found = spectral_perturbation(k, s, torch.tensor([1.0, 1.0], dtype=torch.float64), sigma=1.0)
    assert found["eta"] == pytest.approx(3.0 / 2.0)  # (K + I)^-1/2 S (K + I)^-1/2 = diag(0, 3/2)
    assert found["ratio"] == pytest.approx(5.0 / 5.0)  # λ_max(diag(5, 5)) / λ_max(diag(5, 2))
    # σ(K + σI)⁻¹ r = (1/5, 1/2) -> (1/5, 1/5): the residual's squared norm 0.29 -> 0.08
    assert found["risk_base"] == pytest.approx(0.29) and found["risk_with"] == pytest.approx(0.08)


def test_parameter_groups():
    assert parameter_group("model.layers.3.self_attn.q_proj.weight") == "layer3"
    assert parameter_group("model.embed_tokens.weight") == "embed_tokens"
    assert parameter_group("lm_head.weight") == "lm_head"
    assert parameter_group("model.norm.weight") == "norm"


def test_a_checkpoint_s_ntk_rows(study_files):
    cfg = CurvatureConfig(ntk_examples=8, ntk_sigma_scales=(1e-2, 1.0))
    tasks = {t: study_files["dir"] / f"{t}.parquet" for t in ("book", "mr")}
    rows = metrics_frame(ntk_rows(study_files["spec"], study_files["ckpt"], tasks, 32, cfg, "t"))
    assert set(rows["eval_data"]) == {"book", "mr"}
    for task in tasks:
        check_task_rows(rows[rows["eval_data"] == task])


def check_task_rows(df):
    value = df.set_index("metric")["value"]
    assert value["ntk_lambda_max"] >= value["ntk_lambda_min"] >= 0
    assert 1 <= value["ntk_effective_rank"] <= 8
    assert value["ntk_mean_loglik"] < 0
    kappa = df[df["metric"] == "ntk_kappa"]
    scales = kappa["extra"].map(lambda e: json.loads(e)["sigma_scale"])
    assert (
        list(scales) == [1e-2, 1.0] and kappa["value"].is_monotonic_decreasing
    )  # more σ: better conditioned
    groups = df[df["metric"] == "ntk_group_trace"]
    per_scale = groups[groups["extra"].map(lambda e: json.loads(e)["sigma_scale"]) == 1.0]
    assert per_scale["value"].sum() == pytest.approx(value["ntk_trace"], rel=1e-9)
    assert {json.loads(e)["group"] for e in per_scale["extra"]} >= {"layer0", "layer1", "embed_tokens"}
    risk_ratio = df[df["metric"] == "ntk_group_risk_ratio"]["value"]
    assert len(risk_ratio) and ((risk_ratio > 0) & (risk_ratio < 10)).all()
