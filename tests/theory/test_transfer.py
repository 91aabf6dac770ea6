"""Transfer theory: every closed form against simulation, the phase boundaries, GD vs its theorem, bad input.

The stage runs once on a reduced copy of the default `theory.transfer` section (SMALL, ~5 s); the
phase-boundary and z-score claims are also checked on the default features-are-fate grid (the one
the report draws). Tolerances: 4 standard errors for every simulated mean that has an exact
closed form; O(η) for gradient descent against the gradient-flow theorems (halving the step must
halve the gap); "within one grid cell" for the boundaries. docs/theory.md explains each.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from pipeline.analysis.claim_stats import z_scores
from pipeline.theory.config import check_config
from pipeline.theory.spectra import make_spectrum, mT
from pipeline.theory.transfer import features_are_fate as faf
from pipeline.theory.transfer import linear_teachers as lt
from pipeline.theory.transfer.config import THEORY_KEYS, check_transfer, transfer_inputs
from pipeline.theory.transfer.deep_linear import (
    Chain,
    balanced_init,
    gradient_descent,
    population_grad,
    sample_grad,
)
from pipeline.theory.transfer.design_moments import (
    chi2_expectation,
    inverse_chi2_mean,
    inverse_wishart_trace,
    null_fraction,
)
from pipeline.theory.transfer.faf_runs import faf_grid
from pipeline.theory.transfer.figures import FIGURE_STEMS, plot_transfer
from pipeline.theory.transfer.one_layer import draw_features, finetune_risks, pinv_apply, ridge_transfer_risks
from pipeline.theory.transfer.overtraining import converged_one_layer_samples, population_one_layer_loss
from pipeline.theory.transfer.stage import run_transfer
from pipeline.theory.transfer.table import SCHEMA, TRANSFER_COLUMNS, write_transfer

ROOT = Path(__file__).resolve().parents[2]
THEORY = yaml.safe_load((ROOT / "config.yaml").read_text())["theory"]
PI = math.pi


def _small() -> dict:
    """The default theory section with a reduced transfer section (same code paths, ~5 s)."""
    cfg = copy.deepcopy(THEORY)
    cfg["seeds"] = [0]
    t = cfg["transfer"]
    t["features_are_fate"].update(
        d=40,
        n=[10, 16, 24, 30, 52, 60, 80],
        theta=[0.0, PI / 8, PI / 4, PI / 3, 3 * PI / 8, PI / 2],
        sigma=[0.0, 0.2, 0.5, 1.0],
        instances=300,
    )
    t["features_are_fate"]["ridge"].update(n=[12, 24], lambdas=[0.0, 0.05, 0.2])
    t["features_are_fate"]["deep"].update(n=[8, 16], theta=[PI / 8, PI / 3], instances=8)
    t["linear_teachers"]["alignment"].update(d=40, top=4, n=[4, 10, 20, 30], instances=100)
    t["linear_teachers"]["depth"].update(d=20, n=4, target_norms=[0.5, 1.0, 2.0], instances=16)
    t["linear_teachers"]["frozen"].update(d=20, n=[10, 14], instances=32)
    t["overtraining"].update(instances=16)
    return cfg


SMALL = _small()


@pytest.fixture(scope="module")
def stage() -> pd.DataFrame:
    return run_transfer(SMALL, study="test")


@pytest.fixture(scope="module")
def default_grid() -> pd.DataFrame:
    """The default features-are-fate grid (the phase diagrams of the report)."""

    from threadpoolctl import threadpool_limits

    from pipeline.theory.transfer.table import transfer_frame

    check_transfer(THEORY["transfer"], THEORY)
    c = THEORY["transfer"]
    with threadpool_limits(limits=1, user_api="blas"):  # as the stage runs it
        return transfer_frame(faf_grid(c["features_are_fate"], c["seed"]), "test")


# ------------------------------------------------------------------------------------- exact moments


def test_design_moments_against_monte_carlo():
    """E tr (XᵀX)⁺, E 1/χ²_n, E‖P⊥v‖² and the χ² quadrature, each within 4 SE of a direct simulation."""
    rng = np.random.default_rng(11)
    for n, d in ((6, 20), (30, 12)):
        X = rng.standard_normal((4000, n, d))
        tr = np.trace(np.linalg.pinv(X) @ mT(np.linalg.pinv(X)), axis1=-2, axis2=-1)
        assert abs(tr.mean() - inverse_wishart_trace(n, d)) < 4 * tr.std() / np.sqrt(len(tr))
        v = rng.standard_normal(d)
        perp = v - (np.linalg.pinv(X) @ (X @ v)[..., None])[..., 0]
        frac = np.sum(perp**2, axis=1) / np.sum(v**2)
        assert abs(frac.mean() - null_fraction(n, d)) < 4 * frac.std() / np.sqrt(len(frac)) + 1e-12
    r = rng.chisquare(9, 400_000)
    assert abs((1 / r).mean() - inverse_chi2_mean(9)) < 4 * (1 / r).std() / np.sqrt(len(r))
    assert chi2_expectation(lambda x: x, 9) == pytest.approx(9, rel=1e-10)
    assert chi2_expectation(lambda x: x * x, 9) == pytest.approx(9 * 11, rel=1e-10)
    assert chi2_expectation(lambda x: 1 / x, 9) == pytest.approx(1 / 7, rel=1e-9)
    assert np.isinf(inverse_wishart_trace(20, 20)) and np.isinf(inverse_wishart_trace(21, 20))


def test_exact_forms_converge_to_the_papers_limits():
    """Eqs. 10, 12, 16 and Thm 3.8 are the n, d → ∞ limits of the exact finite-sample forms."""
    d = 10**7
    for gamma in (0.3, 0.7, 1.5):
        n = int(gamma * d)
        for th, s in ((0.3, 0.2), (1.2, 0.7)):
            assert faf.scratch_risk(n, d, s) == pytest.approx(faf.scratch_risk_asymptotic(gamma, s), rel=1e-5)
            assert faf.linear_transfer_risk(n, th, s) == pytest.approx(
                faf.linear_transfer_risk_asymptotic(th), rel=1e-5
            )
            assert faf.finetune_risk(n, d, th, s) == pytest.approx(
                faf.finetune_risk_asymptotic(gamma, th, s), rel=1e-5
            )
    for lam in (0.1, 0.5):
        exact = faf.ridge_transfer_risk(200_000, 0.4, 0.3, lam)
        assert exact == pytest.approx(float(faf.ridge_transfer_risk_asymptotic(0.4, lam)), abs=2e-5)
    assert faf.ridge_transfer_risk(12, 0.4, 0.3, 0.0) == pytest.approx(
        float(faf.linear_transfer_risk(12, 0.4, 0.3))
    )


def test_ridge_helps_at_finite_n_unlike_its_limit():
    """Thm 3.8's limit is increasing in λ; the exact finite-n risk first decreases, with slope
    −2n(sin²θ + σ²) E r⁻² at λ = 0."""
    n, th, s = 12, PI / 8, 1.0
    r0, r1 = faf.ridge_transfer_risk(n, th, s, 0.0), faf.ridge_transfer_risk(n, th, s, 1e-4)
    slope = -2 * n * (math.sin(th) ** 2 + s**2) / ((n - 2) * (n - 4))  # E r⁻² = 1/((n − 2)(n − 4))
    assert (r1 - r0) / 1e-4 == pytest.approx(slope, rel=1e-2)
    lams = np.linspace(0, 1, 11)
    assert np.all(np.diff(faf.ridge_transfer_risk_asymptotic(th, lams)) > 0)


def test_boundary_curves_are_the_zero_set_of_eq13():
    """The drawn boundaries: γ± of eq. 13 and σ(θ) solve T_lt = 0 (asymptotic and exact versions)."""
    for th in (0.9, 1.2, PI / 2):
        lo, hi = faf.negative_transfer_interval(th, 0.2)
        for g in (lo, hi):
            assert float(
                faf.scratch_risk_asymptotic(g, 0.2) - faf.linear_transfer_risk_asymptotic(th)
            ) == pytest.approx(0, abs=1e-12)
        for gamma in (0.5, 1.6):
            s = float(faf.linear_transfer_boundary_sigma(gamma, th))
            if np.isfinite(s):
                T = faf.scratch_risk_asymptotic(gamma, s) - faf.linear_transfer_risk_asymptotic(th)
                assert float(T) == pytest.approx(0, abs=1e-12)
        s = float(faf.linear_transfer_boundary_sigma_exact(50, 100, th))
        assert float(faf.scratch_risk(50, 100, s) - faf.linear_transfer_risk(50, th, s)) == pytest.approx(
            0, abs=1e-12
        )
    assert np.isnan(faf.negative_transfer_interval(0.3, 0.2)[0])  # θ < arccos(1 − σ): never hurts


# ------------------------------------------------------------------------------- simulation vs closed form


def test_default_grid_simulations_within_4_se(default_grid):
    """Every simulated mean of the default (n, θ, σ) grid within 4 SE of its exact closed form."""
    z = z_scores(default_grid)
    assert len(z) == 5 * len(default_grid) // 15 and np.isfinite(z["z"]).all()  # 5 simulated rows per 15
    assert z["z"].abs().max() < 4, z.loc[z["z"].abs().idxmax()]


def test_stage_simulations_within_4_se(stage):
    """The same for every experiment of the stage that has an exact closed form (incl. GD scratch and
    the frozen first layer, and the one-layer bridge)."""
    z = z_scores(stage)
    assert set(z["experiment"]) >= {
        "faf_grid",
        "faf_ridge",
        "faf_deep",
        "lt_alignment",
        "lt_depth",
        "lt_frozen",
        "overtraining",
    }
    assert np.isfinite(z["z"]).all() and z["z"].abs().max() < 4, z.loc[z["z"].abs().idxmax()]


def _sign_mismatch_off_boundary(sim: pd.DataFrame, pred: pd.DataFrame) -> list:
    """Cells whose simulated sign differs from the predicted one although no neighbouring cell (8 around)
    has another predicted sign, i.e. mismatches farther than one grid cell from the predicted boundary."""
    s, p = np.sign(sim.to_numpy()), np.sign(pred.to_numpy())
    bad = []
    for i, j in zip(*np.nonzero(s != p)):
        window = p[max(0, i - 1) : i + 2, max(0, j - 1) : j + 2]
        if p[i, j] != 0 and np.all(window == p[i, j]):
            bad.append((sim.index[i], sim.columns[j], sim.iat[i, j], pred.iat[i, j]))
    return bad


@pytest.mark.parametrize("method", ["linear_transfer", "finetune"])
@pytest.mark.parametrize("limit", ["asymptotic", "exact"])
def test_phase_boundaries_match_the_simulated_sign_change(default_grid, method, limit):
    """Eq. 13 (linear transfer) / eq. 17 (fine-tuning) and their exact forms: the simulated sign of T changes
    where predicted, within one grid cell, on the (n/d, θ) diagram at the reference σ and on every (θ, σ)
    diagram at fixed n; every diagram where the prediction has both signs shows both."""
    t = default_grid[(default_grid["metric"] == "transferability") & (default_grid["method"] == method)]
    sim_all = t[t["estimator"] == "simulation"]
    pred_all = t[(t["estimator"] == "closed_form") & (t["limit"] == limit)]
    ref = THEORY["transfer"]["features_are_fate"]["reference_sigma"]
    panels = [("theta", "n", {"sigma": ref})] + [
        ("sigma", "theta", {"n": n}) for n in sorted(t["n"].unique())
    ]
    for rows, cols, fixed in panels:
        sel = lambda df: df[np.isclose(df[next(iter(fixed))], next(iter(fixed.values())))]  # noqa: E731
        sim = sel(sim_all).pivot_table(index=rows, columns=cols, values="risk")
        pred = sel(pred_all).pivot_table(index=rows, columns=cols, values="risk")
        assert _sign_mismatch_off_boundary(sim, pred) == [], (fixed, limit)
        if (pred.to_numpy() > 0).any() and (pred.to_numpy() < 0).any():
            assert (sim.to_numpy() > 0).any() and (sim.to_numpy() < 0).any()


def test_linear_algebra_matches_direct_fits():
    """The sufficient-statistic risks equal fitting P⊥β_s + X⁺y and the ridge head on the raw draws."""
    n, d, k, th, sg, lam = 7, 12, 5, 0.7, 0.3, 0.1
    draws = draw_features(n, d, k, np.random.default_rng(9))
    rng = np.random.default_rng(9)  # the same stream: X first, then ε₀
    X, eps = rng.standard_normal((k, n, d)), rng.standard_normal((k, n))
    bt = np.zeros(d)
    bt[0], bt[1] = math.cos(th), math.sin(th)
    y = X @ bt + sg * eps
    e1 = np.eye(d)[0]
    ft = e1 - pinv_apply(X, (X @ e1)[..., None])[..., 0] + pinv_apply(X, y[..., None])[..., 0]
    got = finetune_risks(draws, np.array([th]), np.array([sg]))[:, 0, 0]
    assert np.allclose(got, np.sum((ft - bt) ** 2, axis=1), rtol=1e-10)
    z = X[:, :, 0]
    b = np.sum(z * y, axis=1) / (np.sum(z * z, axis=1) + n * lam)
    got = ridge_transfer_risks(draws, np.array([th]), np.array([sg]), lam)[:, 0, 0]
    assert np.allclose(got, (b - math.cos(th)) ** 2 + math.sin(th) ** 2, rtol=1e-10)


# ------------------------------------------------------------------------------------- deep networks


def _full_matrix_gd(chain: Chain, u: np.ndarray, grad, eta: float, steps: int) -> np.ndarray:
    """The same GD on the d×d matrices W₁ = a u₂ᵀ, W_l = s_l u_l u_{l+1}ᵀ, W_L = s_L u_L; returns β."""
    L = chain.depth
    Ws = [chain.a[:, :, None] * u[1][:, None, :]]
    for k in range(1, L - 1):
        Ws.append(chain.s[:, k - 1, None, None] * u[k][:, :, None] * u[k + 1][:, None, :])
    Ws.append((chain.s[:, -1, None] * u[L - 1])[:, :, None])

    def chain_product(ms: list) -> np.ndarray:
        out = ms[0]
        for W in ms[1:]:
            out = out @ W
        return out

    for _ in range(steps):
        g = grad(chain_product(Ws)[..., 0])[:, :, None]  # ∂loss/∂β as a (d × 1) column
        grads = []
        for k in range(L):  # ∂/∂W_k = (W_1⋯W_{k−1})ᵀ g (W_{k+1}⋯W_L)ᵀ
            G = g if k == L - 1 else g @ mT(chain_product(Ws[k + 1 :]))
            grads.append(G if k == 0 else mT(chain_product(Ws[:k])) @ G)
        Ws = [W - eta * G for W, G in zip(Ws, grads)]
    out = Ws[0]
    for W in Ws[1:]:
        out = out @ W
    return out[..., 0]


@pytest.mark.parametrize("depth", [2, 3])
def test_rank_one_chain_gd_is_full_matrix_gd(depth):
    """GD in the chain coordinates gives the same iterates as GD on the full d×d matrices (to roundoff)."""
    rng = np.random.default_rng(3)
    B, d, n = 3, 6, 4
    X, y = rng.standard_normal((B, n, d)), rng.standard_normal((B, n))
    u = rng.standard_normal((depth, B, d))
    u /= np.linalg.norm(u, axis=-1, keepdims=True)
    start = Chain(0.3 * u[0], np.full((B, depth - 1), 0.3))
    grad = sample_grad(X, y)
    res = gradient_descent(
        start, grad, 0.01, tol=np.inf, max_steps=200, check_every=10**9
    )  # exactly 200 steps
    full = _full_matrix_gd(start, u, grad, 0.01, 200)
    assert np.allclose(res.chain.beta, full, rtol=0, atol=1e-12)


def test_limit_point_solves_theorem_5_2():
    """‖β∞‖² = c²‖P⊥θ_S‖² + ‖fit‖² with c = (‖β∞‖/‖θ_S‖)^{(L−1)/L}; L = 1, 2 in closed form; L → ∞: eq. 6."""
    rng = np.random.default_rng(4)
    X, y = rng.standard_normal((10, 3, 7)), rng.standard_normal((10, 3))
    source = 1.3 * np.eye(7)[0]
    fit = pinv_apply(X, y[..., None])[..., 0]
    perp = source - pinv_apply(X, (X @ source)[..., None])[..., 0]  # ⊥ fit, as for real draws
    s = 1.3
    for L in (1, 2, 3, 5):
        beta = lt.limit_point(perp, fit, s, L)
        r = np.linalg.norm(beta, axis=1)
        c = (r / s) ** ((L - 1) / L)
        assert np.allclose(beta, c[:, None] * perp + fit, rtol=1e-12)
        assert np.allclose(r**2, c**2 * np.sum(perp**2, 1) + np.sum(fit**2, 1), rtol=1e-12)
    A, B = np.sum(perp**2, 1), np.sum(fit**2, 1)
    r2 = (A / s + np.sqrt(A**2 / s**2 + 4 * B)) / 2  # L = 2: ‖β‖² − (A/s)‖β‖ − B = 0
    assert np.allclose(np.linalg.norm(lt.limit_point(perp, fit, s, 2), axis=1), r2)
    inf = lt.limit_point(perp, fit, s, np.inf)  # eq. 6: c = ‖P∥-fit‖ / ‖P∥θ_S‖
    assert np.allclose(inf - fit, (np.sqrt(B / (s**2 - A)))[:, None] * perp)
    err = [np.abs(lt.limit_point(perp, fit, s, L) - inf).max(axis=1) for L in (100, 1000, 10000)]
    assert np.all(err[1] < err[0] / 5) and np.all(err[2] < err[1] / 5)  # β_L → β_∞ at rate 1/L
    assert np.allclose(lt.limit_point(perp, fit, s, 1), perp + fit)


def _gd_gap(depth: int, eta: float) -> float:
    """Mean ‖β_GD − β∞‖ for GD (pre-training on the population from the balanced init, then fine-tuning)."""
    rng = np.random.default_rng(8)
    d, n, B = 16, 4, 12
    X = rng.standard_normal((B, n, d))
    target = np.zeros(d)
    target[0], target[1] = 2 * math.cos(0.3), 2 * math.sin(0.3)
    y = X @ target
    e1 = np.eye(d)[0]
    init = balanced_init(B, d, depth, 0.05, np.random.default_rng(2))
    pre = gradient_descent(init, population_grad(e1), 10 * eta, 1e-10, 10**6).chain
    ft = gradient_descent(pre, sample_grad(X, y), eta, 1e-10, 10**6).chain
    perp = e1 - pinv_apply(X, (X @ e1)[..., None])[..., 0]
    thm = lt.limit_point(perp, pinv_apply(X, y[..., None])[..., 0], 1.0, depth)
    return float(np.mean(np.linalg.norm(ft.beta - thm, axis=1)))


@pytest.mark.parametrize("depth", [2, 3])
def test_gradient_descent_is_within_O_eta_of_theorem_5_2(depth):
    """Halving the step halves the gap to the gradient-flow limit point (ratios in [1.7, 2.3])."""
    gaps = [_gd_gap(depth, eta) for eta in (0.004, 0.002, 0.001)]
    ratios = np.array(gaps[:-1]) / np.array(gaps[1:])
    assert np.all((ratios > 1.7) & (ratios < 2.3)), (gaps, ratios)


def test_stage_reports_the_step_halving(stage):
    """The stage's theorem_gap rows: one per depth ≥ 2 and step, halving the step halves the gap."""
    gap = stage[stage["metric"] == "theorem_gap"]
    for _, part in gap.groupby("depth"):
        g = part.sort_values("lr")["risk"].to_numpy()
        assert len(g) == SMALL["transfer"]["linear_teachers"]["depth"]["halving"]["times"] + 1
        assert np.all((g[1:] / g[:-1] > 1.7) & (g[1:] / g[:-1] < 2.3)), g


