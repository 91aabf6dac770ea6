"""The bridge experiment: the pre-training loss after fine-tuning vs pre-training time on the main
paper's Section 4 trajectory, one layer (overtraining.py) vs two layers; table rows."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.theory.finetuning import finetune_closed_form, finetune_gd
from pipeline.theory.pretraining import pretrain_gradient_flow
from pipeline.theory.spectra import make_spectrum, mT
from pipeline.theory.stage import singular_vectors
from pipeline.theory.transfer.overtraining import (
    converged_one_layer_loss,
    converged_one_layer_samples,
    converged_two_layer,
    population_one_layer_loss,
)
from pipeline.theory.transfer.runs import BRIDGE, cf_rows, rng, sim_rows
from pipeline.theory.transfer.table import block

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

MIXTURE = "(1 - m/d) L_pre + (m/d) |A_ft - A_pre|^2"
K_STEPS = "|q(theta0 - A_pre) + (1 - q)(A_ft - A_pre)|^2, q = (1 - 2 eta)^K"


def overtraining(
    theory: Mapping[str, Any], c: Mapping[str, Any], gd: Mapping[str, Any], seed: int
) -> list[pd.DataFrame]:
    """Pre-train the two-layer network of Section 4 (theory.d, tau, dt, seeds and the task's spectra: the
    same code as rule theory), then fine-tune from θ(t): one layer to convergence on m < d samples (exact
    mixture along the whole trajectory, simulated at t_n), two layers on the same samples to convergence,
    and both with K population-gradient steps (the main paper's fine-tuning; two layers: GD and Lemma A.7)."""
    # theory's own keys were checked at start-up (pipeline/theory/config.py); make_spectrum re-checks spectra
    d, seeds, dt = int(theory["d"]), list(theory["seeds"]), float(theory["dt"])
    task = theory["finetune"]["tasks"][c["task"]]
    s_pre = make_spectrum(theory["spectra"][task["pretrain"]], d, f"theory.spectra.{task['pretrain']}")
    s_ft = make_spectrum(task["spectrum"], d, f"theory.finetune.tasks.{c['task']}.spectrum")
    eta, K = float(theory["finetune"]["learning_rate"]), int(theory["finetune"]["steps"])
    U, V = map(np.stack, zip(*(singular_vectors(d, s) for s in seeds)))
    A_pre, A_ft = (U * s_pre) @ mT(V), (U * s_ft) @ mT(V)  # (seeds, d, d)
    t0 = time.perf_counter()
    res = pretrain_gradient_flow(A_pre, d, float(theory["tau"]), dt, float(theory["max_time"]))
    log.info(
        "transfer: pre-training trajectory (%d seeds, d = %d) in %.1fs",
        len(seeds),
        d,
        time.perf_counter() - t0,
    )
    theta_n = res.W1 @ res.W2  # (seeds, N, d, d): θ(t_n)
    dist2 = np.sum((A_ft - A_pre) ** 2, axis=(-2, -1))
    loss_n = np.sum((theta_n - A_pre[:, None]) ** 2, axis=(-2, -1))
    steps_, S1, S2 = res.snapshots  # the whole trajectory, on a log-spaced subset of its snapshots
    keep = np.unique(np.geomspace(1, len(steps_) - 1, 160).astype(int))
    theta_t = S1[keep] @ S2[keep]  # (T, seeds, d, d)
    loss_t = np.sum((theta_t - A_pre) ** 2, axis=(-2, -1))
    time_t = steps_[keep] * dt
    m, k, feats = c["m"], c["instances"], np.arange(1, d + 1)
    g = dict(
        paper=BRIDGE, experiment="overtraining", method="finetune", metric="pretrain_loss", d=d, sigma=0.0
    )
    out = []
    for r, sd in enumerate(seeds):
        conv = dict(g, variant="converged", n=m, seed=sd, depth=1)
        pop = dict(g, variant="population_steps", lr=eta, steps=K, seed=sd, depth=1)
        at_n = dict(pretrain_time=res.times[r], features=feats)
        out.append(
            cf_rows(
                converged_one_layer_loss(loss_t[:, r], dist2[r], m, d),
                "exact",
                MIXTURE,
                **conv,
                pretrain_time=time_t,
            )
        )
        out.append(
            cf_rows(converged_one_layer_loss(loss_n[r], dist2[r], m, d), "exact", MIXTURE, **conv, **at_n)
        )
        one_t = population_one_layer_loss(theta_t[:, r], A_pre[r], A_ft[r], eta, K)
        out.append(cf_rows(one_t, "exact", K_STEPS, **pop, pretrain_time=time_t))
        one_n = population_one_layer_loss(theta_n[r], A_pre[r], A_ft[r], eta, K)
        out.append(cf_rows(one_n, "exact", K_STEPS, **pop, **at_n))
        ref = dict(g, method="none", variant="before_finetuning", seed=sd, depth=2)  # L_pre(θ(t)) itself
        out.append(
            block(
                **ref,
                estimator="simulation",
                solver="gradient_flow",
                pretrain_time=time_t,
                risk=loss_t[:, r],
                instances=1,
            )
        )
    # m fixed samples per draw: one layer by linear algebra, two layers by GD to convergence
    X = rng(seed, 8).standard_normal((len(seeds), k, d, m))
    one = converged_one_layer_samples(theta_n, A_pre, A_ft, X)  # (seeds, draws, N)
    B = len(seeds) * k * d
    shape = (len(seeds), k, d, d, d)  # (seed, draw, start point t_n, d, d)
    W1 = np.broadcast_to(res.W1[:, None], shape).reshape(B, d, d)
    W2 = np.broadcast_to(res.W2[:, None], shape).reshape(B, d, d)
    Xb = np.broadcast_to(X[:, :, None], (len(seeds), k, d, d, m)).reshape(B, d, m)
    Ab = np.broadcast_to(A_ft[:, None, None], shape).reshape(B, d, d)
    theta2, steps2 = converged_two_layer(W1, W2, Ab, Xb, c["learning_rate"], gd["tolerance"], c["max_steps"])
    two = np.sum((theta2.reshape(shape) - A_pre[:, None, None]) ** 2, axis=(-2, -1))  # (seeds, draws, N)
    # two layers, K population-gradient steps (Section 4's fine-tuning at λ = 0), and Lemma A.7
    W1k, W2k, div = finetune_gd(res.W1, res.W2, A_ft[:, None, None], np.array([0.0]), eta, K, None, [])
    if div.any():
        raise FloatingPointError("theory.finetune.learning_rate: two-layer population fine-tuning diverged")
    pop2 = np.sum(((W1k @ W2k)[:, :, 0] - A_pre[:, None]) ** 2, axis=(-2, -1))  # (seeds, N)
    s_cf, _ = finetune_closed_form(s_pre, s_ft, feats, np.array([0.0]), eta, K)
    lemma = np.sum((s_cf[:, 0] - s_pre) ** 2, axis=-1)
    for r, sd in enumerate(seeds):
        at_n = dict(g, seed=sd, pretrain_time=res.times[r], features=feats)
        conv = dict(at_n, variant="converged", n=m)
        out.append(sim_rows(one[r], **conv, depth=1, solver="linear_algebra"))
        out.append(
            sim_rows(two[r], **conv, depth=2, solver="gradient_descent", lr=c["learning_rate"], steps=steps2)
        )
        pop = dict(at_n, variant="population_steps", depth=2, lr=eta, steps=K)
        out.append(block(**pop, estimator="simulation", solver="gradient_descent", risk=pop2[r], instances=1))
        out.append(cf_rows(lemma, "exact", "Lemma A.7 (ideal init)", **pop))
    return out
