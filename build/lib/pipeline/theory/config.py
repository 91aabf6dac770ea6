"""The `theory` config section: checked, with its spectra built."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from pipeline.theory.spectra import make_spectrum

log = logging.getLogger(__name__)


def _require(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def validate_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Check the `theory` config section and build its spectra; errors name the offending key.

    Only problems that would make the numbers meaningless are errors (d < 2, a spectrum that is not
    positive and strictly decreasing, γ < 0, λ < 0, …). A learning rate outside Assumption A.8 is
    allowed (divergence is detected and recorded) but logged.
    """
    d = cfg.get("d")
    _require(
        isinstance(d, int) and not isinstance(d, bool) and d >= 2,
        f"theory.d: need an integer >= 2, got {d!r}",
    )
    tau, dt, max_time = float(cfg["tau"]), float(cfg["dt"]), float(cfg["max_time"])
    _require(tau > 0, f"theory.tau: need tau > 0 (small init e^-tau), got {tau}")
    _require(
        dt > 0 and max_time > dt,
        f"theory.dt / theory.max_time: need 0 < dt < max_time, got dt = {dt}, max_time = {max_time}",
    )
    seeds = list(cfg["seeds"])
    ok = len(seeds) > 0 and all(isinstance(s, int) and s >= 0 for s in seeds)
    _require(ok, f"theory.seeds: need a non-empty list of integers >= 0, got {seeds}")
    _require(len(set(seeds)) == len(seeds), f"theory.seeds: duplicates in {seeds}")
    spectra_cfg = cfg["spectra"]
    _require(len(spectra_cfg) > 0, "theory.spectra: need at least one pre-training spectrum")
    spectra = {name: make_spectrum(spec, d, f"theory.spectra.{name}") for name, spec in spectra_cfg.items()}
    top = max(float(s[0]) for s in spectra.values())
    # The flow's fastest rate is ~8σ₁ (Hessian at the learned top feature); RK4 needs dt·8σ₁ well inside its
    # stability region (2.8) to be accurate, the check of the logistic solution shows ~1e-4 at dt·8σ₁ = 0.8.
    _require(
        dt * 8 * top <= 1.0,
        f"theory.dt: dt = {dt} is too large for RK4 on a spectrum with sigma_1 = {top:g}; "
        f"need dt <= {1 / (8 * top):.3g}",
    )

    pert = cfg["perturbation"]
    gammas = np.asarray(pert["gammas"], dtype=np.float64)
    _require(gammas.ndim == 1 and gammas.size > 0, "theory.perturbation.gammas: need a non-empty list")
    ok = bool(np.all(gammas >= 0)) and bool(np.all(np.isfinite(gammas)))
    _require(ok, f"theory.perturbation.gammas: gamma must be finite and >= 0, got {gammas.tolist()}")
    mc = int(pert["mc_samples"])
    _require(mc >= 2, f"theory.perturbation.mc_samples: need >= 2, got {mc}")

    ft = cfg["finetune"]
    lambdas = np.asarray(ft["lambdas"], dtype=np.float64)
    _require(lambdas.ndim == 1 and lambdas.size > 0, "theory.finetune.lambdas: need a non-empty list")
    ok = bool(np.all(lambdas >= 0)) and bool(np.all(np.isfinite(lambdas)))
    _require(ok, f"theory.finetune.lambdas: lambda must be finite and >= 0, got {lambdas.tolist()}")
    _require(
        bool(np.all(np.diff(lambdas) > 0)),
        f"theory.finetune.lambdas: need a strictly increasing list, got {lambdas.tolist()}",
    )
    eta, steps = float(ft["learning_rate"]), int(ft["steps"])
    _require(
        eta > 0 and math.isfinite(eta), f"theory.finetune.learning_rate: need a finite value > 0, got {eta}"
    )
    _require(steps >= 1, f"theory.finetune.steps: need >= 1, got {steps}")
    m = ft.get("batch_size")
    ok = m is None or (isinstance(m, int) and not isinstance(m, bool) and m >= 1)
    _require(ok, f"theory.finetune.batch_size: need an integer >= 1 or null (population gradient), got {m!r}")
    alpha = float(ft["alpha"])
    _require(alpha > 0, f"theory.finetune.alpha: need alpha > 0, got {alpha}")
    tasks = {}
    for name, task in ft["tasks"].items():
        pre = task["pretrain"]
        _require(
            pre in spectra,
            f"theory.finetune.tasks.{name}.pretrain: {pre!r} is not one of theory.spectra {list(spectra)}",
        )
        tasks[name] = {
            "pretrain": pre,
            "sigma_ft": make_spectrum(task["spectrum"], d, f"theory.finetune.tasks.{name}.spectrum"),
        }
        gamma_bound = max(float(spectra[pre][0]), float(tasks[name]["sigma_ft"][0]))  # Γ of eq. (12)
        a8 = 4 * eta * (float(lambdas.max()) + 2) * gamma_bound
        if a8 >= 1:
            log.warning(
                "theory.finetune: 4*eta*(lambda+2)*Gamma = %.3g >= 1 for task %s: Assumption A.8 fails, "
                "GD may diverge (detected and recorded)",
                a8,
                name,
            )
    return {
        "d": d,
        "tau": tau,
        "dt": dt,
        "max_time": max_time,
        "seeds": seeds,
        "spectra": spectra,
        "gammas": gammas,
        "mc_samples": mc,
        "lambdas": lambdas,
        "eta": eta,
        "steps": steps,
        "batch_size": m,
        "alpha": alpha,
        "tasks": tasks,
    }
