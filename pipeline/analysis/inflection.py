"""Is the metric-vs-budget curve U-shaped, and where is its minimum? (catastrophic overtraining)

`u_shape(tokens, values, unit)` takes one setting's observations (a metric on the scale to analyse,
e.g. log perplexity, at each pre-training budget, with replicate units such as seeds) and returns

- `p_u`, one minus the p-value of an intersection-union test (Berger & Hsu 1996) of
      H0: the budget means have no interior valley (monotone, flat, or rising then falling)
      H1: some budget's mean is below the mean at an earlier budget AND below the mean at a later one.
  The test claims a significant drop (mean at budget i > mean at j, i < j) and a significant rise
  (mean at j' < mean at k, j' < k) with j <= j'; each claim is a pairwise t statistic (residual
  variance from the fit below) referred to the null law of the largest studentised rise among K
  equal budget means with the fit's own covariance (for independent equal-variance means the
  one-sided studentised range; simulated with common random numbers per (K, df), cached per shape).
  Under a monotone (or flat) truth only one side can be falsely claimed and that side's
  family-wise error is <= alpha, so P(p_u > 1 - alpha) <= alpha for every curve with no interior
  minimum (= alpha at a certain drop followed by a flat tail; for rise-then-fall curves the union
  bound gives <= 2 alpha). p_u is a confidence, not a Bayesian posterior: "U established" is
  p_u > 0.95. The simulated null law has 5e4 draws, so p_u saturates at 1 - 2e-5 .. 1.
- `min_low`, `min_high`: a `level` confidence interval for the location of the minimum of the
  underlying smooth curve f(log2 tokens), by test inversion: x is kept if the derivative at x of
  a local quadratic (fitted to the budgets within ~2 doublings of x) is not significantly
  different from 0, allowing for the worst-case bias of the quadratic when the curvature of f
  changes by at most a factor 2^r per doubling (|f'''| <= r ln2 f'', `curvature_rate` = r; the
  "honest" critical value of Armstrong & Kolesar 2020: the level-quantile of |b + T_df| with
  b = bias bound / se). The interval is the hull of the kept points; a side that reaches the
  grid's edge is open (0 or inf tokens): the data cannot exclude a minimum at or beyond that edge.
  Test and interval are separate procedures: with p_u > 0.95 the interval can still be open on a
  side whose local slope is uncertain.
- with `selected_at`, where p_u clears it: the same inversion, conditioned on the test having
  passed (`_selective_keep`: the selective t-test of Fithian, Sun & Taylor 2014), so that it covers
  as stated given that it is printed. The sweeps that pass a test of little power are those whose
  noise steepened the curve and shrank s; the unconditional interval then covers 0.80 given the
  test at power 0.14, the conditional one 0.96 (bench/claims_calibration.py). Conditioning also
  spends the data's information on the side that drove the selection: the conditional interval is
  bounded in 4-24% of printed sweeps, against 35-100% for the unconditional one. The claims print
  both (pipeline/analysis/evidence.py).

Why this method. Figures from bench/inflection_coverage.py --baselines (1000 U + 1000 monotone
sweeps in each of 24 settings: 4 budgets x 3 or 2 units and 7 budgets x 3 units, noise sd 0.005 to
0.12, independent or paired units); "~" marks exploratory runs of the same simulation.

  U test                                   false U mean (worst)   power mean (range)
    Lind & Mehlum 2010: global quadratic,     0.078 (0.191)          0.49 (0.09-0.93)
      slopes at both ends of the data
    Simonsohn 2018: two lines, Robin Hood     0.002 (0.012)          0.21 (0.03-0.52)
    ~ hinge (continuous two lines)            ~0.08 with heteroscedastic noise
    ~ neighbours of the empirical minimum     ~0.07 (selection of the minimum not accounted for)
    pairwise IU max-t (chosen)                0.009 (0.019)          0.27 (0.08-0.56)
  minimum interval                         coverage mean (range)  at sd 0.005
    Fieller vertex of the global quadratic    0.830 (0.48-0.98)
    ~ local cubic, test inversion                                    ~0.80-0.86 on 4 budgets
    local quadratic, r = 0 (plain Fieller)    0.887 (0.67-0.98)      0.73
    local quadratic, r = 0.5                  0.933 (0.84-0.98)      0.86
    local quadratic, r = 1 (chosen)           0.968 (0.94-0.98)      0.95
    local quadratic, r = 1.5                  0.982 (0.97-0.99)      0.99
  The quadratic finds U-shapes in convex monotone curves (a power law flattening out bends the
  parabola up at the end of the range). Two lines is valid but ignores pairing and, on 4 budgets,
  can only break between 2M and 4M; the pairwise test makes no shape assumption, uses pairing
  (unit fixed effects) and is exact at its least favourable curve. At low noise 4 points do not
  identify where the minimum lies between budgets: every fixed-polynomial Fieller interval shrinks
  onto that polynomial's biased vertex, so the interval states a smoothness assumption (r) and
  pays for it in width. r = 1 (curvature may double per doubling) has margin over the reference
  curves in docs/reference, whose second differences grow ~1.6x per doubling (r ~ 0.7); the bench
  draws exponents up to 2, so some of its curves break the assumption (coverage ~0.87-0.90 at sd
  0.0005). Coverage above 0.95 at high noise comes from whole-range intervals.

The unit. Pass one value per pre-training run (a run's inner seeds averaged: they share its
pre-training randomness and are not independent replicates) with the pre-training seed as `unit`;
pipeline/analysis/evidence.py does. Counting inner seeds as units made a flat curve with a per-run
effect look U-shaped in ~30% of sweeps; bench/claims_calibration.py measures the detector on runs
(false U <= 0.05 in every null scenario there, per-run effects and an sd rising 3x included).

Assumptions: normal errors on the analysed scale; units seen at several budgets share an additive
unit effect (unit fixed effects). The variance may change with the budget: where the residuals
leave MIN_DF_VARIANCE or more degrees of freedom, a log-linear variance function of log2 tokens
(Harvey 1976) is fitted to the first fit's residuals and weights a second fit (one df spent), so a
noisier end of the sweep is not read as a rise. Budgets are compared on log2(tokens). Non-finite
values (a diverged run) are dropped and counted in `n_dropped`: that is conservative for a rise at
the budgets where runs diverge. A constant metric, fewer than 3 budgets or no replication return
NaN statistics and a `reason`; arrays of different lengths raise a ValueError naming them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from scipy import special, stats

METHOD = "pairwise IU max-t test + bias-aware local-quadratic test inversion"
GRID_STEP = 0.005  # doublings between candidate minimum locations
WINDOW_DOUBLINGS = 2.0  # the local quadratic at x uses the budgets within ~this span of x
NULL_DRAWS = 50_000


@dataclass(frozen=True)
class UShape:
    """One setting's U-shape test and minimum location; see the module docstring."""

    p_u: float  # 1 - p-value of H0 "no interior valley"; U established when p_u > 0.95
    min_tokens: float  # point estimate of the minimum's location (tokens)
    min_low: float  # `level` interval for the location; 0 = open below (minimum may be <= smallest budget)
    min_high: float  # inf = open above (minimum may be >= largest budget)
    bounded: bool  # both ends of the interval are inside the grid
    level: float
    n_budgets: int
    n_units: int
    n_obs: int
    n_dropped: int  # non-finite values dropped
    paired: bool  # units repeat across budgets: unit fixed effects
    df: int  # residual degrees of freedom of the pooled variance
    sigma: float  # residual sd
    slope_low: float  # best significant-drop pair: mean change per doubling (< 0 for a drop)
    slope_high: float  # best rise pair after it: mean change per doubling (> 0 for a rise)
    p_low: float  # multiplicity-adjusted one-sided p-value of the drop
    p_high: float  # of the rise; p_u = 1 - max(p_low, p_high)
    rise_se: float  # median se of a difference between two budgets of the upper half
    curvature_rate: float  # r: assumed max change of log2 curvature per doubling
    method: str
    reason: str  # why a field is NaN / open, or "" when everything was computed
    selective: bool = False  # the interval is conditioned on the U test having passed (selected_at)
    V: np.ndarray | None = field(default=None, repr=False, compare=False)  # budget effects' covariance / s2


