"""Coverage of pipeline.analysis.inflection.u_shape on simulated sweeps with a known minimum.

Grids: 1, 2, 4, 8 M tokens with 3 and 2 units (the default study) and 7 budgets sqrt(2) apart from
1M to 8M with 3 units (the evidence study). Truth on the log-metric scale, x = log2(tokens / 1M):
U curves f = s (2^(-alpha (x - x*)) / alpha + 2^(beta (x - x*)) / beta), alpha ~ logU[0.3, 2],
beta ~ logU[0.5, 2], x* ~ U[grid range], depth max(f(x_1), f(x_K)) - f(x*) ~ logU[0.03, 1]; and
monotone curves (a quarter each): a power law decaying to an asymptote, the U family with its
minimum 0-1.5 doublings above the grid (decreasing, flattening), a rising power law, flat.
Noise: Gaussian, sd 0.005, 0.02, 0.05, 0.12, independent units or paired (every unit at every
budget, plus a unit offset of sd 2 x noise shared across budgets); --hetero makes the sd grow 4x
from the smallest budget to the largest (as between seeds of the earlier default study).

Reports per setting: coverage of the `level` interval for x* over U curves (target 0.90-0.98),
rate of p_u > 0.95 on monotone curves (false U, target <= 0.05), power (p_u > 0.95 on U curves),
share of bounded intervals and the median width in doublings (open sides clipped to the grid).
--baselines adds Lind & Mehlum's quadratic test + Fieller vertex, Simonsohn's two lines and the
chosen method without the bias allowance (curvature_rate = 0) on the same sweeps.

Usage: .venv/bin/python bench/inflection_coverage.py [--sweeps 1000] [--seed 0] [--hetero] [--baselines]
The last line reads `coverage <x> false_u <y>` (all settings pooled).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import stats

from pipeline.analysis.inflection import u_shape

GRIDS = {  # name: (log2 budgets relative to 1M, units per budget)
    "4x3": (np.arange(4.0), 3),
    "4x2": (np.arange(4.0), 2),
    "7x3": (np.arange(7) / 2, 3),
}
NOISE = (0.005, 0.02, 0.05, 0.12)
NULL_KINDS = ("decay", "beyond", "rise", "flat")
LEVEL = 0.95


def _scaled(g: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Shift each row's minimum to 0 and scale its range to `depth`."""
    g = g - g.min(axis=1, keepdims=True)
    return depth[:, None] * g / g.max(axis=1, keepdims=True)


def _two_powers(rng: np.random.Generator, x: np.ndarray, xstar: np.ndarray) -> np.ndarray:
    """a 2^(-alpha x) + b 2^(beta x) with its minimum at x*, on the grid."""
    S = len(xstar)
    alpha = np.exp(rng.uniform(np.log(0.3), np.log(2.0), S))[:, None]
    beta = np.exp(rng.uniform(np.log(0.5), np.log(2.0), S))[:, None]
    d = x[None] - xstar[:, None]
    return 2 ** (-alpha * d) / alpha + 2 ** (beta * d) / beta


def _depth(rng: np.random.Generator, S: int) -> np.ndarray:
    return np.exp(rng.uniform(np.log(0.03), np.log(1.0), S))