def test_deep_gd_agrees_with_its_limit_point_and_depth_changes_the_risk(stage):
    """GD risks within O(η) of Thm 5.2 on the same draws; with label noise the depth-2 fine-tuned model
    is worse than depth 1 at θ = π/3 (features-are-fate Thm 3.9 is exact only at depth 1)."""
    deep = stage[
        (stage["experiment"] == "faf_deep") & (stage["metric"] == "risk") & (stage["method"] == "finetune")
    ]
    key = ["n", "theta", "sigma"]
    gd = deep[deep["solver"] == "gradient_descent"].set_index(key)["risk"]
    thm = deep[(deep["solver"] == "limit_point") & (deep["depth"] == 2)].set_index(key)["risk"]
    one = deep[deep["solver"] == "linear_algebra"].set_index(key)["risk"]
    assert ((gd - thm).abs() < 0.03).all()  # O(η): η ≤ 0.05 here
    noisy = (thm - one).xs(1.0, level="sigma")
    assert (noisy.xs(PI / 3, level="theta") > 0).all()


def test_frozen_first_layer_only_rescales_the_source():
    """Thm 5.5: with W₁ frozen the fine-tuned β stays parallel to θ_S (= e₁), whatever the target."""
    rng = np.random.default_rng(6)
    d, n, B = 12, 6, 5
    X, y = rng.standard_normal((B, n, d)), rng.standard_normal((B, n))
    pre = gradient_descent(
        balanced_init(B, d, 2, 0.05, rng), population_grad(np.eye(d)[0]), 0.1, 1e-10, 10**5
    ).chain
    fz = gradient_descent(pre, sample_grad(X, y), 0.01, 1e-10, 10**6, train_first=False).chain
    beta = fz.beta
    assert np.allclose(beta[:, 1:], 0, atol=1e-6) and np.allclose(fz.a, pre.a)


