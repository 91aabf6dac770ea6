"""Rule ntk (pipeline/curvature/ntk.py): the per-group kernels add up to the full NTK, blocks and
column slices of a group change it by rounding only, a checkpoint's rows hold its spectrum, κ, the
ridge residual and Algorithm 2's numbers, and each method's kernel is that of what it trains."""

from __future__ import annotations

import json

import pytest
import torch

from pipeline.curvature.config import CurvatureConfig
from pipeline.curvature.linearization import _blocks, empirical_ntk, group_kernels, spectral_perturbation
from pipeline.curvature.ntk import ntk_rows, parameter_group, task_examples
from pipeline.data.batches import IGNORE_INDEX
from pipeline.data.encode import read_task
from pipeline.models.loading import load_checkpoint
from pipeline.models.trained_params import selected
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
    torch.testing.assert_close(one_block["a"] + one_block["b"], full)
    # a group per block, and group a (24 numbers) cut into column slices of 7 that fit 5 x 8 x 7 bytes
    for budget in (5 * 8 * 24, 5 * 8 * 7, 1):
        blocked, s2 = group_kernels(scalar, {"a": {"w1": w1}, "b": {"w2": w2}}, 5, block_bytes=budget)
        for k in ("a", "b"):
            torch.testing.assert_close(blocked[k], one_block[k], rtol=1e-13, atol=0.0)
        assert torch.equal(s1, s2)
    assert torch.equal(s, s1)
    assert [len(b) for b in _blocks({"a": 24, "b": 6}, {"a": {"w1": w1}, "b": {"w2": w2}}, 5, 5 * 8 * 7)] == [
        1,
        1,
        1,
        1,
        1,
    ]


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


def test_the_kernel_of_what_a_method_trains(study_files):
    """Per method, the kernel over its trained parameters: the output layer's equals that group's
    block of the full kernel; LoRA's (B = 0 at initialisation) equals Σ_m s² G_m Aᵀ A G_mᵀ from the
    adapted weights' own per-example gradients G_m and the seed's A; the model is left as it was."""
    cfg = CurvatureConfig(ntk_examples=6, ntk_sigma_scales=(1.0,))
    lora = {"lora": {"rank": 2, "alpha": 4.0, "target_modules": ["q_proj", "v_proj"]}}
    tasks = {"mr": study_files["dir"] / "mr.parquet"}
    methods = {"head": "output", "lora": lora}
    args = (study_files["spec"], study_files["ckpt"], tasks, 32, cfg, "t")
    rows = metrics_frame(ntk_rows(*args, methods=methods, seed=3))
    assert set(rows["modification"]) == {"none", "head", "lora"}
    value = rows.set_index(["modification", "metric"])["value"]
    groups = with_group(rows[(rows["modification"] == "none") & (rows["metric"] == "ntk_group_trace")])
    assert value[("head", "ntk_trace")] == pytest.approx(groups["lm_head"], rel=1e-9)
    # the full kernel is unchanged by the method kernels computed after it on the same model
    alone = metrics_frame(ntk_rows(*args)).set_index(["modification", "metric"])["value"]
    assert value[("none", "ntk_trace")] == alone[("none", "ntk_trace")]

    model, tokenizer, _, _ = load_checkpoint(study_files["spec"], study_files["ckpt"], "cpu")
    model.eval()
    examples = task_examples(read_task("mr", tasks["mr"]), tokenizer, 32, 6)
    with selected(model, lora, 3) as wrapped:
        adapters = {
            n.split(".lora_A")[0].replace("base_model.model.", ""): p.detach().clone()
            for n, p in wrapped.named_parameters()
            if ".lora_A." in n
        }
    weights = {f"{m}.weight": a for m, a in adapters.items()}
    named = dict(model.named_parameters())
    scale = 4.0 / 2  # alpha / r
    grads = []
    for x, y in examples:
        model.zero_grad()
        logits = model(input_ids=x).logits.reshape(-1, model.config.vocab_size)
        (-torch.nn.functional.cross_entropy(logits, y.reshape(-1), ignore_index=IGNORE_INDEX)).backward()
        grads.append(torch.cat([(scale * named[w].grad @ a.T).reshape(-1) for w, a in weights.items()]))
    g = torch.stack(grads).double()
    want = torch.linalg.eigvalsh(g @ g.T)
    assert value[("lora", "ntk_lambda_max")] == pytest.approx(float(want[-1]), rel=1e-5)
    assert value[("lora", "ntk_trace")] == pytest.approx(float(want.sum()), rel=1e-5)
    extra = json.loads(
        rows[(rows["modification"] == "lora") & (rows["metric"] == "ntk_trace")]["extra"].iloc[0]
    )
    assert extra["parameters"] == sum(2 * (a.shape[1] + named[w].shape[0]) for w, a in weights.items())


def with_group(df):
    return {json.loads(e)["group"]: v for e, v in zip(df["extra"], df["value"])}