def u_shape(
    tokens: np.ndarray,
    values: np.ndarray,
    unit: np.ndarray,
    level: float = 0.95,
    curvature_rate: float = 1.0,
    selected_at: float | None = None,
) -> UShape:
    """Test for a U-shape of `values` against log2(`tokens`) and locate its minimum.

    `unit` is the replicate id of each observation (the pre-training seed: pass one value per run,
    inner seeds averaged, since the inner seeds of a run are not independent replicates); the same
    unit at several budgets makes the observations paired. Arrays of different lengths raise a
    ValueError naming them; small, constant or non-finite data return NaN fields and a `reason`.
    `selected_at`: where p_u clears this level, the minimum's interval is the one printed after the
    test, conditioned on the test having passed (`_selective_keep`); elsewhere, and by default, the
    interval procedure on its own.
    """
    tokens, values = np.asarray(tokens, float).ravel(), np.asarray(values, float).ravel()
    unit = np.asarray(unit).ravel()
    if not len(tokens) == len(values) == len(unit):
        raise ValueError(
            f"u_shape: tokens, values and unit must have one entry per observation; got "
            f"{len(tokens)}, {len(values)} and {len(unit)}"
        )
    keep = np.isfinite(values) & np.isfinite(tokens) & (tokens > 0)
    n_dropped = int((~keep).sum())
    budgets, b_idx = np.unique(tokens[keep], return_inverse=True)
    _, u_idx = np.unique(unit[keep], return_inverse=True)
    y, K, n_units = values[keep], len(budgets), int(u_idx.max(initial=-1) + 1)
    base = dict(level=level, n_budgets=K, n_units=n_units, n_obs=len(y), n_dropped=n_dropped)
    if K < 3:
        return _empty(base, curvature_rate, f"{K} budget(s) with finite values: need at least 3")
    if np.ptp(y) <= 1e-12 * max(1.0, float(np.abs(y).max())):
        return _empty(base, curvature_rate, "the metric is constant: nothing to test")
    x = np.log2(budgets)
    eff, V, s2, df, paired = _budget_effects(b_idx, u_idx, y, K, x)
    base.update(paired=paired, df=df, sigma=math.sqrt(s2) if df > 0 else math.nan)
    if df < 1:
        return _empty(base, curvature_rate, "no replication: no residual degrees of freedom")
    if s2 <= 1e-24 * max(1.0, float(np.abs(y).max())) ** 2:
        return _empty(base, curvature_rate, "replicates are identical: zero residual variance")
    test = _pairwise_test(eff, V, s2, df, x)
    selected = selected_at if selected_at is not None and test["p_u"] > selected_at else None
    est, lo, hi, reason = _min_interval(eff, V, s2, df, x, level, curvature_rate, selected)
    return UShape(
        **base,
        **test,
        min_tokens=_tokens(est, x, budgets),
        min_low=_tokens(lo, x, budgets),
        min_high=_tokens(hi, x, budgets),
        bounded=bool(np.isfinite(lo) and np.isfinite(hi)),
        curvature_rate=curvature_rate,
        method=METHOD,
        reason=reason,
        selective=selected is not None,
        V=V,
    )


