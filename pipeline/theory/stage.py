"""Theory track: two-layer linear networks that reproduce Section 4 / Appendix A numerically.

Setting (paper, Section 4.1). θ = W₁W₂ with W₁, W₂ ∈ ℝ^{d×d}, x ~ N(0, I), population loss
L_pre(θ) = ‖θ − A_pre‖²_F with A_pre = U Σ_pre Vᵀ. Pre-training is gradient flow from the small
initialisation W₁(0) = W₂(0) = e^{−τ} I, integrated with fixed-step RK4 on the full matrices.
The model learns the singular values ("features") one at a time; the feature-learning times
t₁ < … < t_d are read off the trajectory as the plateaus of the loss (minima of ‖∇L‖² between
consecutive learning events), and θ(t_n) is compared with the rank-n target U Σ_{:n} Vᵀ.

Post-training modifications of θ(t_n), n = 1..d:
  * Gaussian perturbation (4.2, A.2): (W₁ + α)(W₂ + β), α, β i.i.d. N(0, γ²). Expected loss in
    closed form, E = ‖W₁W₂ − A‖² + dγ²(‖W₁‖² + ‖W₂‖²) + d³γ⁴, and by Monte Carlo; increments vs
    Proposition 4.3's (2dγ² − σ_n)σ_n; the inflection (Definition 4.2) vs Theorem 4.4.
  * Fine-tuning (4.3, A.3-A.5): mini-batch GD on ‖θ − A_ft‖² (estimated from m samples x) plus
    λ‖θ − θ(t_n)‖², A_ft = U Σ_ft Vᵀ, compared with the closed-form ideal-initialisation,
    population-gradient dynamics of Lemma A.7; Δ_pre (Theorem 4.6), the pre-training loss after
    fine-tuning (Theorem 4.7.1) and the λ sweep (Theorem 4.7.2).

Everything is float64 numpy, vectorised over spectra, seeds, n, γ and λ with batch dimensions;
the only Python loops are over time steps (an ODE / GD is sequential) and over output rows.
This module runs the stage: `run_theory(cfg, study)` returns the tidy metrics rows, built from
`spectra`, `pretraining`, `perturbation` and `finetuning` (one module per part of the setting above)
and the checked config (`config`); `figures.plot_theory(df, figures_dir)` draws its four figures.
docs/theory.md states the claims, their assumptions and the tolerances the tests use.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.tables import metric_row, metrics_frame
from pipeline.theory.config import validate_config
from pipeline.theory.finetuning import finetune_closed_form, finetune_gd, fixed_point_pre_loss
from pipeline.theory.perturbation import (
    inflection_point,
    perturbed_loss_closed_form,
    perturbed_loss_mc,
    predicted_perturbation_inflection,
    prop43_increment,
)
from pipeline.theory.pretraining import logistic_feature, pretrain_gradient_flow
from pipeline.theory.spectra import Array, ideal_init, misalignment_r, mT, random_orthogonal

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)


def _rng(seed: int, stream: int) -> np.random.Generator:
    """Independent streams per seed: 0 = U, V; 1 = perturbation noise; 2 = fine-tuning batches."""
    return np.random.default_rng([seed, stream])


def singular_vectors(d: int, seed: int) -> tuple[Array, Array]:
    """The seed's random orthogonal U, V shared by A_pre and A_ft."""
    rng = _rng(seed, 0)
    return random_orthogonal(d, rng), random_orthogonal(d, rng)


@dataclass
class Pretrained:
    """Pre-training of every (spectrum p, seed r): targets, θ(t_n) factors and the ideal init (7)-(8)."""

    sigma: Array  # (P, d)
    U: Array  # (R, d, d)
    V: Array  # (R, d, d)
    A: Array  # (P, R, d, d)
    W1: Array  # (P, R, N, d, d), N = d pre-training lengths t_1..t_d
    W2: Array
    W1_ideal: Array
    W2_ideal: Array
    times: Array  # (P, R, N)
    integrator_error: Array  # (P,) max |s − logistic| / σ on the U = V references

    def loss(self, W1: Array, W2: Array) -> Array:
        return np.sum((W1 @ W2 - self.A[:, :, None]) ** 2, axis=(-2, -1))