# ------------------------------------------------------------------------------------- the bridge


def test_one_layer_gd_converges_to_the_mixture_premise():
    """One-layer GD on m < d samples converges to θ₀P⊥ + A_ftP∥ (the premise of the exact mixture)."""
    rng = np.random.default_rng(7)
    d, m = 6, 3
    theta0, A_pre, A_ft = rng.standard_normal((3, d, d))
    X = rng.standard_normal((d, m))
    th = theta0.copy()
    S = X @ X.T / m
    for _ in range(20000):
        th -= 0.05 * 2 * (th - A_ft) @ S
    P = X @ np.linalg.solve(X.T @ X, X.T)
    assert np.allclose(th, theta0 @ (np.eye(d) - P) + A_ft @ P, atol=1e-9)
    sim = converged_one_layer_samples(theta0[None, None], A_pre[None], A_ft[None], X[None, None])
    assert sim[0, 0, 0] == pytest.approx(np.sum((th - A_pre) ** 2), rel=1e-9)


def test_one_layer_cannot_overtrain_and_two_layers_do(stage):
    """Converged on m < d samples, one layer: the exact mixture, non-increasing along the pre-training
    trajectory (and simulated within 4 SE, test above). K population steps: two layers fall then rise
    (an inflection strictly inside), one layer moves only by O((1 − 2η)^K) terms."""
    o = stage[stage["experiment"] == "overtraining"]
    curve = o[
        (o["variant"] == "converged")
        & (o["depth"] == 1)
        & (o["estimator"] == "closed_form")
        & o["features"].isna()
    ]
    for _, c in curve.groupby("seed"):
        v = c.sort_values("pretrain_time")["risk"].to_numpy()
        assert np.all(np.diff(v) <= 1e-12 * v.max())
    pop2 = o[(o["variant"] == "population_steps") & (o["depth"] == 2) & (o["estimator"] == "simulation")]
    for _, c in pop2.groupby("seed"):
        v = c.sort_values("features")["risk"].to_numpy()
        k = int(np.argmin(v))
        assert 0 < k < len(v) - 1 and v[-1] > v[k] + 0.5 * (v[0] - v[k] + 1e-3)
    lemma = o[(o["variant"] == "population_steps") & (o["depth"] == 2) & (o["estimator"] == "closed_form")]
    merged = pop2.merge(lemma[["seed", "features", "risk"]], on=["seed", "features"], suffixes=("", "_cf"))
    assert np.all(np.abs(merged["risk"] - merged["risk_cf"]) <= 0.05 * merged["risk_cf"] + 1e-3)
    # one layer, K steps: L = (1−q)²‖Δ‖² + q²‖θ₀ − A_pre‖² + 2q(1−q)⟨θ₀ − A_pre, Δ⟩, so along the whole
    # trajectory it stays within q² max L_pre + 2q max √L_pre ‖Δ‖ of (1 − q)²‖Δ‖²
    eta, K = THEORY["finetune"]["learning_rate"], THEORY["finetune"]["steps"]
    q = (1 - 2 * eta) ** K
    task = THEORY["finetune"]["tasks"][THEORY["transfer"]["overtraining"]["task"]]
    d = THEORY["d"]
    delta = np.linalg.norm(
        make_spectrum(task["spectrum"], d) - make_spectrum(THEORY["spectra"][task["pretrain"]], d)
    )
    pop1 = o[(o["variant"] == "population_steps") & (o["depth"] == 1) & o["features"].isna()]
    lpre = o[o["variant"] == "before_finetuning"]["risk"].max()
    dev = (pop1["risk"] - (1 - q) ** 2 * delta**2).abs().max()
    assert dev <= q**2 * lpre + 2 * q * math.sqrt(lpre) * delta
    two_rise = pop2["risk"].max() - pop2["risk"].min()
    assert pop1["risk"].max() - pop1["risk"].min() < 0.25 * two_rise