def _tokens(v: float, x: np.ndarray, budgets: np.ndarray) -> float:
    """log2 tokens back to tokens: a budget exactly where v is one, 0 / inf for an open side."""
    on_budget = np.isclose(x, v, rtol=0, atol=1e-9)
    return float(budgets[on_budget][0]) if on_budget.any() else max(float(2.0**v), 0.0)


def _empty(base: dict, curvature_rate: float, reason: str) -> UShape:
    """A result whose statistics could not be computed."""
    statistics = (
        "sigma",
        "p_u",
        "min_tokens",
        "min_low",
        "min_high",
        "slope_low",
        "slope_high",
        "p_low",
        "p_high",
        "rise_se",
    )
    fields = dict.fromkeys(statistics, math.nan) | dict(paired=False, df=0, bounded=False) | base
    return UShape(**fields, curvature_rate=curvature_rate, method=METHOD, reason=reason)


def _budget_effects(
    b_idx: np.ndarray, u_idx: np.ndarray, y: np.ndarray, K: int, x: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float, int, bool]:
    """Budget effects, their unscaled covariance V, residual variance, df, paired flag.

    Paired (some unit seen at two or more budgets, and the units connect all budgets): least
    squares with budget and unit fixed effects; only contrasts between budgets are used, so the
    baseline unit does not matter. Otherwise the effects are the budget means, variance pooled
    within budgets. Where the residuals leave enough degrees of freedom (`MIN_DF_VARIANCE`), the
    variance may change with the budget: a log-linear variance function of log2 tokens (Harvey 1976)
    weights a second, weighted fit (one df spent), so a noisy end of the sweep is not read as a trend.
    """
    n_u, rows = int(u_idx.max()) + 1, np.arange(len(y))
    X = np.zeros((len(y), K + n_u - 1))
    X[rows, b_idx] = 1.0
    X[rows[u_idx > 0], K + u_idx[u_idx > 0] - 1] = 1.0
    repeats = len(np.unique(u_idx * K + b_idx)) > n_u
    paired = bool(repeats and np.linalg.matrix_rank(X) == X.shape[1])
    X = X if paired else X[:, :K]
    coef, XtX_inv, resid, df = _least_squares(X, y, np.ones(len(y)))
    if df >= MIN_DF_VARIANCE:
        z = np.column_stack([np.ones(len(y)), x[b_idx] - x.mean()])
        g = np.linalg.lstsq(z, np.log(resid**2 + 1e-12 * float(resid @ resid) / len(y) + 1e-300), rcond=None)[
            0
        ]
        coef, XtX_inv, resid, df = _least_squares(X, y, np.exp(-(z[:, 1] * g[1])))
        df -= 1
    s2 = float(resid @ resid / df) if df > 0 else math.nan
    return coef[:K], XtX_inv[:K, :K], s2, df, paired


