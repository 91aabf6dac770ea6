"""The `theory.transfer` config section's start-up check: plain Python (no numpy).

config/schema/theory.yaml owns each key's type and range (θ in [0, π/2], n >= 3, d >= 1, depth >= 1,
the frozen variant's depth >= 2, σ, λ >= 0, ...). `check_transfer` adds only what a schema cannot
say: a grid point at n = d (or n = d ± 1), where the scratch risk's exact expectation is infinite;
n >= d where the linear-teachers theorems need n < d; grids that must increase; the reference
noise missing from the noise grid; the halving's norm missing from the norms; a covariance whose
top eigenspace is not smaller than d or whose levels do not decrease; an overtraining task that
theory.finetune.tasks does not define, or m >= theory.d. Every message starts with the key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# what the transfer stage reads from the rest of the `theory` section: the pre-training trajectory
# of the main paper's Section 4 (theory.d, tau, dt, max_time, seeds, spectra) and the tasks it fine-tunes on
THEORY_KEYS = ("d", "tau", "dt", "max_time", "seeds", "spectra")
FINETUNE_KEYS = ("tasks", "learning_rate", "steps")


def _require(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def _increasing(values: Sequence, key: str) -> None:
    _require(
        list(values) == sorted(set(values)), f"{key}: need a strictly increasing list, got {list(values)}"
    )


def _sizes(ns: Sequence[int], d: int, key: str, below_d: bool) -> None:
    """Sample sizes away from n = d (and below it where the theorems need n < d), increasing."""
    for n in ns:
        _require(
            abs(n - d) >= 2,
            f"{key}: grid point n = {n} with d = {d}: the scratch risk is infinite at n = d and its exact "
            "expectation at n = d +- 1 (E tr (X^T X)^+ = min(n, d)/(|n - d| - 1)); need |n - d| >= 2",
        )
        if below_d:
            _require(n < d, f"{key}: the linear-teachers theorems need n < d, got n = {n} with d = {d}")
    _increasing(ns, key)


def check_transfer(cfg: Mapping[str, Any], theory: Mapping[str, Any]) -> None:
    """Check `theory.transfer` (cfg) against itself and the rest of the `theory` section."""
    k = "theory.transfer"
    faf, kf = cfg["features_are_fate"], f"{k}.features_are_fate"
    _sizes(faf["n"], faf["d"], f"{kf}.n", below_d=False)
    _require(
        faf["reference_sigma"] in faf["sigma"],
        f"{kf}.reference_sigma: {faf['reference_sigma']:g} is not one of {kf}.sigma {faf['sigma']}",
    )
    _sizes(faf["ridge"]["n"], faf["d"], f"{kf}.ridge.n", below_d=False)
    _increasing(faf["ridge"]["lambdas"], f"{kf}.ridge.lambdas")
    _sizes(faf["deep"]["n"], faf["d"], f"{kf}.deep.n", below_d=True)

    lt, kl = cfg["linear_teachers"], f"{k}.linear_teachers"
    al, ka = lt["alignment"], f"{kl}.alignment"
    _require(al["top"] < al["d"], f"{ka}.top: need 1 <= top < d = {al['d']}, got {al['top']}")
    hi, lo = al["eigenvalues"]
    _require(hi > lo, f"{ka}.eigenvalues: need [top, bottom] with top > bottom, got {al['eigenvalues']}")
    _sizes(al["n"], al["d"], f"{ka}.n", below_d=True)
    dp, kp = lt["depth"], f"{kl}.depth"
    _sizes([dp["n"]], dp["d"], f"{kp}.n", below_d=True)
    _increasing(dp["depths"], f"{kp}.depths")
    _require(
        any(L >= 2 for L in dp["depths"]), f"{kp}.depths: need a depth >= 2 (Thm 5.2), got {dp['depths']}"
    )
    h = dp["halving"]["target_norm"]
    _require(h in dp["target_norms"], f"{kp}.halving.target_norm: {h:g} is not one of {kp}.target_norms")
    _sizes(lt["frozen"]["n"], lt["frozen"]["d"], f"{kl}.frozen.n", below_d=True)

    ot, ko = cfg["overtraining"], f"{k}.overtraining"
    tasks = theory["finetune"]["tasks"]
    _require(
        ot["task"] in tasks, f"{ko}.task: {ot['task']!r} is not one of theory.finetune.tasks {list(tasks)}"
    )
    _require(
        ot["m"] < theory["d"], f"{ko}.m: need m < theory.d = {theory['d']} fine-tuning samples, got {ot['m']}"
    )


def transfer_inputs(theory: Mapping[str, Any]) -> dict[str, Any]:
    """What the transfer rule reads (its params: a change anywhere else in `theory` reruns nothing)."""
    return {
        **{key: theory[key] for key in THEORY_KEYS},
        "finetune": {key: theory["finetune"][key] for key in FINETUNE_KEYS},
        "transfer": theory["transfer"],
    }
