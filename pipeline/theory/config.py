"""The `theory` config section: checked, with its spectra built.

config/schema/theory.yaml checks each key's type and range at start-up (d >= 2, seeds, γ, λ >= 0,
the spectrum kinds and their ratio / exponent, ...); `check_config` adds only what a schema cannot
say: finiteness (YAML's .inf passes any bound), orderings, cross-key bounds and the spectra's values.
It is plain Python (no numpy), so the workflow runs it at start-up (pipeline/workflow/config.py) and
a bad key stops the run before any job, with the message the theory job would give;
`validate_config` turns its values into the arrays the stage runs on.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from typing import Any

from pipeline.theory.transfer.config import check_transfer

log = logging.getLogger(__name__)

SPECTRUM_KINDS = ("geometric", "power", "values")


def _require(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def _finite(value: Any, key: str, what: str = "a finite value > 0") -> float:
    """A finite number (the schema checks its sign; the message says the whole requirement)."""
    x = float(value)
    _require(math.isfinite(x), f"{key}: need {what}, got {x}")
    return x


def _finite_list(values: Any, key: str, symbol: str) -> list[float]:
    """A list of finite numbers (γ, λ; the schema checks them >= 0)."""
    out = [float(v) for v in values]
    _require(all(math.isfinite(v) for v in out), f"{key}: {symbol} must be finite and >= 0, got {out}")
    return out


def check_spectrum(sigma: Iterable[float], name: str = "spectrum") -> list[float]:
    """Singular values must be finite, > 0 and strictly decreasing (the theorems assume it)."""
    s = [float(x) for x in sigma]
    _require(len(s) >= 2, f"{name}: need a spectrum with d >= 2 values, got {len(s)}")
    _require(all(math.isfinite(x) for x in s), f"{name}: spectrum has non-finite values {s}")
    _require(all(x > 0 for x in s), f"{name}: singular values must be > 0, got {s}")
    decreasing = all(a > b for a, b in zip(s, s[1:]))
    _require(decreasing, f"{name}: singular values must be strictly decreasing, got {s}")
    return s


def spectrum_formula(spec: Mapping[str, Any], i):
    """σ at 0-based index `i` of a geometric or power spec: a float, or a numpy array of indices
    (pipeline/theory/spectra.py: the stage's values come from numpy's powers)."""
    top = float(spec.get("top", 1.0))
    if spec["kind"] == "geometric":
        return top * float(spec["ratio"]) ** i
    return top * (i + 1.0) ** (-float(spec["exponent"]))


def spectrum_values(spec: Mapping[str, Any], d: int, name: str = "spectrum") -> list[float]:
    """σ₁ > … > σ_d from a spec, checked.

    {kind: geometric, top, ratio} | {kind: power, top, exponent} | {kind: values, values}. A ratio
    outside (0, 1) or an exponent <= 0 (the schema's ranges) gives values check_spectrum rejects.
    """
    kind = spec.get("kind")
    if kind in ("geometric", "power"):
        s = [spectrum_formula(spec, float(i)) for i in range(d)]
    elif kind == "values":
        s = [float(v) for v in spec["values"]]
        _require(len(s) == d, f"{name}: {len(s)} values given for d = {d}")
    else:
        raise ValueError(f"{name}: unknown spectrum kind {kind!r}; expected one of {SPECTRUM_KINDS}")
    return check_spectrum(s, name)


def check_config(cfg: Mapping[str, Any], transfer: bool = True) -> dict[str, Any]:
    """Check the `theory` config section; its values (spectra as lists). Errors name the offending key.

    Only problems that would make the numbers meaningless are errors (a spectrum that is not
    positive and strictly decreasing, an infinite γ, …). config/schema/theory.yaml checks each key's
    type and range first; this adds what a schema cannot say (orderings, cross-key bounds,
    finiteness, the spectra's values). transfer: also check theory.transfer (transfer/config.py), as
    start-up does; the theory stage itself does not read that subsection and skips it.
    """
    d = cfg["d"]
    tau = _finite(cfg["tau"], "theory.tau", "a finite tau > 0 (small init e^-tau)")
    dt, max_time = float(cfg["dt"]), float(cfg["max_time"])
    _require(
        0 < dt < max_time < math.inf,
        f"theory.dt / theory.max_time: need 0 < dt < max_time < inf, got dt = {dt}, max_time = {max_time}",
    )
    seeds = list(cfg["seeds"])
    spectra = {
        name: spectrum_values(spec, d, f"theory.spectra.{name}") for name, spec in cfg["spectra"].items()
    }
    top = max(s[0] for s in spectra.values())
    # The flow's fastest rate is ~8σ₁ (Hessian at the learned top feature); RK4 needs dt·8σ₁ well inside its
    # stability region (2.8) to be accurate, the check of the logistic solution shows ~1e-4 at dt·8σ₁ = 0.8.
    _require(
        dt * 8 * top <= 1.0,
        f"theory.dt: dt = {dt} is too large for RK4 on a spectrum with sigma_1 = {top:g}; "
        f"need dt <= {1 / (8 * top):.3g}",
    )

    pert = cfg["perturbation"]
    gammas = _finite_list(pert["gammas"], "theory.perturbation.gammas", "gamma")
    mc = int(pert["mc_samples"])

    ft = cfg["finetune"]
    lambdas = _finite_list(ft["lambdas"], "theory.finetune.lambdas", "lambda")
    _require(
        all(a < b for a, b in zip(lambdas, lambdas[1:])),
        f"theory.finetune.lambdas: need a strictly increasing list, got {lambdas}",
    )
    eta = _finite(ft["learning_rate"], "theory.finetune.learning_rate")
    steps, m = int(ft["steps"]), ft["batch_size"]  # batch_size null: the population gradient
    alpha = _finite(ft["alpha"], "theory.finetune.alpha", "a finite alpha > 0")
    tasks = {}
    for name, task in ft["tasks"].items():
        pre = task["pretrain"]
        _require(
            pre in spectra,
            f"theory.finetune.tasks.{name}.pretrain: {pre!r} is not one of theory.spectra {list(spectra)}",
        )
        sigma_ft = spectrum_values(task["spectrum"], d, f"theory.finetune.tasks.{name}.spectrum")
        tasks[name] = {"pretrain": pre, "sigma_ft": sigma_ft}
    out = {
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
    if transfer:
        check_transfer(cfg["transfer"], cfg)
    return out


def validate_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The checked section (check_config) with float64 arrays for spectra, γ and λ: the stage's input.

    A learning rate outside Assumption A.8 is allowed (divergence is detected and recorded) but logged.
    """
    import numpy as np

    from pipeline.theory.spectra import make_spectrum

    c = check_config(cfg, transfer=False)
    spectra = {
        name: make_spectrum(spec, c["d"], f"theory.spectra.{name}") for name, spec in cfg["spectra"].items()
    }
    tasks = {
        name: {
            "pretrain": task["pretrain"],
            "sigma_ft": make_spectrum(task["spectrum"], c["d"], f"theory.finetune.tasks.{name}.spectrum"),
        }
        for name, task in cfg["finetune"]["tasks"].items()
    }
    for name, t in c["tasks"].items():
        gamma_bound = max(c["spectra"][t["pretrain"]][0], t["sigma_ft"][0])  # Γ of eq. (12)
        a8 = 4 * c["eta"] * (max(c["lambdas"]) + 2) * gamma_bound
        if a8 >= 1:
            log.warning(
                "theory.finetune: 4*eta*(lambda+2)*Gamma = %.3g >= 1 for task %s: Assumption A.8 fails, "
                "GD may diverge (detected and recorded)",
                a8,
                name,
            )
    return {
        **c,
        "spectra": spectra,
        "gammas": np.asarray(c["gammas"], dtype=np.float64),
        "lambdas": np.asarray(c["lambdas"], dtype=np.float64),
        "tasks": tasks,
    }