MIN_DF_VARIANCE = 6  # residual df from which the variance function is estimated


def _least_squares(
    X: np.ndarray, y: np.ndarray, w: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Weighted least squares: coefficients, (X'WX)^-1, weighted residuals, residual df."""
    sw = np.sqrt(w)
    Xw, yw = X * sw[:, None], y * sw
    XtX_inv = np.linalg.inv(Xw.T @ Xw)
    coef = XtX_inv @ (Xw.T @ yw)
    return coef, XtX_inv, yw - Xw @ coef, len(y) - X.shape[1]


@lru_cache(maxsize=16)
def _base_draws(K: int, df: int) -> tuple[np.ndarray, np.ndarray]:
    """NULL_DRAWS standard normal K-vectors and the matching s / sigma = sqrt(chi2_df / df): common
    random numbers for every covariance of K budget effects (one seeded simulation per (K, df))."""
    rng = np.random.default_rng(20250131)
    return rng.standard_normal((NULL_DRAWS, K)), np.sqrt(rng.chisquare(df, NULL_DRAWS) / df)


@lru_cache(maxsize=32)
def _max_rise_null(V_key: tuple[float, ...], K: int, df: int) -> np.ndarray:
    """Draws of max_{j<k} (Z_k - Z_j) / sd(Z_k - Z_j) / (s / sigma) for K equal budget means with
    covariance V (`V_key`: V / its mean diagonal, rounded, flattened), s^2 ~ chi2_df / df: the null law
    of the largest studentised rise at the design's own covariance (for independent equal-variance
    means, the one-sided studentised range)."""
    V = np.array(V_key).reshape(K, K)
    base, scale = _base_draws(K, df)
    z = base @ np.linalg.cholesky(V + 1e-12 * np.eye(K)).T
    j, k = np.triu_indices(K, 1)
    sd = np.sqrt(V[j, j] + V[k, k] - 2 * V[j, k])
    rise = np.full(NULL_DRAWS, -np.inf)
    for jj, kk, s in zip(j, k, sd):
        np.maximum(rise, (z[:, kk] - z[:, jj]) / s, out=rise)
    return rise / scale


def _null(V: np.ndarray, df: int) -> np.ndarray:
    """`_max_rise_null` of V, keyed so that designs of the same shape share one simulation: V / its
    mean diagonal to 2 decimals, or finer where that rounds a pair's variance to 0 (a fitted variance
    function can make some budgets' effects 100x more precise than others')."""
    j, k = np.triu_indices(len(V), 1)
    for digits in (2, 4, 6, 8):
        key = np.round(V / np.mean(np.diag(V)), digits)
        if (key[j, j] + key[k, k] - 2 * key[j, k] > 0).all():
            break
    return _max_rise_null(tuple(key.ravel()), len(V), df)


def _pairwise_test(eff: np.ndarray, V: np.ndarray, s2: float, df: int, x: np.ndarray) -> dict:
    """Intersection-union test: a significant drop that ends no later than a significant rise starts."""
    K = len(eff)
    j, k = np.triu_indices(K, 1)
    diff = eff[k] - eff[j]
    se = np.sqrt(s2 * (V[j, j] + V[k, k] - 2 * V[j, k]))
    t = diff / se  # > 0: rise from j to k
    best = (-math.inf, 0, 0)  # (min(drop t, rise t), drop pair, rise pair)
    for s in range(1, K - 1):  # split budget: drops end at or before it, rises start at or after it
        drops, rises = np.where(k <= s)[0], np.where(j >= s)[0]
        d, r = drops[np.argmin(t[drops])], rises[np.argmax(t[rises])]
        if min(-t[d], t[r]) > best[0]:
            best = (min(-t[d], t[r]), d, r)
    null = _null(V, df)
    p = [np.count_nonzero(null > tt) / len(null) for tt in (-t[best[1]], t[best[2]])]
    slope = diff / (x[k] - x[j])
    low, high = float(slope[best[1]]), float(slope[best[2]])
    upper = j >= K // 2  # rises within the upper half of the budgets
    return dict(
        p_u=float(1.0 - max(p)),
        slope_low=low,
        slope_high=high,
        p_low=float(p[0]),
        p_high=float(p[1]),
        rise_se=float(np.median(se[upper])),
    )


def detectable_rise(fit: UShape, level: float, power: float = 0.8) -> float:
    """The rise between two budgets of the upper half (in the analysed units, e.g. nats of log
    perplexity) that the rise side of the test finds at `level` with probability `power`, at the
    fit's own noise: (null quantile + t_power) x the median se of such a difference. NaN where the
    test was not computed."""
    if not math.isfinite(fit.rise_se):
        return math.nan
    cv = float(np.quantile(_null(fit.V, fit.df), level)) if fit.V is not None else math.nan
    return (cv + float(stats.t.ppf(power, fit.df))) * fit.rise_se


@lru_cache(maxsize=256)
def _window_weights(x: tuple[float, ...], G: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Candidate locations xg and, at each, the weights on the budget effects of the local quadratic's
    first derivative (C1) and second derivative (C2), and its cubic moment m3 = sum_k C1_k (x_k - xg)^3
    (the derivative's bias is f''' m3 / 6)."""
    xb = np.array(x)
    K = len(xb)
    w = int(np.clip(1 + round(WINDOW_DOUBLINGS / np.median(np.diff(xb))), 3, K))
    centres = np.convolve(xb, np.ones(w) / w, mode="valid")  # centre of each window of w budgets
    xg = np.linspace(xb[0], xb[-1], G)
    C1, C2, m3 = np.zeros((G, K)), np.zeros((G, K)), np.zeros(G)
    for g, x0 in enumerate(xg):
        st = int(np.argmin(np.abs(centres - x0)))
        d = xb[st : st + w] - x0
        P = np.linalg.pinv(np.vander(d, 3, increasing=True))
        C1[g, st : st + w], C2[g, st : st + w], m3[g] = P[1], 2 * P[2], P[1] @ d**3
    return xg, C1, C2, m3


@lru_cache(maxsize=64)
def _honest_cv(df: int, level: float) -> tuple[np.ndarray, np.ndarray]:
    """cv(b): the `level` quantile of |b + T_df| on a grid of b (bisection), for the bias-aware test."""
    b = np.linspace(0.0, 10.0, 201)
    lo, hi = np.zeros_like(b), b + 50.0
    for _ in range(60):
        mid = (lo + hi) / 2
        inside = stats.t.cdf(mid - b, df) - stats.t.cdf(-mid - b, df) < level
        lo, hi = np.where(inside, mid, lo), np.where(inside, hi, mid)
    return b, (lo + hi) / 2


def _min_interval(
    eff: np.ndarray,
    V: np.ndarray,
    s2: float,
    df: int,
    x: np.ndarray,
    level: float,
    r: float,
    selected_at: float | None = None,
) -> tuple[float, float, float, str]:
    """(estimate, low, high) of the minimum's location in log2 tokens (+-inf = open), and a reason;
    with `selected_at`, the interval given that the U test cleared that level (`_selective_keep`)."""
    G = int(math.ceil((x[-1] - x[0]) / GRID_STEP)) + 1
    xg, C1, C2, m3 = _window_weights(tuple(x), G)
    D = C1 @ eff
    se = np.sqrt(s2 * np.einsum("gk,kl,gl->g", C1, V, C1))
    bias = r * math.log(2) * np.maximum(C2 @ eff, 0.0) * np.abs(m3) / 6
    if selected_at is None:
        bt, cvt = _honest_cv(df, level)
        b = bias / se
        cv = np.where(b > bt[-1], b - bt[-1] + cvt[-1], np.interp(b, bt, cvt))
        keep = np.abs(D) <= cv * se
    else:
        keep = _selective_keep(eff, V, s2, df, C1, bias, level, selected_at)
    cross = np.sign(D[1:]) != np.sign(D[:-1])  # a root between two candidates: keep both
    keep[1:] |= cross
    keep[:-1] |= cross
    up = np.where((D[:-1] < 0) & (D[1:] >= 0))[0]  # local minima of the fitted curve
    x_argmin = x[int(np.argmin(eff))]
    if len(up):
        est = float(xg[up[np.argmin(np.abs(xg[up] - x_argmin))]])
    else:
        est = float(x[0] if D[0] > 0 else x[-1] if D[-1] < 0 else x_argmin)
    if not keep.any():  # significantly monotone over the whole grid
        if D[-1] < 0:
            return (
                est,
                float(x[-1]),
                math.inf,
                "decreasing over the whole grid: minimum above the largest budget",
            )
        return (
            est,
            -math.inf,
            float(x[0]),
            "increasing over the whole grid: minimum below the smallest budget",
        )
    kept = xg[keep]
    lo = -math.inf if keep[0] else float(kept[0])
    hi = math.inf if keep[-1] else float(kept[-1])
    open_ = [s for s, o in (("below", keep[0]), ("above", keep[-1])) if o]
    reason = (
        f"interval open {' and '.join(open_)}: a minimum at or beyond that edge of the grid is not excluded"
    )
    return est, lo, hi, reason if open_ else ""


def _selection_cv(V: np.ndarray, df: int, selected_at: float) -> float:
    """The studentised drop and rise the U test needs for p_u > `selected_at`: p = share of null
    draws above t is below 1 - selected_at exactly where t >= this draw (`_pairwise_test`'s rule)."""
    null = np.sort(_null(V, df))
    above = (len(null) - 1 - np.arange(len(null))) / len(null)
    return float(null[int(np.argmax(above < 1 - selected_at))])


def _log_t_mass(lo: np.ndarray, hi: np.ndarray, df: int) -> np.ndarray:
    """log(T_df(hi) - T_df(lo)) for lo <= hi, accurate far in either tail."""
    flip = lo > 0  # the mass lies in the upper tail: use T(-lo) - T(-hi)
    a, b = np.where(flip, -hi, lo), np.where(flip, -lo, hi)
    la, lb = stats.t.logcdf(a, df), stats.t.logcdf(b, df)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(lb > la, lb + np.log1p(-np.exp(la - lb)), -np.inf)


def _selective_keep(
    eff: np.ndarray,
    V: np.ndarray,
    s2: float,
    df: int,
    C1: np.ndarray,
    bias: np.ndarray,
    level: float,
    selected_at: float,
) -> np.ndarray:
    """keep[g]: at candidate g a derivative of 0 (up to its bias bound) is not rejected, given that
    the U test cleared `selected_at` on these data: the interval a claim would print after its test.

    The selective t-test (Fithian, Sun & Taylor 2014; the polyhedral view of Lee, Sun, Sun & Taylor
    2016). The budget effects are eff ~ N(mu, sigma^2 V), the residual sum of squares
    rss ~ sigma^2 chi2_df apart. The local derivative tau = C1[g] . eff (variance sigma^2 v) is
    independent of z = eff - c tau (c = V C1[g] / v). Under H0: E tau = theta, given z and
    W = rss + (tau - theta)^2 / v, the point ((tau - theta) / sqrt(v), residuals) is uniform on a
    sphere of radius sqrt(W): with tau - theta = sqrt(v W) sin(phi) and s = sqrt(W / df) cos(phi),
    sqrt(df) tan(phi) has the t_df law, and sigma drops out (the sweeps that pass a test of little
    power are those whose s came out small; this law knows it). Each pair's t of the test is
    (alpha + beta sin(phi)) / (gamma cos(phi)), so the cuts where it crosses +-cv are closed-form
    and the test's pass region is a union of phi intervals. A candidate is kept where the
    equal-tailed test of some theta in [-bias, bias] (5 points) does not reject:
    2 min(F, 1 - F) > 1 - level, F = P_theta(phi <= phi_obs | z, W, passed) (the interval for the
    derivative meets the bias band: a little wider than `_honest_cv`'s test)."""
    K, G = len(eff), len(C1)
    j, k = np.triu_indices(K, 1)
    pair_sd = np.sqrt(V[j, j] + V[k, k] - 2 * V[j, k])
    cv = _selection_cv(V, df, selected_at)
    VC = C1 @ V
    v = np.einsum("gk,gk->g", VC, C1)
    c = VC / v[:, None]
    tau = C1 @ eff
    z = eff[None, :] - c * tau[:, None]
    a, b = (z[:, k] - z[:, j]) / pair_sd, (c[:, k] - c[:, j]) / pair_sd  # pair t x s = a + b tau
    splits = [(k <= split, j >= split) for split in range(1, K - 1)]
    keep = np.zeros(G, bool)
    for theta in np.linspace(-1, 1, 5)[:, None] * bias:
        W = s2 * df + (tau - theta) ** 2 / v
        alpha, beta = a + b * theta[:, None], b * np.sqrt(v * W)[:, None]  # t x s = alpha + beta sin
        gamma = np.sqrt(W / df)[:, None]  # s = gamma cos(phi)
        phi_obs = np.arcsin(np.clip((tau - theta) / np.sqrt(v * W), -1, 1))
        cuts = [phi_obs[:, None]]
        for sign in (-1, 1):  # alpha + beta sin(phi) = sign cv gamma cos(phi): rho sin(phi - psi) = -alpha
            rho, psi = np.hypot(beta, cv * gamma), np.arctan2(sign * cv * gamma, beta)
            base = np.arcsin(np.clip(-alpha / rho, -1, 1))
            for root in (psi + base, psi + math.pi - base):
                cuts.append((root + math.pi) % (2 * math.pi) - math.pi)  # to [-pi, pi)
        cuts = np.concatenate(cuts, 1)
        cuts = np.sort(np.where(np.abs(cuts) < math.pi / 2, cuts, math.pi / 2), axis=1)
        edge = np.full((G, 1), math.pi / 2)
        lo, hi = np.concatenate([-edge, cuts], 1), np.concatenate([cuts, edge], 1)
        mid = (lo + hi) / 2  # (G, segments)
        sin, cos = np.sin(mid)[:, :, None], np.cos(mid)[:, :, None]
        t = (alpha[:, None, :] + beta[:, None, :] * sin) / (gamma[:, None, :] * cos)  # (G, segments, pairs)
        passed = np.zeros(mid.shape, bool)
        for drop, rise in splits:  # _pairwise_test: a drop ending by a split, a rise from it on
            passed |= (t[..., drop].min(-1) <= -cv) & (t[..., rise].max(-1) >= cv)
        r = math.sqrt(df)
        mass = np.where(passed & (hi > lo), _log_t_mass(r * np.tan(lo), r * np.tan(hi), df), -np.inf)
        total = special.logsumexp(mass, 1)
        below = np.exp(special.logsumexp(np.where(hi <= phi_obs[:, None], mass, -np.inf), 1) - total)
        above = np.exp(special.logsumexp(np.where(lo >= phi_obs[:, None], mass, -np.inf), 1) - total)
        keep |= ~np.isfinite(total) | (2 * np.minimum(below, above) > 1 - level)
    return keep