def test_population_one_layer_loss_is_the_k_step_iterate():
    """The one-layer K-step closed form equals iterating θ ← θ − 2η(θ − A_ft)."""
    rng = np.random.default_rng(1)
    theta, A_pre, A_ft = rng.standard_normal((3, 4, 4))
    th = theta.copy()
    for _ in range(37):
        th = th - 2 * 0.03 * (th - A_ft)
    assert population_one_layer_loss(theta, A_pre, A_ft, 0.03, 37) == pytest.approx(np.sum((th - A_pre) ** 2))


# ------------------------------------------------------------------------------------- outputs


def test_table_schema_and_columns(stage, tmp_path):
    required = [
        "paper",
        "method",
        "estimator",
        "depth",
        "d",
        "n",
        "theta",
        "sigma",
        "ridge",
        "risk",
        "risk_se",
        "instances",
    ]
    assert all(c in TRANSFER_COLUMNS for c in required) and list(stage.columns) == list(TRANSFER_COLUMNS)
    assert set(stage["paper"]) == {"features_are_fate", "linear_teachers", "bridge"}
    assert set(stage["estimator"]) == {"closed_form", "simulation"}
    assert set(stage["method"]) >= {
        "scratch",
        "linear_transfer",
        "ridge_transfer",
        "finetune",
        "finetune_frozen_first",
    }
    cf = stage[stage["estimator"] == "closed_form"]
    assert (
        cf["risk_se"].isna().all()
        and cf["instances"].isna().all()
        and cf["limit"].isin(["exact", "asymptotic"]).all()
    )
    sim = stage[stage["estimator"] == "simulation"]
    assert sim["limit"].isna().all() and (sim["instances"] >= 1).all()
    assert stage["theta"].dropna().between(0, PI / 2).all() and np.isfinite(stage["risk"]).all()
    path = tmp_path / "transfer.parquet"
    write_transfer(path, stage)
    assert pq.read_schema(path).remove_metadata().equals(SCHEMA)
    assert len(pd.read_parquet(path)) == len(stage)


