"""The "Features are fate" experiments (arXiv:2410.08194): the (n, θ, σ) grid, ridge transfer, and
fine-tuning a deep network; rows for results/<study>/theory/transfer.parquet."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.theory.transfer import features_are_fate as faf
from pipeline.theory.transfer import linear_teachers as lt
from pipeline.theory.transfer.one_layer import (
    draw_features,
    finetune_risks,
    ridge_transfer_risks,
    scratch_risks,
)
from pipeline.theory.transfer.runs import (
    FAF,
    cf_rows,
    design_step,
    finetune,
    pretrain,
    projections,
    rng,
    sim_rows,
    target,
    unit,
)

if TYPE_CHECKING:
    import pandas as pd

# method: (depth, exact formula, limit formula); linear transfer retrains the head of the paper's depth-2 net
GRID_METHODS = {
    "scratch": (1, "exact form of Thm 3.6", "eq. 10 (Thm 3.6)"),
    "linear_transfer": (2, "Thm 3.7 (eq. 12)", "n -> inf of eq. 12 (as in eq. 13)"),
    "finetune": (1, "exact form of Thm 3.9 (depth 1)", "eq. 16 (Thm 3.9)"),
}


def faf_grid(c: Mapping[str, Any], seed: int) -> list[pd.DataFrame]:
    """Scratch, linear transfer and depth-1 fine-tuning on the (n, θ, σ) grid by linear algebra on one set
    of draws per n, next to the exact expectations and the paper's limits; T = E(R_scratch − R), paired."""
    d, k = c["d"], c["instances"]
    th, sg = np.asarray(c["theta"]), np.asarray(c["sigma"])
    TH, SG = th[:, None], sg[None, :]
    out = []
    for n in c["n"]:
        draws = draw_features(n, d, k, rng(seed, 1, n))
        sims = {
            "scratch": scratch_risks(draws, th, sg),
            "linear_transfer": ridge_transfer_risks(draws, th, sg),
            "finetune": finetune_risks(draws, th, sg),
        }  # (draws, θ, σ)
        exact = {
            "scratch": faf.scratch_risk(n, d, SG) + 0 * TH,
            "linear_transfer": faf.linear_transfer_risk(n, TH, SG),
            "finetune": faf.finetune_risk(n, d, TH, SG),
        }
        limit = {
            "scratch": faf.scratch_risk_asymptotic(n / d, SG) + 0 * TH,
            "linear_transfer": faf.linear_transfer_risk_asymptotic(TH) + 0 * SG,
            "finetune": faf.finetune_risk_asymptotic(n / d, TH, SG),
        }
        for method, (depth, f_exact, f_limit) in GRID_METHODS.items():
            g = dict(
                paper=FAF, experiment="faf_grid", method=method, depth=depth, d=d, n=n, theta=TH, sigma=SG
            )
            out.append(sim_rows(sims[method], **g, metric="risk", solver="linear_algebra", seed=seed))
            out.append(cf_rows(exact[method], "exact", f_exact, **g, metric="risk"))
            out.append(cf_rows(limit[method], "asymptotic", f_limit, **g, metric="risk"))
            if method == "scratch":
                continue
            g["metric"] = "transferability"
            out.append(sim_rows(sims["scratch"] - sims[method], **g, solver="linear_algebra", seed=seed))
            out.append(cf_rows(exact["scratch"] - exact[method], "exact", "exact E R_sc - E R", **g))
            eq = "eq. 13" if method == "linear_transfer" else "eq. 17"
            out.append(cf_rows(limit["scratch"] - limit[method], "asymptotic", eq, **g))
    return out


