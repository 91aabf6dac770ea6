"""The "Fine-tuning with linear teachers" experiments (arXiv:2107.01641): covariance alignment (their
Fig. 1), depth (Fig. 2a, with GD's O(η) gap to Thm 5.2) and frozen layers (Fig. 3); table rows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.theory.transfer import linear_teachers as lt
from pipeline.theory.transfer import runs
from pipeline.theory.transfer.deep_linear import balanced_init, gradient_descent, sample_grad
from pipeline.theory.transfer.one_layer import lt_alignment_risk

if TYPE_CHECKING:
    import pandas as pd

    from pipeline.theory.spectra import Array


def lt_alignment(c: Mapping[str, Any], seed: int) -> list[pd.DataFrame]:
    """Depth-1 fine-tuning with a two-level covariance, θ_T − θ_S in its bottom or top eigenspace; Σ = I."""
    d, top, (hi, lo) = c["d"], c["top"], c["eigenvalues"]
    dist = 2.0 * np.sin(c["theta"] / 2)  # ‖θ_T − θ_S‖ for unit teachers at angle θ
    two_level = np.where(np.arange(d) < top, hi, lo)
    variants = {  # the paper's names: "Top Eigen Align" has P_{≤m}(θ_T − θ_S) = 0, Δ in the bottom span
        "top_eigen_align": (two_level, runs.unit(d, d - 1)),
        "bottom_eigen_align": (two_level, runs.unit(d, 0)),
        "isotropic": (np.ones(d), runs.unit(d, 0)),
    }
    out = []
    for v, (name, (lam, direction)) in enumerate(variants.items()):
        g = dict(paper=runs.LT, experiment="lt_alignment", variant=name, method="finetune", depth=1, d=d)
        g.update(theta=c["theta"], sigma=0.0, metric="risk")
        for n in c["n"]:
            r = lt_alignment_risk(n, lam, dist * direction, c["instances"], runs.rng(seed, 5, v, n))
            out.append(runs.sim_rows(r, **g, n=n, solver="linear_algebra", seed=seed))
            if name == "isotropic":
                out.append(
                    runs.cf_rows(
                        lt.finetune_risk(n, d, c["theta"], 0.0), "exact", "Thm 4.1, E over X", **g, n=n
                    )
                )
            else:
                cf = lt.interpolation_bias_asymptotic(lam, dist * direction, n)
                out.append(
                    runs.cf_rows(cf, "asymptotic", "Thm 4.1 + deterministic equivalent of P_perp", **g, n=n)
                )
    return out


def lt_depth(c: Mapping[str, Any], gd: Mapping[str, Any], seed: int) -> list[pd.DataFrame]:
    """Risk vs target norm per depth (Fig. 2a) on shared draws, and GD's O(η) gap to Thm 5.2 at η, η/2, …"""
    d, n, k, th = c["d"], c["n"], c["instances"], c["theta"]
    rho = np.asarray(c["target_norms"])
    R = len(rho)
    X0 = runs.rng(seed, 6, 0).standard_normal(
        (k, n, d)
    )  # one draw per instance, shared by every depth and norm
    X = np.broadcast_to(X0, (R, k, n, d)).reshape(-1, n, d)  # batch order (ρ, draw)
    bt = np.broadcast_to(runs.target(d, th, rho)[:, None, :], (R, k, d)).reshape(-1, d)
    y = np.einsum("bnd,bd->bn", X, bt)
    perp, fit = runs.projections(X, y, runs.unit(d))
    g = dict(
        paper=runs.LT,
        experiment="lt_depth",
        method="finetune",
        d=d,
        n=n,
        theta=th,
        sigma=0.0,
        target_norm=rho,
    )

    def risk(beta: Array) -> Array:
        return np.sum((beta - bt) ** 2, axis=1).reshape(R, k).T  # (draws, ρ)

    key, eta = (
        "theory.transfer.linear_teachers.depth.learning_rate",
        runs.design_step(c["learning_rate"], n, d),
    )
    out = []
    for depth in [*c["depths"], np.inf]:
        h = dict(g, depth=None, variant="depth_infinity") if np.isinf(depth) else dict(g, depth=int(depth))
        thm = lt.limit_point(perp, fit, 1.0, depth)
        out.append(runs.sim_rows(risk(thm), **h, metric="risk", solver="limit_point", seed=seed))
        cf = np.array([lt.deep_finetune_risk_asymptotic(n, d, th, 0.0, depth, r) for r in rho])
        lim = "exact" if depth == 1 else "asymptotic"
        out.append(runs.cf_rows(cf, lim, "Thm 5.2, concentrated norms", **h, metric="risk"))
        if depth == 1:
            out.append(
                runs.sim_rows(risk(perp + fit), **h, metric="risk", solver="linear_algebra", seed=seed)
            )
        if depth == 1 or np.isinf(depth):
            continue
        pre = runs.pretrain(d, int(depth), k, eta, gd, runs.rng(seed, 6, 1, int(depth)), key)
        beta, steps = runs.finetune(pre, X, y, eta, gd, key)
        h.update(solver="gradient_descent", seed=seed)
        out.append(runs.sim_rows(risk(beta), **h, metric="risk", lr=eta, steps=steps))
        # the O(η) gap at one target norm: the same draws and initialisations at η, η/2, η/4, …
        j = list(rho).index(c["halving"]["target_norm"])
        sl = slice(j * k, (j + 1) * k)
        hg = dict(h, target_norm=rho[j], variant="step_halving", metric="theorem_gap")
        out.append(runs.sim_rows(np.linalg.norm(beta[sl] - thm[sl], axis=1), **hg, lr=eta, steps=steps))
        for halvings in range(1, c["halving"]["times"] + 1):
            e = eta / 2**halvings
            pre_e = runs.pretrain(d, int(depth), k, e, gd, runs.rng(seed, 6, 1, int(depth)), key)
            beta_e, steps_e = runs.finetune(pre_e, X[sl], y[sl], e, gd, key)
            out.append(runs.sim_rows(np.linalg.norm(beta_e - thm[sl], axis=1), **hg, lr=e, steps=steps_e))
    return out


