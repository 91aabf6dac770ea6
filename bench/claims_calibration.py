"""Calibration of every claim statistic (pipeline/analysis/evidence.py) on simulated sweeps with the
studies' own noise structure: does each "95%" interval cover its truth 95% of the time, and how often
does a rule say "supported" when the claim is false?

A sweep is a cube y[p, s, k] on the analysed scale (log perplexity) of pre-training seed p, inner
seed s (perturbation or fine-tuning) and budget k, x = log2(tokens / smallest):

    y = f(x_k) + a_p + b_p (x_k - mean x) + e_pk h(x_k) + u_psk

with a seed offset a_p (sd SEED_SD), a random slope b_p (sd TAU, trend scenarios only), a run effect
e_pk (sd the study's run-level sd; each budget of a seed is its own run) and inner-seed noise u_psk
(sd INNER_SD). h = 1, or rising linearly in x to 3 at the largest budget ("sd x3"). The statistics
see the cube exactly as a claim does: each run's inner seeds averaged, then run_slope / u_runs /
mean_difference / rank_correlation, the very functions the claims call.

Designs: the pilot evidence study (3 pre-training seeds x 7 budgets sqrt(2) apart, 3 inner seeds),
the registered evidence study (7 seeds x 4 budgets 2x apart, 1 fine-tuning seed:
docs/evidence-design.md), and the default study (1 seed x 4 budgets 2x apart: a trend only; a U is
not computed there).

Printed per scenario: the coverage of the 95% interval of the estimand (a trend: the least-squares
slope of the mean curve over the grid plus the mean random slope; a U's minimum: x* of the smooth
truth, among sweeps where the interval is bounded: the interval procedure's own coverage), the rate
of a false "supported" (null scenarios) or the power (effects); for a U truth also the coverage among
the intervals the claims print (P(U) clears its level and the interval is bounded: coverage after
selection by the U test, which falls where the test has little power, since the sweeps that pass are
those whose noise steepened the rise) and the rate of a false "contradicted" (evidence.u_verdict, the
claims' whole rule), and the false coverage-statement rate (Benjamini & Yekutieli 2005: per sweep,
printed and missing; what the claims' printed intervals control). In the sd x3 U scenarios, also over
every supported sweep: the coverage and bounded share of the registered interval and of the one
given that the test passed (`u_shape(..., selected_at=P_U)`: the selective t), an open side counted
as it is. A claim's family (one
low-powered U among flat settings, each tested at the Bonferroni level) shows that rate with the
selected intervals at `evidence.fcr_level` and at 95%. Then the minimum interval's coverage range
at other smoothness bounds r (`--curvature-rates`; registered r = 1). The last lines read
`selective_coverage_min <s> selective_bounded_max <b> registered_bounded_min <r>`,
`printed_coverage_min <x> printed_coverage_max <y> fcr_max <f>` and
`coverage_min <x> coverage_max <y> false_max <z>` over every coverage, every null scenario's false
"supported" and every U truth's false "contradicted".

The run-level noise defaults to the pilot evidence study's reference tables (docs/reference/pilot):
the pooled residual sd of its runs' log perplexity about seed + budget effects, printed first.

Usage: .venv/bin/python bench/claims_calibration.py [--sweeps 2000] [--u-sweeps 500] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.analysis.evidence import (
    CONTRADICTED,
    LEVEL,
    P_U,
    SUPPORTED,
    fcr_level,
    mean_difference,
    rank_correlation,
    run_slope,
    t_interval,
    u_runs,
    u_verdict,
)
from pipeline.analysis.seeds import run_means

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "pilot" / "metrics.parquet"
SEED_SD, TAU, INNER_SD = 0.05, 0.02, 0.02


@dataclass(frozen=True)
class Design:
    seeds: int
    budgets: np.ndarray  # x = log2(tokens / smallest)
    inner: int

    @property
    def tokens(self) -> np.ndarray:
        return 5e5 * 2.0**self.budgets


DESIGNS = {
    "pilot 3x7": Design(3, np.arange(7) / 2, 3),
    "evidence 7x4": Design(7, np.arange(4.0), 1),
    "default 1x4": Design(1, np.arange(4.0), 3),
}


def reference_run_sd(path: Path = REFERENCE) -> float:
    """The pilot's pooled run-level residual sd of log pre-training perplexity after
    fine-tuning and perturbation (seed + budget effects removed), or 0.03 without its tables."""
    if not path.is_file():
        return 0.03
    import pandas as pd

    m = pd.read_parquet(path)
    m = m[(m["eval_data"] == "pretrain") & (m["metric"] == "ppl") & (m["modification"] != "none")]
    keys = ["modification", "task", "learning_rate", "gamma"]
    ss, df = 0.0, 0
    for _, g in m.groupby(keys, dropna=False):
        runs = np.log(g.groupby(["pretrain_seed", "budget"])["value"].mean().unstack()).to_numpy()
        if runs.shape[0] < 2 or runs.shape[1] < 3 or not np.isfinite(runs).all():
            continue
        res = runs - runs.mean(0) - runs.mean(1, keepdims=True) + runs.mean()
        ss, df = ss + float((res**2).sum()), df + (runs.shape[0] - 1) * (runs.shape[1] - 1)
    return math.sqrt(ss / df) if df else 0.03


def simulate(
    rng: np.random.Generator, d: Design, f: np.ndarray, run_sd: float, hetero: bool, tau: float, n: int
) -> np.ndarray:
    """n cubes (n, seeds, inner, budgets) of the model in the module docstring."""
    x = d.budgets
    h = 1 + 2 * (x - x[0]) / (x[-1] - x[0]) if hetero else np.ones_like(x)
    P, S, K = d.seeds, d.inner, len(x)
    a = rng.normal(0, SEED_SD, (n, P, 1, 1))
    b = rng.normal(0, tau, (n, P, 1, 1)) * (x - x.mean())
    e = rng.normal(0, run_sd, (n, P, 1, K)) * h
    u = rng.normal(0, INNER_SD, (n, P, S, K))
    return f + a + b + e + u


# --- truths on the grid x ---------------------------------------------------------------------------


def linear(slope: float) -> Callable[[np.ndarray], np.ndarray]:
    return lambda x: slope * x


def saturating(x: np.ndarray) -> np.ndarray:
    """A monotone power law flattening out (the base model's loss)."""
    return 0.5 * 2 ** (-0.7 * x)


def drop_plateau(x: np.ndarray) -> np.ndarray:
    """A steep drop, then flat (fine-tuning curves past their turn, within the noise)."""
    return 0.4 * 2 ** (-2.5 * x)


def piecewise(x: np.ndarray) -> np.ndarray:
    """A tuned-rate curve: falling while the best rate is the larger one, then a step down where the
    tuned rate switches and flat after it (the detector's smoothness bound does not hold)."""
    return np.where(x < 1.5, 0.3 - 0.12 * x, 0.06)


def flat(x: np.ndarray) -> np.ndarray:
    return np.zeros_like(x)


def u_curve(
    where: float, alpha: float = 1.0, beta: float = 1.0, depth: float = 0.1
) -> tuple[Callable[[np.ndarray], np.ndarray], float]:
    """A smooth U in log2 tokens, 2^(-alpha (x - x*)) / alpha + 2^(beta (x - x*)) / beta (the falling
    and rising arms' exponents), with its minimum x* at the share `where` of the grid's range and its
    shorter arm rising `depth` (nats) from the minimum to the grid's edge: (f, where)."""

    def f(x: np.ndarray) -> np.ndarray:
        xs = x[0] + where * (x[-1] - x[0])
        g = 2 ** (-alpha * (x - xs)) / alpha + 2 ** (beta * (x - xs)) / beta - (1 / alpha + 1 / beta)
        return depth * g / min(g[0], g[-1])

    return f, where


U_SHAPES = {  # label: (where, alpha, beta)
    "U, minimum low, slow rise": (0.25, 1.5, 0.7),
    "U, minimum mid": (0.5, 1.0, 1.0),
    "U, minimum mid, steep": (0.5, 2.0, 2.0),
    "U, minimum high, fast rise": (0.75, 0.7, 1.5),
}


def ls_slope(x: np.ndarray, f: np.ndarray) -> float:
    xc = x - x.mean()
    return float(xc @ f / (xc @ xc))


# --- the statistics' calibration --------------------------------------------------------------------


MIN_PRINTED = 20  # a minimum interval's coverage is reported from this many printed intervals


def row(stat: str, scenario: str, coverage: float, supported: float, null: bool) -> dict:
    """One scenario's figures: coverage, and the rate of "supported" as a false rate (a null truth)
    or as power (an effect)."""
    return dict(stat=stat, scenario=scenario, coverage=coverage,
                false=supported if null else math.nan, power=math.nan if null else supported)  # fmt: skip


def trend_row(rng, d: Design, name: str, f, run_sd: float, hetero: bool, tau: float, n: int) -> dict:
    """Coverage of the run-level slope's t-interval, and (for a zero truth) its false-supported rate
    for a claimed rise."""
    x = d.budgets
    fx = f(x)
    truth = ls_slope(x, fx)
    cubes = simulate(rng, d, fx, run_sd, hetero, tau, n)
    covered = supported = 0
    for cube in cubes:
        point, se, df, _ = run_slope(x, run_means(cube))
        low, high = t_interval(point, se, df)
        covered += low <= truth <= high
        supported += low > 0
    return row("trend slope", name, covered / n, supported / n, null=truth <= 0)


def paired_row(rng, units: int, delta: float, run_sd: float, n: int) -> dict:
    """A paired difference over `units` runs, each the mean of 3 inner-seed differences plus a run effect."""
    diffs = delta + rng.normal(0, run_sd, (n, units)) + rng.normal(0, INNER_SD, (n, units, 3)).mean(axis=2)
    covered = supported = 0
    for dd in diffs:
        e = mean_difference(dd, "", +1, "", True)
        covered += e.low <= delta <= e.high
        supported += e.verdict == SUPPORTED
    return row(
        "paired difference", f"{units} runs, δ = {delta:g}", covered / n, supported / n, null=delta == 0
    )


def rank_row(rng, pairs: int, rho: float, n: int) -> dict:
    """Spearman's ρ over `pairs` runs from a bivariate normal with correlation rho; the estimand is the
    population Spearman correlation (6 / pi) asin(rho / 2)."""
    truth = 6 / math.pi * math.asin(rho / 2)
    cov = [[1, rho], [rho, 1]]
    covered = supported = 0
    for _ in range(n):
        xy = rng.multivariate_normal([0, 0], cov, pairs)
        e = rank_correlation(xy[:, 0], xy[:, 1], "", +1, "", True)
        covered += e.low <= truth <= e.high
        supported += e.verdict == SUPPORTED
    return row("rank correlation", f"{pairs} runs, ρ = {rho:g}", covered / n, supported / n, null=rho == 0)


def u_row(
    rng,
    d: Design,
    name: str,
    f,
    xstar: float | None,
    run_sd: float,
    hetero: bool,
    n: int,
    r: float = 1.0,
    selective: bool = False,
) -> dict:
    """A U claim's registered verdict on the runs (evidence.u_verdict): for a truth without an interior
    minimum, the rate of a false "supported"; for a U, the power, the rate of a false "contradicted",
    the coverage of the minimum's interval over every sweep where it is bounded (the interval
    procedure's own coverage) and, apart, where the claims print it (supported and bounded: coverage
    after selection by the U test). `selective`: also, over the supported sweeps, the coverage of the
    registered interval and of the selective one (conditioned on the test: inflection.py's
    `selected_at`), each counting an open side as it is, and the share of each that is bounded."""
    x = d.budgets
    cubes = simulate(rng, d, f(x), run_sd, hetero, TAU, n)
    found = contradicted = 0
    bounded, printed = [0, 0], [0, 0]  # [intervals, covering ones]
    given = np.zeros((2, 2))  # supported sweeps: [registered, selective] x [covering, bounded]
    truth = None if xstar is None else float(d.tokens[0] * 2 ** (xstar * (x[-1] - x[0])))
    for cube in cubes:
        runs = run_means(cube)
        fit, verdict = u_verdict(d.tokens, runs, P_U, curvature_rate=r)
        contradicted += verdict == CONTRADICTED
        found += verdict == SUPPORTED
        if truth is not None and selective and verdict == SUPPORTED:
            conditioned = u_runs(d.tokens, runs, curvature_rate=r, selected_at=P_U)
            for i, ft in enumerate((fit, conditioned)):
                given[i] += (ft.min_low <= truth <= ft.min_high, ft.bounded)
        if truth is None or not fit.bounded:
            continue
        hit = fit.min_low <= truth <= fit.min_high
        bounded[0], bounded[1] = bounded[0] + 1, bounded[1] + hit
        if verdict == SUPPORTED:
            printed[0], printed[1] = printed[0] + 1, printed[1] + hit
    coverage = bounded[1] / bounded[0] if bounded[0] >= MIN_PRINTED else math.nan
    given = given / found if selective and found >= MIN_PRINTED else np.full((2, 2), math.nan)
    extra = {
        "printed": printed[0],
        "fcr": (printed[0] - printed[1]) / n if xstar is not None else math.nan,
        "printed_coverage": printed[1] / printed[0] if printed[0] >= MIN_PRINTED else math.nan,
        "contradicted": contradicted / n if xstar is not None else math.nan,
        "given": given,
    }
    return row("U claim", name, coverage, found / n, null=xstar is None) | extra


def family_row(rng, d: Design, tag: str, label: str, m: int, run_sd: float, hetero: bool, n: int) -> dict:
    """A claim's family as the claims run it: one U setting (`label` of U_SHAPES) and m - 1 flat ones,
    each tested at the Bonferroni level 1 - (1 - P_U) / m; the R selected print their minimum's
    interval at fcr_level(R, m) (evidence.ushapes). The false coverage-statement rate (Benjamini &
    Yekutieli 2005) is the mean over sweeps of the share of printed intervals that miss (a flat
    setting's printed minimum always misses: it has none); beside it, the same with 95% intervals."""
    f, where = u_curve(*U_SHAPES[label])
    x, level = d.budgets, 1 - (1 - P_U) / m
    truth = float(d.tokens[0] * 2 ** (where * (x[-1] - x[0])))
    u_cubes = simulate(rng, d, f(x), run_sd, hetero, TAU, n)
    flat_cubes = simulate(rng, d, flat(x), run_sd, hetero, TAU, n * (m - 1))
    flat_cubes = flat_cubes.reshape(n, m - 1, *u_cubes.shape[1:])
    shares, shares_95 = [], []
    for u_cube, flats in zip(u_cubes, flat_cubes):
        runs = [run_means(u_cube)] + [run_means(c) for c in flats]
        chosen = [r for r in runs if u_verdict(d.tokens, r, level)[1] == SUPPORTED]
        for out, at in ((shares, fcr_level(len(chosen), m)), (shares_95, LEVEL)):
            fits = [u_runs(d.tokens, r, at) for r in chosen]
            hits = [r is runs[0] and ft.min_low <= truth <= ft.min_high for r, ft in zip(chosen, fits)]
            out.append(1 - sum(hits) / len(chosen) if chosen else 0.0)  # nothing printed: no false one
    figures = dict(fcr=float(np.mean(shares)), fcr_95=float(np.mean(shares_95)))
    return dict(stat="U family", scenario=f"{tag}: {m} settings, one {label}", coverage=math.nan,
                false=math.nan, power=math.nan) | figures  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweeps", type=int, default=2000, help="sweeps per trend / paired / rank scenario")
    ap.add_argument("--u-sweeps", type=int, default=500, help="sweeps per U-detector scenario")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--curvature-rates",
        type=float,
        nargs="*",
        default=[0.5, 0.7],
        help="smoothness bounds r to try for the minimum's interval beside the registered r = 1",
    )
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    run_sd = reference_run_sd()
    print(f"run-level sd {run_sd:.4f} (the pilot's reference tables); inner sd {INNER_SD}, "
          f"seed offset sd {SEED_SD}, random slope sd {TAU}; nominal level {LEVEL}")  # fmt: skip
    t0 = time.perf_counter()
    rows = []
    for dname, d in DESIGNS.items():
        for hetero in (False, True):
            tag = f"{dname}{', sd x3' if hetero else ''}"
            tau = TAU if d.seeds >= 2 else 0.0  # one seed: a random slope is not identifiable
            for name, f in (("flat", flat), ("slope 0.1", linear(0.1)), ("saturating", saturating)):
                rows.append(trend_row(rng, d, f"{tag}: {name}", f, run_sd, hetero, tau, args.sweeps))
    for units in (3, 5, 8):
        for delta in (0.0, 0.05):
            rows.append(paired_row(rng, units, delta, run_sd, args.sweeps))
    for rho in (0.0, 0.5):
        rows.append(rank_row(rng, 21, rho, args.sweeps // 2))
    nulls = (
        ("flat", flat),
        ("drop-plateau", drop_plateau),
        ("saturating", saturating),
        ("piecewise tuned", piecewise),
    )
    for dname in ("pilot 3x7", "evidence 7x4"):
        d = DESIGNS[dname]
        for hetero in (False, True):
            tag = f"{dname}{', sd x3' if hetero else ''}"
            for name, f in nulls:
                rows.append(u_row(rng, d, f"{tag}: {name}", f, None, run_sd, hetero, args.u_sweeps))
            for label, shape in U_SHAPES.items():
                f, xs = u_curve(*shape)
                name = f"{tag}: {label}"
                rows.append(u_row(rng, d, name, f, xs, run_sd, hetero, args.u_sweeps, selective=hetero))
        for name, f in nulls[:2]:  # low noise: the least favourable drop-then-flat curve is sharpest
            rows.append(u_row(rng, d, f"{dname}, run sd 0.01: {name}", f, None, 0.01, False, args.u_sweeps))
    for dname in ("pilot 3x7", "evidence 7x4"):  # the least powered U: where selection bites hardest
        low_power = "U, minimum high, fast rise"
        tag = f"{dname}, sd x3"
        rows.append(family_row(rng, DESIGNS[dname], tag, low_power, 4, run_sd, True, args.u_sweeps))
    print(f"{'statistic':<18} {'scenario':<48} {'coverage':>8} {'false':>6} {'power':>6}")
    for r in rows:
        cells = [("–" if not math.isfinite(r[k]) else f"{r[k]:.3f}") for k in ("coverage", "false", "power")]
        extra = ""
        if "printed" in r and r["power"] == r["power"]:
            pc = r["printed_coverage"]
            pc = f"{pc:.3f}" if math.isfinite(pc) else "–"
            extra = (
                f"  (printed in {r['printed']}, covering {pc}, FCR {r['fcr']:.3f}; "
                f"false contradicted {r['contradicted']:.3f})"
            )
        if np.isfinite(r.get("given", np.nan)).all():
            (reg_cov, reg_b), (sel_cov, sel_b) = r["given"]
            extra += (
                f"\n{'':<18} given supported: registered covers {reg_cov:.3f} (bounded {reg_b:.2f}), "
                f"selective covers {sel_cov:.3f} (bounded {sel_b:.2f})"
            )
        if r["stat"] == "U family":
            extra = f"  (FCR {r['fcr']:.3f} at fcr_level; {r['fcr_95']:.3f} with 95% intervals)"
        print(f"{r['stat']:<18} {r['scenario']:<48} {cells[0]:>8} {cells[1]:>6} {cells[2]:>6}{extra}")
    for r in args.curvature_rates:  # would a tighter smoothness bound bring coverage to 0.90-0.98?
        covs = [
            u_row(rng, DESIGNS[dname], label, *u_curve(*shape), run_sd, hetero, args.u_sweeps, r)["coverage"]
            for dname in ("pilot 3x7", "evidence 7x4")
            for hetero in (False, True)
            for label, shape in U_SHAPES.items()
        ]
        covs = [c for c in covs if math.isfinite(c)]
        print(f"minimum interval, r = {r:g} (registered 1): coverage {min(covs):.3f}-{max(covs):.3f}")
    cov = [r["coverage"] for r in rows if math.isfinite(r["coverage"])]
    false = [r["false"] for r in rows if math.isfinite(r["false"])]
    false += [r["contradicted"] for r in rows if math.isfinite(r.get("contradicted", math.nan))]
    printed = [r["printed_coverage"] for r in rows if math.isfinite(r.get("printed_coverage", math.nan))]
    print(f"{len(rows)} scenarios in {time.perf_counter() - t0:.0f} s")
    fcr = [r["fcr"] for r in rows if math.isfinite(r.get("fcr", math.nan))]
    given = np.array([r["given"] for r in rows if np.isfinite(r.get("given", np.nan)).all()])
    print(f"selective_coverage_min {given[:, 1, 0].min():.3f} "
          f"selective_bounded_max {given[:, 1, 1].max():.2f} "
          f"registered_bounded_min {given[:, 0, 1].min():.2f}")  # fmt: skip
    print(f"printed_coverage_min {min(printed):.3f} printed_coverage_max {max(printed):.3f} "
          f"fcr_max {max(fcr):.3f}")  # fmt: skip
    print(f"coverage_min {min(cov):.3f} coverage_max {max(cov):.3f} false_max {max(false):.3f}")


if __name__ == "__main__":
    main()
