"""The linearization gap and the empirical NTK (pipeline/curvature/linearization.py) against closed
forms: a model linear in θ, a two-layer linear map, an independent Jacobian, kernel ridge algebra."""

from __future__ import annotations

import torch

from pipeline.curvature.linearization import (
    empirical_ntk,
    hf_logits,
    kernel_stats,
    linearization_gap,
    ridge_residual,
    trainable_copy,
)
from pipeline.data.batches import IGNORE_INDEX
from pipeline.models.build import build_model, model_config


def _random(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_the_gap_is_zero_for_a_model_linear_in_its_parameters():
    x = _random((5, 3, 4), 0)
    pre, delta = {"w": _random((4, 7), 1)}, {"w": _random((4, 7), 2)}
    out = linearization_gap(lambda p, inputs: inputs @ p["w"], pre, delta, x)
    assert out["gap"] == 0.0 or out["gap"] < 1e-15
    assert abs(out["kl"]) < 1e-12


def test_the_gap_of_a_two_layer_linear_map_is_its_second_order_term():
    """f = x W1 W2: f(θ + δ) − f(θ) − J δ = x δ1 δ2 exactly, so the gap is ‖x δ1 δ2‖ / ‖f(θ+δ) − f(θ)‖."""
    x = _random((6, 4), 0)
    pre = {"w1": _random((4, 5), 1), "w2": _random((5, 3), 2)}
    delta = {"w1": 0.3 * _random((4, 5), 3), "w2": 0.3 * _random((5, 3), 4)}
    out = linearization_gap(lambda p, inputs: inputs @ p["w1"] @ p["w2"], pre, delta, x)
    change = x @ (pre["w1"] + delta["w1"]) @ (pre["w2"] + delta["w2"]) - x @ pre["w1"] @ pre["w2"]
    expected = torch.linalg.vector_norm(x @ delta["w1"] @ delta["w2"]) / torch.linalg.vector_norm(change)
    assert abs(out["gap"] - float(expected)) < 1e-12


def _tiny_lm() -> torch.nn.Module:
    model = build_model(model_config("tiny", 50, eos_token_id=0, pad_token_id=1), seed=0).double()
    model.set_attn_implementation("eager")  # forward-mode AD: no rule for flash SDPA
    return model.eval()


def test_the_gap_on_a_causal_lm_grows_with_the_step_and_scores_only_labelled_positions():
    model = _tiny_lm()
    pre = trainable_copy(model)
    direction = {n: _random(tuple(p.shape), i) * 0.02 for i, (n, p) in enumerate(pre.items())}
    inputs = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(0))
    labels = inputs.roll(-1, 1).masked_fill(torch.arange(12) < 6, IGNORE_INDEX)
    small, large = (
        linearization_gap(hf_logits(model), pre, {n: t * s for n, t in direction.items()}, inputs, labels)
        for s in (0.1, 1.0)
    )
    assert 0 < small["gap"] < large["gap"] and 0 <= small["kl"] < large["kl"]
    assert set(large) == {"gap", "kl", "loss_ft", "loss_lin"}


def test_the_empirical_ntk_is_j_jt_of_an_independent_jacobian():
    """K from per-example gradients equals J Jᵀ, J from torch.autograd.functional.jacobian of the
    vector of per-example mean log-likelihoods over the flattened parameters (float64)."""
    model = _tiny_lm()
    params = {
        n: p for n, p in trainable_copy(model).items() if n.endswith(("q_proj.weight", "lm_head.weight"))
    }
    examples = torch.randint(0, 50, (4, 8), generator=torch.Generator().manual_seed(1))
    logits = hf_logits(model)
    frozen = trainable_copy(model)

    def mean_loglik(p: dict, i: int) -> torch.Tensor:
        x = examples[i : i + 1]
        logp = logits({**frozen, **p}, x)[:, :-1].log_softmax(-1)
        return logp.gather(-1, x[:, 1:, None]).mean()

    kernel, scalars = empirical_ntk(mean_loglik, params, len(examples))
    names, shapes = list(params), [p.shape for p in params.values()]
    flat = torch.cat([p.reshape(-1) for p in params.values()])

    def all_scalars(theta: torch.Tensor) -> torch.Tensor:
        parts = dict(zip(names, torch.split(theta, [s.numel() for s in shapes]), strict=True))
        unflat = {n: parts[n].reshape(s) for n, s in zip(names, shapes, strict=True)}
        return torch.stack([mean_loglik(unflat, i) for i in range(len(examples))])

    jac = torch.autograd.functional.jacobian(all_scalars, flat)
    assert torch.allclose(kernel, jac @ jac.T, rtol=1e-10, atol=1e-12)
    assert torch.allclose(scalars, all_scalars(flat).detach(), rtol=0, atol=1e-12)


def test_kernel_stats_of_a_known_spectrum():
    q, _ = torch.linalg.qr(_random((4, 4), 0))
    kernel = q @ torch.diag(torch.tensor([4.0, 2.0, 1.0, 1.0], dtype=torch.float64)) @ q.T
    stats = kernel_stats(kernel, [0.0, 1.0])
    assert abs(stats["lambda_max"] - 4) < 1e-12 and abs(stats["lambda_min"] - 1) < 1e-12
    assert abs(stats["trace"] - 8) < 1e-12
    assert abs(stats["kappa@0"] - 4) < 1e-12 and abs(stats["kappa@1"] - (4 + 2) / (1 + 2)) < 1e-12
    p = torch.tensor([0.5, 0.25, 0.125, 0.125], dtype=torch.float64)
    assert abs(stats["effective_rank"] - float(torch.exp(-(p * p.log()).sum()))) < 1e-12


def test_the_kernel_ridge_residual_lies_within_theorem_5s_bounds_on_random_cases():
    """With the residual targets (r = y − f_θ_pre(X), where the paper writes Y) the bounds hold, and
    R equals the explicit ‖r − K (K + σI)⁻¹ r‖²."""
    for seed in range(20):
        a = _random((6, 3 + seed % 5), seed)
        kernel, r = a @ a.T, _random((6,), 100 + seed)
        for sigma in (1e-3, 0.1, 10.0):
            out = ridge_residual(kernel, r, sigma)
            fit = kernel @ torch.linalg.solve(kernel + sigma * torch.eye(6, dtype=torch.float64), r)
            assert abs(out["risk"] - float((r - fit) @ (r - fit))) < 1e-9 * (1 + out["risk"])
            assert out["lower"] * (1 - 1e-9) <= out["risk"] <= out["upper"] * (1 + 1e-9)