def lt_frozen(c: Mapping[str, Any], gd: Mapping[str, Any], seed: int) -> list[pd.DataFrame]:
    """Scratch (small init), fine-tuning and fine-tuning with the first layer frozen at depth L (Fig. 3),
    each by GD and by its limit point on the same draws, and depth-1 fine-tuning for reference."""
    d, L, k, th = c["d"], c["depth"], c["instances"], c["theta"]
    key = "theory.transfer.linear_teachers.frozen.learning_rate"
    pre = runs.pretrain(
        d, L, k, runs.design_step(c["learning_rate"], max(c["n"]), d), gd, runs.rng(seed, 7, 0), key
    )
    bt = runs.target(d, th)
    out = []
    for n in c["n"]:
        eta = runs.design_step(c["learning_rate"], n, d)
        X = runs.rng(seed, 7, 1, n).standard_normal((k, n, d))
        y = X @ bt
        perp, fit = runs.projections(X, y, runs.unit(d))
        g = dict(
            paper=runs.LT,
            experiment="lt_frozen",
            d=d,
            n=n,
            theta=th,
            sigma=0.0,
            target_norm=1.0,
            metric="risk",
        )

        def risk(beta: Array) -> Array:
            return np.sum((beta - bt) ** 2, axis=1)

        start = balanced_init(k, d, L, gd["init_scale"], runs.rng(seed, 7, 2, n))
        sc = gradient_descent(
            start, sample_grad(X, y), eta, gd["tolerance"], gd["max_steps"], name=key, lr_key=key
        )
        beta_ft, steps_ft = runs.finetune(pre, X, y, eta, gd, key)
        beta_fz, steps_fz = runs.finetune(pre, X, y, eta, gd, key, train_first=False)
        z = np.einsum("ind,id->in", X, pre.a)  # the frozen features Xa, a ∝ θ_S
        coef = np.sum(z * y, axis=1) / np.sum(z * z, axis=1)
        by_method = {  # method: (limit point, GD solution, steps, closed form, its limit, its formula)
            "scratch": (
                fit,
                sc.chain.beta,
                sc.steps,
                lt.scratch_risk(n, d, 0.0),
                "exact",
                "min-norm (alpha -> 0)",
            ),
            "finetune": (
                lt.limit_point(perp, fit, 1.0, L),
                beta_ft,
                steps_ft,
                lt.deep_finetune_risk_asymptotic(n, d, th, 0.0, L),
                "asymptotic",
                "Thm 5.2, concentrated norms",
            ),
            "finetune_frozen_first": (
                coef[:, None] * pre.a,
                beta_fz,
                steps_fz,
                lt.frozen_risk(n, th, 0.0),
                "exact",
                "Thm 5.5 + least-squares c",
            ),
        }
        for method, (thm, beta, steps, cf, lim, formula) in by_method.items():
            h = dict(g, method=method, depth=L)
            out.append(
                runs.sim_rows(risk(beta), **h, solver="gradient_descent", lr=eta, steps=steps, seed=seed)
            )
            out.append(runs.sim_rows(risk(thm), **h, solver="limit_point", seed=seed))
            out.append(runs.cf_rows(cf, lim, formula, **h))
        h = dict(g, method="finetune", depth=1)
        out.append(runs.sim_rows(risk(perp + fit), **h, solver="linear_algebra", seed=seed))
        out.append(runs.cf_rows(lt.finetune_risk(n, d, th, 0.0), "exact", "Thm 4.1, E over X", **h))
    return out