def pretrain_stage(sigma: Array, seeds: list[int], tau: float, dt: float, max_time: float) -> Pretrained:
    """One batched gradient flow for all spectra × seeds, plus one U = V reference per spectrum."""
    P, d = sigma.shape
    R = len(seeds)
    U, V = map(np.stack, zip(*(singular_vectors(d, s) for s in seeds)))
    A = (U[None] * sigma[:, None, None, :]) @ mT(V)[None]  # (P, R, d, d)
    A_ref = (U[0] * sigma[:, None, :]) @ U[0].T  # (P, d, d): symmetric targets, exact logistic solution
    res = pretrain_gradient_flow(np.concatenate([A.reshape(P * R, d, d), A_ref]), d, tau, dt, max_time)
    steps, S1, S2 = res.snapshots
    s_ref = np.diagonal(U[0].T @ (S1[:, P * R :] @ S2[:, P * R :]) @ U[0], axis1=-2, axis2=-1)  # (T, P, d)
    s_exact = np.stack([logistic_feature(sigma[p], tau, steps * dt) for p in range(P)], axis=1)
    n_values = np.arange(1, d + 1)
    ideal = [[ideal_init(U[r], sigma[p], V[r], n_values) for r in range(R)] for p in range(P)]
    return Pretrained(
        sigma=sigma,
        U=U,
        V=V,
        A=A,
        W1=res.W1[: P * R].reshape(P, R, d, d, d),
        W2=res.W2[: P * R].reshape(P, R, d, d, d),
        W1_ideal=np.array([[w[0] for w in row] for row in ideal]),
        W2_ideal=np.array([[w[1] for w in row] for row in ideal]),
        times=res.times[: P * R].reshape(P, R, d),
        integrator_error=np.max(np.abs(s_ref - s_exact) / sigma[None], axis=(0, 2)),
    )


def _pretrain_rows(
    pt: Pretrained, names: list[str], seeds: list[int], base: dict, tau: float, dt: float
) -> list[dict]:
    P, R, N = pt.times.shape
    loss_real, loss_ideal = pt.loss(pt.W1, pt.W2), pt.loss(pt.W1_ideal, pt.W2_ideal)
    target = pt.W1_ideal @ pt.W2_ideal  # U Σ_{:n} Vᵀ
    rank_dist = np.sqrt(np.sum((pt.W1 @ pt.W2 - target) ** 2, axis=(-2, -1))) / pt.sigma[:, None, :]
    rows = []
    for p, name in enumerate(names):
        c = dict(base, checkpoint=base["checkpoint"][name], modification="none", eval_data="theory_pre")
        rows.append(
            metric_row(
                **c,
                metric="integrator_error",
                value=float(pt.integrator_error[p]),
                extra={"tau": tau, "dt": dt, "reference": "U=V logistic solution"},
            )
        )
        for r, seed in enumerate(seeds):
            for j in range(N):
                cb = dict(c, seed=seed, budget=float(j + 1), budget_unit="feature_index")
                real = {"tau": tau, "init": "real"}
                rows += [
                    metric_row(**cb, metric="loss", value=float(loss_real[p, r, j]), extra=real),
                    metric_row(
                        **cb,
                        metric="loss",
                        value=float(loss_ideal[p, r, j]),
                        extra={"tau": tau, "init": "ideal"},
                    ),
                    metric_row(**cb, metric="feature_time", value=float(pt.times[p, r, j]), extra=real),
                    metric_row(
                        **cb,
                        metric="rank_n_distance",
                        value=float(rank_dist[p, r, j]),
                        extra=real | {"normalised_by": "sigma_n"},
                    ),
                ]
    return rows


