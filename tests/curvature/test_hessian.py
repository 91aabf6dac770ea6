"""Curvature estimators against exact answers: quadratic losses with explicit Hessians, and the tiny
model's HVP against a finite difference of gradients."""

from __future__ import annotations

import math

import pytest
import torch

from pipeline.curvature.config import CurvatureConfig
from pipeline.curvature.hessian import directional, fd_curvature, hutchinson, hvps, sharpness, top_eigenvalue
from pipeline.curvature.lines import EAGER, line_rows, prepare, token_loss, trainable
from pipeline.curvature.summary import smallest_lambda_error
from pipeline.data.heldout import build_eval_set
from pipeline.models.build import init_std
from pipeline.sweeps.noise import gaussian_direction, perturb_gaussian


def _quadratic(d: int = 6, seed: int = 0):
    """L(θ) = ½ θᵀAθ + gᵀθ + c over one parameter tensor, A symmetric (indefinite)."""
    gen = torch.Generator().manual_seed(seed)
    m = torch.randn(d, d, generator=gen, dtype=torch.float64)
    a = (m + m.T) / 2 + 2 * torch.eye(d, dtype=torch.float64)
    g = torch.randn(d, generator=gen, dtype=torch.float64)
    theta = torch.randn(d, generator=gen, dtype=torch.float64, requires_grad=True)

    def loss_at(t: torch.Tensor) -> torch.Tensor:
        return 0.5 * t @ a @ t + g @ t + 1.5

    def batch_losses():  # two "batches" whose losses sum to L: H = Σ H_b
        yield 0.25 * loss_at(theta)
        yield 0.75 * loss_at(theta)

    return a, theta, loss_at, batch_losses


def test_proposition_d1_on_a_quadratic():
    """E[L(θ + λε) − L(θ)] = ½ λ² tr(H) for ε ~ N(0, I), to Monte Carlo error."""
    a, theta, loss_at, _ = _quadratic()
    gen = torch.Generator().manual_seed(1)
    lam, n = 0.7, 20000
    eps = torch.randn(n, a.shape[0], generator=gen, dtype=torch.float64)
    with torch.no_grad():
        diffs = torch.stack([loss_at(theta + lam * e) - loss_at(theta) for e in eps])
    se = float(diffs.std()) / math.sqrt(n)
    expected = 0.5 * lam**2 * float(torch.trace(a))
    assert abs(float(diffs.mean()) - expected) < 4 * se


def test_hvp_directional_and_hutchinson_on_an_explicit_matrix():
    a, theta, loss_at, batch_losses = _quadratic()
    v = torch.arange(1.0, 7.0, dtype=torch.float64)
    loss, grad, (hv,) = hvps(batch_losses, [theta], [[v]])
    assert loss == pytest.approx(float(loss_at(theta).detach()))
    torch.testing.assert_close(hv[0], a @ v)
    l0, (gd,), (curv,) = directional(batch_losses, [theta], [[v]])
    assert gd == pytest.approx(float(grad[0] @ v)) and curv == pytest.approx(float(v @ a @ v))
    est = hutchinson(batch_losses, [theta], probes=400, seed=0)
    assert abs(est["mean"] - float(torch.trace(a))) < 4 * est["se"]
    assert 0 < est["se"] < 1
    scales = [0.5]  # tr(DAD) with D = 0.5 I
    est = hutchinson(batch_losses, [theta], probes=400, seed=0, scales=scales)
    assert abs(est["mean"] - 0.25 * float(torch.trace(a))) < 4 * est["se"]
    eig = torch.linalg.eigvalsh(a)
    top = float(eig[eig.abs().argmax()])
    assert top_eigenvalue(batch_losses, [theta], iters=300, seed=0) == pytest.approx(top, rel=1e-3)
    sharp = sharpness(batch_losses, [theta], [1.0], probes=50, power_iters=300)
    assert sharp["hessian_top_eig"] == pytest.approx(top, rel=1e-3)
    assert abs(sharp["hessian_trace"] - float(torch.trace(a))) < 5 * sharp["hessian_trace_se"]


def test_fd_curvature_of_an_exact_quadratic_line():
    lams = [-0.1, -0.05, 0.0, 0.05, 0.1]
    assert fd_curvature(lams, [1 + 0.3 * x + 0.5 * 2.5 * x * x for x in lams], 1.0) == pytest.approx(2.5)
    assert math.isnan(fd_curvature([0.0, 0.1], [1.0, 1.1], 1.0))