def test_figures_are_written(stage, tmp_path):
    ref = SMALL["transfer"]["features_are_fate"]["reference_sigma"]
    paths = plot_transfer(stage, tmp_path, ref, ("png",))
    assert sorted(p.name for p in paths) == sorted(f"{s}.png" for s in FIGURE_STEMS) and len(paths) == 8
    assert all(p.stat().st_size > 10_000 for p in paths)


def test_rule_params_split_the_theory_section():
    """theory_transfer reads theory.transfer and the trajectory keys, not the perturbation settings."""
    p = transfer_inputs(THEORY)
    assert set(p) == {*THEORY_KEYS, "finetune", "transfer"} and "perturbation" not in p
    assert set(p["finetune"]) == {"tasks", "learning_rate", "steps"}


# ------------------------------------------------------------------------------------- bad input


def _bad(path: str, value) -> dict:
    cfg = copy.deepcopy(THEORY)
    node = cfg["transfer"]
    *parents, leaf = path.split(".")
    for k in parents:
        node = node[k]
    node[leaf] = value
    return cfg


@pytest.mark.parametrize(
    "path, value, message",
    [
        (
            "features_are_fate.n",
            [20, 100],
            "theory.transfer.features_are_fate.n: grid point n = 100 with d = 100",
        ),
        (
            "features_are_fate.n",
            [20, 101],
            "theory.transfer.features_are_fate.n: grid point n = 101 with d = 100",
        ),
        ("features_are_fate.n", [40, 20], "theory.transfer.features_are_fate.n: need a strictly increasing"),
        ("features_are_fate.ridge.n", [100], "theory.transfer.features_are_fate.ridge.n: grid point n = 100"),
        (
            "linear_teachers.alignment.n",
            [10, 100],
            "theory.transfer.linear_teachers.alignment.n: grid point n = 100",
        ),
        (
            "linear_teachers.frozen.n",
            [10, 60],
            "theory.transfer.linear_teachers.frozen.n: the linear-teachers",
        ),
        (
            "linear_teachers.depth.depths",
            [1],
            "theory.transfer.linear_teachers.depth.depths: need a depth >= 2",
        ),
        (
            "features_are_fate.reference_sigma",
            0.25,
            "theory.transfer.features_are_fate.reference_sigma: 0.25 is not one of",
        ),
        (
            "overtraining.task",
            "nope",
            "theory.transfer.overtraining.task: 'nope' is not one of theory.finetune.tasks",
        ),
        ("overtraining.m", 8, "theory.transfer.overtraining.m: need m < theory.d = 8"),
        (
            "linear_teachers.depth.halving.target_norm",
            5.0,
            "theory.transfer.linear_teachers.depth.halving.target_norm: 5",
        ),
    ],
)
def test_bad_transfer_config_is_a_start_up_error(path, value, message):
    """pipeline/theory/config.py's check (run by the workflow at parse time) names the key: what a
    schema cannot say (grid points against d, orderings, cross-references)."""
    with pytest.raises(ValueError) as err:
        check_config(_bad(path, value))
    assert str(err.value).startswith(message), str(err.value)