def faf_ridge(c: Mapping[str, Any], d: int, k: int, seed: int) -> list[pd.DataFrame]:
    """Ridge linear transfer vs λ: simulations, the exact finite-n expectation and Thm 3.8's n → ∞ limit."""
    th, sg = c["theta"], np.asarray(c["sigma"])
    out = []
    for n in c["n"]:
        draws = draw_features(n, d, k, rng(seed, 2, n))
        for lam in c["lambdas"]:
            g = dict(paper=FAF, experiment="faf_ridge", method="ridge_transfer", depth=2, d=d, n=n, theta=th)
            g.update(ridge=lam, sigma=sg, metric="risk")
            r = ridge_transfer_risks(draws, np.array([th]), sg, lam)[:, 0]  # (draws, σ)
            out.append(sim_rows(r, **g, solver="linear_algebra", seed=seed))
            exact = [faf.ridge_transfer_risk(n, th, s, lam) for s in sg]
            out.append(cf_rows(exact, "exact", "eq. 128 (exact in n)", **g))
            limit = faf.ridge_transfer_risk_asymptotic(th, lam) + 0 * sg
            out.append(cf_rows(limit, "asymptotic", "Thm 3.8 (n -> inf)", **g))
    return out


def faf_deep(c: Mapping[str, Any], d: int, gd: Mapping[str, Any], seed: int) -> list[pd.DataFrame]:
    """Fine-tuning a depth-L network by GD from its pre-trained balanced state, next to linear teachers'
    Thm 5.2 and depth-1 fine-tuning (Thm 3.9's model) on the same draws."""
    L, k = c["depth"], c["instances"]
    th, sg = np.asarray(c["theta"]), np.asarray(c["sigma"])
    T, S = len(th), len(sg)
    key = "theory.transfer.features_are_fate.deep.learning_rate"
    pre = pretrain(d, L, k, design_step(c["learning_rate"], max(c["n"]), d), gd, rng(seed, 3), key)
    out = []
    for n in c["n"]:
        eta = design_step(c["learning_rate"], n, d)
        gen = rng(seed, 4, n)
        X0, eps = gen.standard_normal((k, n, d)), gen.standard_normal((k, n))
        X = np.broadcast_to(X0, (T, S, k, n, d)).reshape(-1, n, d)  # batch order (θ, σ, draw)
        beta_t = target(d, th)[:, None, None, :]  # (T, 1, 1, d)
        y = (np.einsum("ind,tsjd->tsin", X0, beta_t) + sg[None, :, None, None] * eps).reshape(-1, n)
        beta, steps = finetune(pre, X, y, eta, gd, key)
        perp, fit = projections(X, y, unit(d))
        bt = np.broadcast_to(beta_t, (T, S, k, d)).reshape(-1, d)

        def risk(b):
            return np.sum((b - bt) ** 2, axis=1).reshape(T, S, k).transpose(2, 0, 1)  # (draws, θ, σ)

        g = dict(
            paper=FAF,
            experiment="faf_deep",
            method="finetune",
            d=d,
            n=n,
            theta=th[:, None],
            sigma=sg[None, :],
        )
        r_sc = risk(fit)
        out.append(
            sim_rows(
                r_sc,
                **(g | {"method": "scratch"}),
                depth=1,
                metric="risk",
                solver="linear_algebra",
                seed=seed,
            )
        )
        runs = (
            ("gradient_descent", L, beta, {"lr": eta, "steps": steps}),
            ("limit_point", L, lt.limit_point(perp, fit, 1.0, L), {}),
            ("linear_algebra", 1, perp + fit, {}),
        )
        for solver, depth, b, extra in runs:
            r = risk(b)
            h = dict(g, depth=depth, solver=solver, seed=seed, **extra)
            out.append(sim_rows(r, **h, metric="risk"))
            out.append(sim_rows(r_sc - r, **h, metric="transferability"))
        for depth in sorted({1, L}):
            cf = np.array([[lt.deep_finetune_risk_asymptotic(n, d, t, s, depth) for s in sg] for t in th])
            lim, formula = (
                ("exact", "exact form of Thm 3.9 (depth 1)")
                if depth == 1
                else ("asymptotic", "Thm 5.2 (linear teachers), concentrated norms")
            )
            h = dict(g, depth=depth)
            out.append(cf_rows(cf, lim, formula, **h, metric="risk"))
            out.append(
                cf_rows(faf.scratch_risk(n, d, sg)[None, :] - cf, lim, formula, **h, metric="transferability")
            )
    return out