def test_grid_without_zero_is_rejected():
    with pytest.raises(ValueError, match=r"curvature\.lambdas_small: a λ grid must contain 0"):
        CurvatureConfig(lambdas_small=(0.1, 0.2))
    with pytest.raises(ValueError, match=r"curvature\.finetune_lambdas_wide"):
        CurvatureConfig(finetune_lambdas_wide=(1.0,))


@pytest.fixture()
def tiny_setup(tiny_model, tokenizer, moby_docs):
    texts = [d.text for d in moby_docs[60:62]]
    docs = [tokenizer(t)["input_ids"][:300] for t in texts]
    data = build_eval_set(docs, texts, tokenizer.eos_token_id, 64, tokenizer.pad_token_id)
    prepare(tiny_model, "float64", "tiny")
    return tiny_model, data


def test_tiny_model_hvp_is_a_finite_difference_of_gradients(tiny_setup):
    model, data = tiny_setup
    assert model.config._attn_implementation == EAGER
    params = [p for _, p in trainable(model)]
    loss_fn = token_loss(model, data, 4, torch.device("cpu"))
    gen = torch.Generator().manual_seed(0)
    v = [torch.randn(p.shape, generator=gen, dtype=torch.float64) * 0.02 for p in params]
    _, grad, (hv,) = hvps(loss_fn, params, [v])
    h = 1e-3  # float32 softmax / RMSNorm inside transformers: rounding ~1e-8/h, truncation ~h²
    grads = []
    for sign in (1, -1):
        with torch.no_grad():
            for p, vi in zip(params, v):
                p.add_(sign * h * vi)
        grads.append(hvps(loss_fn, params, [])[1])
        with torch.no_grad():
            for p, vi in zip(params, v):
                p.sub_(sign * h * vi)
    fd = [(a - b) / (2 * h) for a, b in zip(*grads)]
    num = math.sqrt(sum(float((x - y).pow(2).sum()) for x, y in zip(hv, fd)))
    den = math.sqrt(sum(float(x.pow(2).sum()) for x in hv))
    assert num / den < 1e-3


def test_quadratic_fits_the_tiny_model_near_zero(tiny_setup):
    """Along the perturbation stage's Gaussian ε: the quadratic within 5% of ΔL at the smallest λ,
    the fitted curvature near εᵀHε, λ = γ reproduces perturb_gaussian, and θ is restored."""
    model, data = tiny_setup
    stds = init_std(model)
    cfg = CurvatureConfig(
        lambdas_small=(-0.02, -0.01, 0.0, 0.01, 0.02), lambdas_wide=(0.0, 2.0), batch_size=4
    )
    named = trainable(model)
    eps = gaussian_direction(model, stds, seed=3)
    vec = [eps[n].double() if n in eps else torch.zeros_like(p) for n, p in named]
    before = {n: p.detach().clone() for n, p in named}
    rows = line_rows(
        model, data, [({"direction": "gaussian", "seed": 3}, vec)], cfg.grids("gaussian"), cfg, {}
    )
    assert len(rows) == 7 and all(r["finite"] for r in rows)
    assert all(torch.equal(p, before[n]) for n, p in named)
    small = [r for r in rows if r["grid"] == "small"]
    assert smallest_lambda_error(small) <= 0.05
    assert rows[0]["curvature_fd"] == pytest.approx(rows[0]["curvature"], rel=0.05)
    # λ = 2 of the line is γ = 2 of the perturbation stage (same ε: the same seeds and scaling)
    loss_fn = token_loss(model, data, 4, torch.device("cpu"))
    perturb_gaussian(model, stds, 2.0, seed=3)
    with torch.no_grad():
        perturbed = float(sum(loss_fn()))
    wide = next(r for r in rows if r["lambda"] == 2.0)
    assert wide["loss"] == pytest.approx(perturbed, rel=1e-6)


def test_non_finite_loss_is_recorded_and_the_curve_continues(tiny_setup):
    model, data = tiny_setup
    cfg = CurvatureConfig(lambdas_small=(-0.1, 0.0, 0.1), lambdas_wide=(0.0, 1.0, 2.0), batch_size=8)
    vec = [
        torch.full_like(p, float("inf")) if i == 0 else torch.zeros_like(p)
        for i, (_, p) in enumerate(trainable(model))
    ]
    rows = line_rows(
        model, data, [({"direction": "gaussian", "seed": 0}, vec)], cfg.grids("gaussian"), cfg, {}
    )
    assert len(rows) == 6
    assert [r["finite"] for r in rows] == [False, True, False, True, False, False]