def u_curves(rng: np.random.Generator, S: int, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(S, K) means of U curves and their minimum locations x* (inside the grid)."""
    xstar = rng.uniform(x[0], x[-1], S)
    return _scaled(_two_powers(rng, x, xstar), _depth(rng, S)), xstar


def monotone_curves(rng: np.random.Generator, S: int, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(S, K) means of curves with no interior minimum, and the kind index of each."""
    kind = np.arange(S) % len(NULL_KINDS)
    rate = np.exp(rng.uniform(np.log(0.3), np.log(2.0), S))[:, None]
    g = np.where(kind[:, None] == 0, 2 ** (-rate * x[None]), 2 ** (rate * x[None]))  # decay or rise
    beyond = _two_powers(rng, x, x[-1] + rng.uniform(0.0, 1.5, S))
    g = np.where(kind[:, None] == 1, beyond, g)
    mu = _scaled(g, _depth(rng, S))
    mu[kind == 3] = 0.0
    return mu, kind


def noisy(
    rng: np.random.Generator, mu: np.ndarray, n: int, sd: float, paired: bool, hetero: bool, x: np.ndarray
) -> np.ndarray:
    """(S, K, n) observations."""
    S, K = mu.shape
    sd_k = sd * 4.0 ** ((x - x[-1]) / (x[-1] - x[0])) if hetero else np.full(K, sd)
    y = mu[:, :, None] + rng.standard_normal((S, K, n)) * sd_k[None, :, None]
    return y + rng.standard_normal((S, 1, n)) * 2 * sd if paired else y


def fit_all(
    y: np.ndarray, x: np.ndarray, paired: bool, r: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """u_shape on every sweep: p_u, and the interval in log2(tokens / 1M) (+-inf = open)."""
    S, K, n = y.shape
    tokens = np.repeat(1e6 * 2.0**x, n)
    unit = np.tile(np.arange(n), K) if paired else np.arange(K * n)
    out = np.empty((S, 3))
    for s in range(S):
        f = u_shape(tokens, y[s].ravel(), unit, level=LEVEL, curvature_rate=r)
        out[s] = f.p_u, f.min_low, f.min_high
    with np.errstate(divide="ignore"):
        return out[:, 0], np.log2(out[:, 1] / 1e6), np.log2(out[:, 2] / 1e6)


# --- baselines (regressions on all observations, units ignored, as in the papers) ----------------


def _ols(y: np.ndarray, X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Coefficients (S, p), (X'X)^-1, residual variances (S,), df for stacked sweeps y (S, N)."""
    XtX_inv = np.linalg.inv(X.T @ X)
    B = y @ X @ XtX_inv
    df = X.shape[0] - X.shape[1]
    return B, XtX_inv, ((y - B @ X.T) ** 2).sum(axis=1) / df, df


def lind_mehlum(y: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Quadratic fit: p_u = 1 - max one-sided p of the slopes at both ends; Fieller interval of the vertex."""
    S, K, n = y.shape
    xx = np.repeat(x, n)
    B, Vi, s2, df = _ols(y.reshape(S, -1), np.stack([np.ones_like(xx), xx, xx**2], axis=1))

    def slope(at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        c = np.stack([np.zeros_like(at), np.ones_like(at), 2 * at], axis=1)  # (G, 3)
        return B @ c.T, np.sqrt(s2[:, None] * np.einsum("gi,ij,gj->g", c, Vi, c)[None])

    (d0, e0), (d1, e1) = slope(x[:1]), slope(x[-1:])
    p = np.maximum(stats.t.sf(-d0[:, 0] / e0[:, 0], df), stats.t.sf(d1[:, 0] / e1[:, 0], df))
    xg = np.linspace(x[0], x[-1], 601)
    d, e = slope(xg)
    return 1 - p, *_hull(np.abs(d) <= stats.t.ppf(0.5 + LEVEL / 2, df) * e, d, xg)


def _hull(keep: np.ndarray, d: np.ndarray, xg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Low and high ends of the kept candidates (+-inf where a grid edge is kept)."""
    cross = np.sign(d[:, 1:]) != np.sign(d[:, :-1])
    keep = keep.copy()
    keep[:, 1:] |= cross
    keep[:, :-1] |= cross
    G, some = len(xg), keep.any(axis=1)
    lo = np.where(keep[:, 0], -np.inf, xg[np.argmax(keep, axis=1)])
    hi = np.where(keep[:, -1], np.inf, xg[G - 1 - np.argmax(keep[:, ::-1], axis=1)])
    lo = np.where(some, lo, np.where(d[:, -1] < 0, xg[-1], -np.inf))
    hi = np.where(some, hi, np.where(d[:, -1] < 0, np.inf, xg[0]))
    return lo, hi


def two_lines(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Simonsohn's interrupted regression at the empirical minimum moved by the Robin Hood rule:
    p_u = 1 - max two-sided p of the two slopes when they have opposite signs (U), else 0."""
    S, K, n = y.shape
    xx, m = np.repeat(x, n), y.mean(axis=2)
    first, last = 1, K - 3  # each line needs two budgets; the break budget ends the first line

    def fit(c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        p, z1, z2 = np.ones(S), np.zeros(S), np.zeros(S)
        for cc in np.unique(c):
            rows, high = c == cc, xx > x[cc]
            X = np.stack(
                [np.ones_like(xx), np.where(high, 0, xx - x[cc]), np.where(high, xx - x[cc], 0), high], 1
            )
            B, Vi, s2, df = _ols(y[rows].reshape(rows.sum(), -1), X.astype(float))
            t1, t2 = B[:, 1] / np.sqrt(s2 * Vi[1, 1]), B[:, 2] / np.sqrt(s2 * Vi[2, 2])
            pp = 2 * stats.t.sf(np.maximum(np.abs(t1), 0), df), 2 * stats.t.sf(np.abs(t2), df)
            p[rows] = np.where((t1 < 0) & (t2 > 0), np.maximum(*pp), 1.0)
            z1[rows], z2[rows] = np.abs(t1), np.abs(t2)
        return p, z1, z2

    p, z1, z2 = fit(np.clip(m.argmin(axis=1), first, last))
    if last > first:  # Robin Hood: within 1 SE of the minimum, give the weaker line more budgets
        se = np.sqrt(((y - m[:, :, None]) ** 2).sum(axis=(1, 2)) / (K * (n - 1)) / n)
        flat = m <= m.min(axis=1, keepdims=True) + se[:, None]
        q = z2 / np.maximum(z1 + z2, 1e-12)
        c = np.array([np.where(f)[0][min(int(qq * f.sum()), f.sum() - 1)] for f, qq in zip(flat, q)])
        p = fit(np.clip(c, first, last))[0]
    return 1 - p


# --- report -------------------------------------------------------------------------------------


def summarise(p_u_u, lo, hi, xstar, p_u_null, x) -> dict:
    """Coverage, false U, power, bounded share and median width (doublings) of one method."""
    covered = (lo <= xstar) & (xstar <= hi)
    out = dict(cov=covered.mean(), fu=np.mean(p_u_null > 0.95), power=np.mean(p_u_u > 0.95))
    if lo is not None:
        out["bounded"] = np.mean(np.isfinite(lo) & np.isfinite(hi))
        out["width"] = np.median(np.clip(hi, x[0], x[-1]) - np.clip(lo, x[0], x[-1]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweeps", type=int, default=1000, help="U sweeps and monotone sweeps per setting")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--curvature-rate", type=float, default=1.0)
    ap.add_argument("--hetero", action="store_true", help="noise sd grows 4x from 1M to 8M tokens")
    ap.add_argument("--baselines", action="store_true", help="also run the alternative methods")
    args = ap.parse_args()
    t0, S = time.perf_counter(), args.sweeps
    names = ["chosen"] + (["r=0", "lind-mehlum", "two-lines"] if args.baselines else [])
    rows, by_kind = {name: [] for name in names}, np.zeros(len(NULL_KINDS))
    noise = ", heteroscedastic noise" if args.hetero else ""
    print(
        f"u_shape coverage bench: {S} U + {S} monotone sweeps per setting, level {LEVEL}, "
        f"seed {args.seed}, curvature_rate {args.curvature_rate}{noise}"
    )
    print("grid  units     sd | cover falseU power bound width")
    for i, (grid, (x, n)) in enumerate(GRIDS.items()):
        for j, paired in enumerate((False, True)):
            for k, sd in enumerate(NOISE):
                rng = np.random.default_rng([args.seed, i, j, k])
                mu, xstar = u_curves(rng, S, x)
                mu0, kind = monotone_curves(rng, S, x)
                y, y0 = (noisy(rng, m, n, sd, paired, args.hetero, x) for m in (mu, mu0))
                p_u, lo, hi = fit_all(y, x, paired, args.curvature_rate)
                p_0 = fit_all(y0, x, paired, args.curvature_rate)[0]
                by_kind += np.bincount(kind, weights=p_0 > 0.95, minlength=len(NULL_KINDS))
                res = {"chosen": summarise(p_u, lo, hi, xstar, p_0, x)}
                if args.baselines:
                    p_r0, lo_r0, hi_r0 = fit_all(y, x, paired, 0.0)
                    res["r=0"] = summarise(p_r0, lo_r0, hi_r0, xstar, fit_all(y0, x, paired, 0.0)[0], x)
                    res["lind-mehlum"] = summarise(*lind_mehlum(y, x), xstar, lind_mehlum(y0, x)[0], x)
                    nan = np.full(S, np.nan)
                    res["two-lines"] = summarise(two_lines(y, x), nan, nan, xstar, two_lines(y0, x), x)
                for name in names:
                    rows[name].append(res[name])
                c = res["chosen"]
                flags = {
                    "COVER<0.90": c["cov"] < 0.90,
                    "COVER>0.98": c["cov"] > 0.98,
                    "FALSE_U>0.05": c["fu"] > 0.05,
                }
                flag = " ".join(f for f, bad in flags.items() if bad)
                design = "paired" if paired else "indep"
                print(
                    f"{grid:5} {design:6} {sd:5.3f} | {c['cov']:5.3f} {c['fu']:6.3f} {c['power']:5.3f} "
                    f"{c['bounded']:5.2f} {c['width']:5.2f} {flag}",
                    flush=True,
                )
    if args.baselines:
        print("\nmethod        cover (min-max)       falseU (max)   power (min-max)")
        for name in names:
            r = {key: np.array([row[key] for row in rows[name]]) for key in ("cov", "fu", "power")}
            cov = (
                f"{r['cov'].mean():.3f} ({r['cov'].min():.2f}-{r['cov'].max():.2f})"
                if name != "two-lines"
                else "-"
            )
            power = f"{r['power'].mean():.3f} ({r['power'].min():.2f}-{r['power'].max():.2f})"
            print(f"{name:12}  {cov:20}  {r['fu'].mean():.3f} ({r['fu'].max():.3f})  {power}")
    chosen = {key: np.array([row[key] for row in rows["chosen"]]) for key in ("cov", "fu", "power", "width")}
    n_set = len(chosen["cov"])
    rate = by_kind / (n_set * S / len(NULL_KINDS))
    print("\nfalse U by monotone kind: " + ", ".join(f"{kd} {v:.3f}" for kd, v in zip(NULL_KINDS, rate)))
    for sd in NOISE:
        sel = np.tile(np.array(NOISE) == sd, n_set // len(NOISE))
        c = {key: v[sel] for key, v in chosen.items()}
        print(
            f"sd {sd:5.3f}: coverage {c['cov'].mean():.3f}, false U {c['fu'].mean():.3f}, "
            f"power {c['power'].mean():.3f}, median width {np.median(c['width']):.2f}"
        )
    miss = [f"cover {c:.3f}" for c in chosen["cov"] if not 0.90 <= c <= 0.98] + [
        f"false U {f:.3f}" for f in chosen["fu"] if f > 0.05
    ]
    print(f"settings outside target: {len(miss)} of {n_set} ({', '.join(miss) if miss else 'none'})")
    print(f"wall time {time.perf_counter() - t0:.0f} s")
    print(f"coverage {chosen['cov'].mean():.3f} false_u {chosen['fu'].mean():.3f}")


if __name__ == "__main__":
    main()
