"""Linearized fine-tuning (pipeline/train/linearized.py): the tangent model is the first-order
model, gradient descent on it with the coupled penalty lands on the kernel-ridge solution, and a
fine-tuning job trains and evaluates it like any run."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import torch

from pipeline.curvature.linearization import empirical_ntk, ridge_residual
from pipeline.tables import metrics_frame
from pipeline.train.linearized import linearize
from tests.train.test_finetune import CFG, run


class TwoLayerTanh(torch.nn.Module):
    """f(x) = w2 · tanh(W1 x): one scalar per example, nonlinear in θ."""

    def __init__(self, d: int, h: int):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w1 = torch.nn.Parameter(torch.randn(h, d, generator=g, dtype=torch.float64) / d**0.5)
        self.w2 = torch.nn.Parameter(torch.randn(h, generator=g, dtype=torch.float64) / h**0.5)

    def forward(self, input_ids: torch.Tensor, attention_mask=None):
        return SimpleNamespace(logits=torch.tanh(input_ids @ self.w1.T) @ self.w2)


def test_the_tangent_model_is_first_order_in_theta():
    model = TwoLayerTanh(5, 7)
    x = torch.randn(6, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    pre = {n: p.detach().clone() for n, p in model.named_parameters()}
    f0 = model(x).logits.detach()
    undo = linearize(model, pre)
    torch.testing.assert_close(model(x).logits, f0, rtol=0, atol=0)  # at θ_pre: f(θ_pre) exactly
    step = {n: 1e-2 * torch.randn_like(p) for n, p in pre.items()}
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.add_(step[n])
    lin = model(x).logits.detach()
    twin = TwoLayerTanh(5, 7)  # an independent jvp, through the class's own forward
    _, jvp = torch.func.jvp(lambda p: torch.func.functional_call(twin, p, (x,)).logits, (pre,), (step,))
    undo()
    torch.testing.assert_close(lin, f0 + jvp)
    assert not torch.allclose(model(x).logits, lin)  # the real model is not linear in θ


def test_linearized_gradient_descent_with_the_coupled_penalty_is_kernel_ridge():
    """min ½‖f_lin(θ) − y‖² + λ‖θ − θ_pre‖²  ⇒  training residual σ(K + σI)⁻¹ r with σ = 2λ."""
    n, lam = 8, 0.25
    model = TwoLayerTanh(4, 16)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(n, 4, generator=g, dtype=torch.float64)
    y = torch.randn(n, generator=g, dtype=torch.float64)
    pre = {k: p.detach().clone() for k, p in model.named_parameters()}

    def scalar(params, i):
        return torch.func.functional_call(model, params, (x[i : i + 1],)).logits[0]

    kernel, f0 = empirical_ntk(scalar, pre, n)
    expected = ridge_residual(kernel, y - f0, 2 * lam)["risk"]
    linearize(model, pre)
    top = float(torch.linalg.eigvalsh(kernel)[-1])
    eta = 1.0 / (top + 2 * lam)  # 1 / the objective's largest curvature: contraction ≤ 1 − 2λη per step
    steps = int(40 / (2 * lam * eta))  # e^-40 of the initial error left
    opt = torch.optim.SGD(model.parameters(), lr=eta)
    for _ in range(steps):
        opt.zero_grad()
        prox = sum((p - pre[k]).pow(2).sum() for k, p in model.named_parameters())
        (0.5 * (model(x).logits - y).pow(2).sum() + lam * prox).backward()
        opt.step()
    residual = float((y - model(x).logits.detach()).pow(2).sum())
    assert abs(residual - expected) <= 1e-9 * max(1.0, expected), (steps, residual, expected)


def test_a_linearized_job_trains_the_tangent_model(study_files):
    # the gap on every validation window: its linearized loss is then the job's own ID loss
    cfg = dataclasses.replace(CFG, epochs=1, linearized=True, linearization_tokens=10**6)
    df = metrics_frame(run(study_files, "book", lr=3e-2, cfg=cfg, method="lin"))
    assert json.loads(df["extra"].iloc[0])["linearized"] is True
    book = df[(df["eval_data"] == "book") & (df["split"] == "validation")]
    trained_loss = float(book[book["metric"] == "loss"]["value"].iloc[0])
    lin_loss = float(book[book["metric"] == "lin_loss_lin"]["value"].iloc[0])
    real_loss = float(book[book["metric"] == "lin_loss_ft"]["value"].iloc[0])
    # the job evaluated the tangent model: its ID loss is the linearized model's at θ, not the real one's
    # (the gap, computed after, saw the real forward back: its real loss differs)
    assert abs(lin_loss - trained_loss) < 1e-4 * trained_loss
    assert abs(real_loss - lin_loss) > 1e-3 * lin_loss