def _perturbation_rows(
    pt: Pretrained, names: list[str], seeds: list[int], base: dict, tau: float, gammas: Array, mc_samples: int
) -> list[dict]:
    """Closed form on θ(t_n) and the ideal init, Monte Carlo on θ(t_n); increments, Prop. 4.3, inflections."""
    P, R, N = pt.times.shape
    A_n = pt.A[:, :, None]
    curves = {
        ("closed_form", "real"): perturbed_loss_closed_form(pt.W1, pt.W2, A_n, gammas),  # (P, R, N, G)
        ("closed_form", "ideal"): perturbed_loss_closed_form(pt.W1_ideal, pt.W2_ideal, A_n, gammas),
    }
    mc, se = np.empty_like(curves[("closed_form", "real")]), np.empty_like(curves[("closed_form", "real")])
    for r, seed in enumerate(seeds):  # one noise draw per seed, shared by every spectrum, n and γ
        Z1, Z2 = _rng(seed, 1).standard_normal((2, mc_samples, N, N))
        mc[:, r], se[:, r] = perturbed_loss_mc(pt.W1[:, r], pt.W2[:, r], A_n[:, r], gammas, Z1, Z2)
    curves[("monte_carlo", "real")] = mc
    inflections = {key: inflection_point(np.moveaxis(v, -1, -2)) for key, v in curves.items()}  # (P, R, G)
    rows = []
    for p, name in enumerate(names):
        bound = prop43_increment(pt.sigma[p], gammas)  # (G, N)
        n_first, r_pred = predicted_perturbation_inflection(pt.sigma[p], gammas)
        for g, gamma in enumerate(gammas):
            c = dict(
                base,
                checkpoint=base["checkpoint"][name],
                modification="gaussian",
                gamma=float(gamma),
                eval_data="theory_pre",
            )
            margin = (
                float(np.min(np.abs(np.log(2 * N * gamma**2 / pt.sigma[p])))) if gamma > 0 else float("inf")
            )
            rows.append(
                metric_row(
                    **c,
                    metric="predicted_inflection_n",
                    value=float(r_pred[g]),
                    extra={
                        "tau": tau,
                        "first_increase_n": int(n_first[g]),
                        "found": bool(n_first[g] <= N),
                        "log_margin": margin,
                        "rule": "r = max(n*-1, 1), n* = min{n: 2 d gamma^2 > sigma_n}",
                    },
                )
            )
            for j in range(1, N):
                rows.append(
                    metric_row(
                        **c,
                        budget=float(j + 1),
                        budget_unit="feature_index",
                        metric="prop43_bound",
                        value=float(bound[g, j]),
                        extra={"tau": tau},
                    )
                )
            for r, seed in enumerate(seeds):
                for (est, init), v in curves.items():
                    ex = {"tau": tau, "estimator": est, "init": init} | (
                        {"samples": mc_samples} if est == "monte_carlo" else {}
                    )
                    rr, found = inflections[(est, init)]
                    rows.append(
                        metric_row(
                            **c,
                            seed=seed,
                            metric="inflection_n",
                            value=float(rr[p, r, g]),
                            extra=ex | {"found": bool(found[p, r, g])},
                        )
                    )
                    for j in range(N):
                        cb = dict(c, seed=seed, budget=float(j + 1), budget_unit="feature_index")
                        rows.append(metric_row(**cb, metric="loss", value=float(v[p, r, j, g]), extra=ex))
                        if est == "monte_carlo":
                            rows.append(
                                metric_row(**cb, metric="loss_stderr", value=float(se[p, r, j, g]), extra=ex)
                            )
                        if j > 0:
                            rows.append(
                                metric_row(
                                    **cb,
                                    metric="loss_increment",
                                    value=float(v[p, r, j, g] - v[p, r, j - 1, g]),
                                    extra=ex,
                                )
                            )
    return rows


def _finetune_rows(
    pt: Pretrained, p: int, task: str, s_ft: Array, c: dict, seeds: list[int], base: dict, ckpt: str
) -> list[dict]:
    """Mini-batch GD from θ(t_n) for every n, λ, seed next to Lemma A.7's closed form and the K → ∞ limit."""
    lambdas, eta, steps, m, alpha, tau = (
        c["lambdas"],
        c["eta"],
        c["steps"],
        c["batch_size"],
        c["alpha"],
        c["tau"],
    )
    s_pre, d = pt.sigma[p], len(s_ft)
    n_values = np.arange(1, d + 1)
    A_ft = (pt.U * s_ft[None, None, :]) @ mT(pt.V)  # (R, d, d)
    r_mis = misalignment_r(s_pre, s_ft, alpha)
    log.info(
        "theory: fine-tuning %s ((%g, %d)-misaligned), K = %d, eta = %g, m = %s, lambdas %s",
        task,
        alpha,
        r_mis,
        steps,
        eta,
        m,
        lambdas.tolist(),
    )
    W1, W2, div = finetune_gd(
        pt.W1[p], pt.W2[p], A_ft[:, None, None], lambdas, eta, steps, m, [_rng(s, 2) for s in seeds]
    )
    theta = W1 @ W2  # (R, N, L, d, d)
    before = pt.loss(pt.W1, pt.W2)[p][:, :, None]
    l_pre = np.sum((theta - pt.A[p][:, None, None]) ** 2, axis=(-2, -1))  # (R, N, L)
    sim = {
        "loss": l_pre,
        "delta_pre": l_pre - before,
        "ft_loss": np.sum((theta - A_ft[:, None, None]) ** 2, axis=(-2, -1)),
    }
    s_cf, div_cf = finetune_closed_form(s_pre, s_ft, n_values, lambdas, eta, steps)  # (N, L, d), (N, L)
    l_pre_cf = np.sum((s_cf - s_pre) ** 2, axis=-1)
    before_cf = np.array([np.sum(s_pre[n:] ** 2) for n in n_values])[:, None]
    cf = {"loss": l_pre_cf, "delta_pre": l_pre_cf - before_cf, "ft_loss": np.sum((s_cf - s_ft) ** 2, axis=-1)}
    r_sim, found_sim = inflection_point(np.moveaxis(l_pre, 1, -1))  # (R, L)
    r_cf, found_cf = inflection_point(l_pre_cf.T)
    r_fp, found_fp = inflection_point(fixed_point_pre_loss(s_pre, s_ft, lambdas))
    log.info(
        "theory: %s: r(lambda) simulated %s, closed form %s; %d/%d runs diverged",
        task,
        r_sim.tolist(),
        r_cf.tolist(),
        int(div.sum()),
        div.size,
    )

    xt = {"tau": tau, "steps": steps, "batch_size": m, "alpha": alpha, "misalignment_r": r_mis}
    metrics = (
        ("loss", "theory_pre", "loss"),
        ("delta_pre", "theory_pre", "delta_pre"),
        ("ft_loss", "theory_ft", "loss"),
    )
    nan = float("nan")
    common = dict(base, checkpoint=ckpt, modification="sft", task=task, learning_rate=eta)
    rows = [
        metric_row(**common, eval_data="theory_ft", metric="misalignment_r", value=float(r_mis), extra=xt)
    ]
    for li, lam in enumerate(lambdas):
        cl = dict(common, lambda_reg=float(lam), eval_data="theory_pre")
        for est, rv, fv, dv in (
            ("closed_form", r_cf[li], found_cf[li], bool(div_cf[:, li].any())),
            ("fixed_point", r_fp[li], found_fp[li], False),
        ):
            rows.append(
                metric_row(
                    **cl,
                    metric="predicted_inflection_n",
                    value=nan if dv else float(rv),
                    diverged=dv,
                    extra=xt | {"estimator": est, "found": bool(fv)},
                )
            )
        for j, n in enumerate(n_values):
            dv = bool(div_cf[j, li])
            for key, ev, metric in metrics:
                rows.append(
                    metric_row(
                        **(cl | {"eval_data": ev}),
                        budget=float(n),
                        budget_unit="feature_index",
                        metric=metric,
                        diverged=dv,
                        value=nan if dv else float(cf[key][j, li]),
                        extra=xt | {"estimator": "closed_form", "init": "ideal"},
                    )
                )
        for r, seed in enumerate(seeds):
            dv = bool(div[r, :, li].any())
            rows.append(
                metric_row(
                    **cl,
                    seed=seed,
                    metric="inflection_n",
                    value=nan if dv else float(r_sim[r, li]),
                    diverged=dv,
                    extra=xt | {"estimator": "simulation", "found": bool(found_sim[r, li])},
                )
            )
            for j, n in enumerate(n_values):
                dv = bool(div[r, j, li])
                for key, ev, metric in metrics:
                    rows.append(
                        metric_row(
                            **(cl | {"eval_data": ev}),
                            seed=seed,
                            budget=float(n),
                            budget_unit="feature_index",
                            metric=metric,
                            diverged=dv,
                            value=nan if dv else float(sim[key][r, j, li]),
                            extra=xt | {"estimator": "simulation", "init": "real"},
                        )
                    )
    return rows