@pytest.mark.parametrize(
    "path, value, line",
    [
        (
            "features_are_fate.theta",
            [0.1, 2.0],
            "theory.transfer.features_are_fate.theta[1]: got 2.0; "
            "expected a value >= 0 and <= 1.5707963267948966",
        ),
        ("features_are_fate.d", 0, "theory.transfer.features_are_fate.d: got 0; expected a value >= 1"),
        (
            "linear_teachers.frozen.n",
            [0, 10],
            "theory.transfer.linear_teachers.frozen.n[0]: got 0; expected a value >= 3",
        ),
        (
            "linear_teachers.depth.depths",
            [0, 2],
            "theory.transfer.linear_teachers.depth.depths[0]: got 0; expected a value >= 1",
        ),
        ("features_are_fate.theta", [-0.1], "theory.transfer.features_are_fate.theta[0]: got -0.1; expected"),
        (
            "features_are_fate.n",
            [2, 20],
            "theory.transfer.features_are_fate.n[0]: got 2; expected a value >= 3",
        ),
        (
            "features_are_fate.deep.depth",
            0,
            "theory.transfer.features_are_fate.deep.depth: got 0; expected a",
        ),
        (
            "linear_teachers.frozen.depth",
            1,
            "theory.transfer.linear_teachers.frozen.depth: got 1; expected a",
        ),
        (
            "linear_teachers.frozen.d",
            -3,
            "theory.transfer.linear_teachers.frozen.d: got -3; expected a value",
        ),
    ],
)
def test_a_type_or_range_error_is_the_schemas(path, value, line):
    """At start-up the schema names the key first (its range), before pipeline/theory/config.py's check."""
    from workflow_utils import workflow_config

    from pipeline.workflow.schema import ConfigError, load_schema
    from pipeline.workflow.schema import validate_config as validate_study

    cfg = workflow_config()
    cfg["theory"] = _bad(path, value)
    with pytest.raises(ConfigError) as err:
        validate_study(cfg, load_schema(ROOT / "config" / "schema.yaml"))
    assert any(ln.strip().startswith(line) for ln in str(err.value).splitlines()), str(err.value)