def run_theory(cfg: Mapping[str, Any], study: str) -> pd.DataFrame:
    """Run the whole theory stage from the `theory` config section; returns tidy metric rows.

    1. Pre-training: one gradient flow per spectrum and seed (random U, V), plus one U = V reference
       per spectrum whose exact logistic solution checks the integrator.
    2. Gaussian perturbation of θ(t_n) and of the ideal init (7)-(8) for every γ.
    3. Fine-tuning of θ(t_n) for every task, n, λ and seed, next to the Lemma A.7 closed form.
    """
    c = validate_config(cfg)
    d, tau, seeds, names = c["d"], c["tau"], c["seeds"], list(c["spectra"])
    t0 = time.perf_counter()
    base = dict(
        study=study,
        source="theory",
        model="two-layer-linear",
        split="population",
        checkpoint={k: f"linear-d{d}-{k}" for k in names},
    )
    log.info(
        "theory: pre-training %d spectra x %d seeds (+%d U=V references), d = %d, tau = %g",
        len(names),
        len(seeds),
        len(names),
        d,
        tau,
    )
    pt = pretrain_stage(np.stack([c["spectra"][k] for k in names]), seeds, tau, c["dt"], c["max_time"])
    errs = ", ".join(f"{e:.1e}" for e in pt.integrator_error)
    log.info(
        "theory: pre-training done in %.1fs; integrator error vs logistic %s", time.perf_counter() - t0, errs
    )
    rows = _pretrain_rows(pt, names, seeds, base, tau, c["dt"])
    t1 = time.perf_counter()
    rows += _perturbation_rows(pt, names, seeds, base, tau, c["gammas"], c["mc_samples"])
    log.info(
        "theory: perturbation (%d gammas, %d MC samples) done in %.1fs",
        len(c["gammas"]),
        c["mc_samples"],
        time.perf_counter() - t1,
    )
    for task, spec in c["tasks"].items():
        p = names.index(spec["pretrain"])
        rows += _finetune_rows(
            pt, p, task, spec["sigma_ft"], c, seeds, base, base["checkpoint"][spec["pretrain"]]
        )
    log.info("theory: stage done in %.1fs, %d rows", time.perf_counter() - t0, len(rows))
    return metrics_frame(rows)
