"""Figures of the linearization stage ("Linearization Explains Fine-Tuning in Large Language Models"
across the pre-training sweep): Table 1's analogue, the linearization gap vs tokens, linearized vs
real fine-tuning, the NTK per checkpoint against the fine-tuning outcome, Algorithm 2's layer
ranking against the kernel-ridge risk, and WiSE-FT fronts. LoRA vs full fine-tuning at the tuned
learning rate is `finetune_tuned` (one line per method). A panel whose rows the study did not
compute says which setting computes them.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from pipeline.analysis.evidence import spearman_interval
from pipeline.analysis.stats import finetuned
from pipeline.analysis.style import format_tokens, plain_log_ticks, save_figure, set_style
from pipeline.analysis.sweep_figures import token_axis

KEYS = ["checkpoint", "budget", "task", "modification", "learning_rate", "lambda_reg"]


def with_extra(df: pd.DataFrame, *names: str) -> pd.DataFrame:
    """`df` with columns parsed from its `extra` JSON (missing: NaN)."""
    parsed = df["extra"].map(lambda e: json.loads(e) if isinstance(e, str) else {})
    return df.assign(**{n: parsed.map(lambda d, n=n: d.get(n)) for n in names})


def _missing(ax: plt.Axes, what: str) -> None:
    ax.text(
        0.5, 0.5, f"not computed in this study:\n{what}", ha="center", va="center", transform=ax.transAxes
    )
    ax.set_axis_off()


def _seed_mean(rows: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    return rows.groupby(by, dropna=False, as_index=False)["value"].mean()


def plot_table1(
    metrics: pd.DataFrame, tuned: pd.DataFrame, stem: str | Path, formats: Iterable[str]
) -> list[Path]:
    """Table 1's analogue at the tuned learning rate: ‖θ_ft − θ_pre‖, the linearization gap and KL on
    the held-out pre-training windows, and the in-domain test ppl vs λ, per method and budget."""
    set_style()
    panels = [
        ("weights", "distance_l2", "‖θ_ft − θ_pre‖₂"),
        ("pretrain", "lin_gap", "linearization gap (pre-training data)"),
        ("pretrain", "lin_kl", "KL(p_ft ‖ p_lin) (pre-training data)"),
        (None, "ppl", "in-domain test ppl"),
    ]
    tasks = sorted(tuned["task"].dropna().unique()) if len(tuned) else []
    fig, axes = plt.subplots(max(len(tasks), 1), 4, figsize=(20, 4.2 * max(len(tasks), 1)), squeeze=False)
    for row, task in zip(axes, tasks or [None]):
        t = tuned[tuned["task"] == task]
        for ax, (eval_data, metric, label) in zip(row, panels):
            data = eval_data or task
            c = t[(t["eval_data"] == data) & (t["metric"] == metric)]
            if eval_data is None:
                c = c[c["split"] == "test"]
            if c.empty:
                _missing(ax, "finetune.linearization_tokens > 0" if metric.startswith("lin_") else label)
                continue
            for (method, budget), g in c.groupby(["modification", "budget"]):
                g = g.sort_values("lambda_reg")
                ax.plot(g["lambda_reg"], g["mean"], "o-", label=f"{method}, {format_tokens(budget)} tokens")
            ax.set_xscale("symlog", linthresh=1e-2)
            ax.set_yscale("log")  # a linearized run's ppl can be orders of magnitude above the others
            ax.set_xlabel("proximal λ")
            ax.set_ylabel(label)
            ax.set_title(f"{task}: {label}")
        row[0].legend(fontsize=7)
    fig.suptitle(
        "Table 1 across the sweep: distance, linearization gap, KL and in-domain ppl vs λ (tuned LR)"
    )
    return save_figure(fig, stem, formats)


def plot_gap_tokens(metrics: pd.DataFrame, stem: str | Path, formats: Iterable[str]) -> list[Path]:
    """The linearization gap along θ_ft − θ_pre vs pre-training tokens, one line per learning rate
    (seed mean), per (task, method); the legend gives Spearman ρ of gap vs tokens per rate. A dashed
    line marks gap = 1: above it the first-order prediction is worse than predicting no change."""
    set_style()
    gap = finetuned(metrics)
    gap = gap[(gap["metric"] == "lin_gap") & (gap["eval_data"] == "pretrain")]
    keys = sorted(set(zip(gap["task"], gap["modification"]))) or [(None, None)]
    fig, axes = plt.subplots(1, len(keys), figsize=(8 * len(keys), 4.4), squeeze=False, layout="constrained")
    for ax, (task, method) in zip(axes[0], keys):
        g = gap[(gap["task"] == task) & (gap["modification"] == method)]
        if g.empty:
            _missing(ax, "finetune.linearization_tokens > 0")
            continue
        mean = _seed_mean(g, ["learning_rate", "lambda_reg", "budget"])
        for (lr, lam), c in mean.groupby(["learning_rate", "lambda_reg"]):
            c = c.sort_values("budget")
            rho = spearmanr(c["budget"], c["value"]).statistic if len(c) > 2 else np.nan
            ax.plot(c["budget"], c["value"], "o-", label=f"lr {lr:g}, λ {lam:g} (ρ {rho:+.2f})")
        ax.axhline(1.0, color="0.4", ls="--", lw=1, label="gap = 1: no better than predicting no change")
        token_axis(ax, ticks=mean["budget"])
        ax.set_yscale("log")
        ax.set_ylabel("linearization gap (pre-training windows)")
        ax.set_title(f"{task} · {method}: ‖f_ft − f_pre − Jδ‖ / ‖f_ft − f_pre‖")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return save_figure(fig, stem, formats)


def twins(ft: pd.DataFrame) -> dict[str, str]:
    """Each linearized method's real twin: the method with the same params, proximal variant and
    replay that trains the real model (the first by name)."""
    settings = ft.drop_duplicates("modification").set_index("modification")
    key = ["params", "proximal", "replay_fraction"]
    out = {}
    for method, row in settings[settings["linearized"].fillna(False).astype(bool)].iterrows():
        same = settings[
            ~settings["linearized"].fillna(False).astype(bool)
            & (settings[key].astype(str) == row[key].astype(str)).all(axis=1)
        ]
        if len(same):
            out[method] = sorted(same.index)[0]
    return out


def plot_linearized_vs_real(metrics: pd.DataFrame, stem: str | Path, formats: Iterable[str]) -> list[Path]:
    """In-domain validation ppl and pre-training ppl vs learning rate, per task and budget: each
    linearized method (the tangent model trained, dashed) beside its real twin (solid), a colour
    per λ."""
    set_style()
    ft = with_extra(finetuned(metrics), "linearized", "params", "proximal", "replay_fraction")
    ft = ft[ft["metric"] == "ppl"]
    pairs = twins(ft)
    keys = sorted(set(zip(ft["task"], ft["budget"]))) if pairs else [(None, None)]
    fig, axes = plt.subplots(len(keys), 2, figsize=(13, 4.2 * len(keys)), squeeze=False, layout="constrained")
    colors = dict(zip(sorted(ft["lambda_reg"].unique()), plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    for row, (task, budget) in zip(axes, keys):
        if not pairs:
            for ax in row:
                _missing(
                    ax, "a method with linearized: true beside its real twin (config/linearization.yaml)"
                )
            continue
        t = ft[(ft["task"] == task) & (ft["budget"] == budget)]
        for ax, (data, split, label) in zip(
            row, ((task, "validation", "in-domain validation ppl"), ("pretrain", None, "pre-training ppl"))
        ):
            c = t[(t["eval_data"] == data) & ((t["split"] == split) if split else True)]
            mean = c.groupby(["modification", "lambda_reg", "learning_rate"], as_index=False)["value"].mean()
            for lin, real in pairs.items():
                for method, style in ((real, "-"), (lin, "--")):
                    for lam, g in mean[mean["modification"] == method].groupby("lambda_reg"):
                        g = g.sort_values("learning_rate")
                        ax.plot(
                            g["learning_rate"],
                            g["value"],
                            style,
                            marker="o",
                            ms=4,
                            color=colors[lam],
                            label=f"{method}, λ {lam:g}",
                        )
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("fine-tuning learning rate")
            ax.set_ylabel(label)
            ax.set_title(f"{task}, {format_tokens(budget)} tokens: {label}")
        row[0].legend(fontsize=7, ncol=2)
    fig.suptitle("Linearized (dashed) vs real (solid) fine-tuning")
    return save_figure(fig, stem, formats)


def ntk_outcomes(metrics: pd.DataFrame, tuned: pd.DataFrame) -> pd.DataFrame:
    """Per (checkpoint, task, kernel, σ scale): κ(K + σI), λ_max, and the fine-tuning outcome at the
    tuned learning rate at the smallest λ — Δ log pre-training ppl (forgetting) and the in-domain
    test ppl. `kernel` is the NTK rows' modification: `none`, every parameter, paired with the first
    method; a method's name, the kernel of what it trains, paired with that method."""
    ntk = with_extra(metrics[metrics["metric"].isin(["ntk_kappa", "ntk_lambda_max"])], "sigma_scale")
    ntk = ntk.drop(columns="task").rename(columns={"eval_data": "task", "modification": "kernel"})
    kappa = ntk[ntk["metric"] == "ntk_kappa"][
        ["checkpoint", "budget", "task", "kernel", "sigma_scale", "value"]
    ]
    top = ntk[ntk["metric"] == "ntk_lambda_max"][["checkpoint", "task", "kernel", "value"]]
    keys = ["checkpoint", "task", "kernel"]
    out = kappa.rename(columns={"value": "kappa"}).merge(top.rename(columns={"value": "lambda_max"}), on=keys)
    if tuned.empty:
        return out.assign(forgetting=np.nan, id_ppl=np.nan)
    least = tuned[tuned["lambda_reg"] == tuned["lambda_reg"].min()]
    first = sorted(least["modification"].unique())[0]
    paired = pd.concat(
        [
            least[least["modification"] == first].assign(kernel="none"),
            least.assign(kernel=least["modification"]),
        ]
    )
    pre = paired[(paired["eval_data"] == "pretrain") & (paired["metric"] == "ppl")]
    pre = pre.assign(forgetting=np.log(pre["mean"] / pre["base"]))[[*keys, "forgetting"]]
    ident = paired[
        (paired["eval_data"] == paired["task"]) & (paired["split"] == "test") & (paired["metric"] == "ppl")
    ]
    ident = ident.rename(columns={"mean": "id_ppl"})[[*keys, "id_ppl"]]
    return out.merge(pre, on=keys, how="left").merge(ident, on=keys, how="left")


def rho_text(rho: float, lo: float, hi: float) -> str:
    """Spearman ρ with its 95% interval, or why there is none."""
    if not np.isfinite(rho):
        return "ρ undefined (< 4 points or constant)"
    return f"ρ = {rho:+.2f} [{lo:+.2f}, {hi:+.2f}]"


def plot_ntk(
    metrics: pd.DataFrame,
    tuned: pd.DataFrame,
    stem: str | Path,
    formats: Iterable[str],
) -> list[Path]:
    """κ(K + σI) (a line style per σ scale) and λ_max vs tokens (each checkpoint a point, the line
    through the median over pre-training seeds); κ at the middle σ scale and λ_max vs
    the forgetting after fine-tuning at the tuned learning rate, with Spearman ρ over checkpoints and
    its 95% Fisher-z interval per task (evidence.spearman_interval). A colour per task; a marker per
    kernel (every parameter, or what a method trains) when there are several."""
    set_style()
    out = ntk_outcomes(metrics, tuned)
    fig, axes = plt.subplots(1, 4, figsize=(24, 4.6), squeeze=False)
    axes = axes[0]
    if out.empty:
        for ax in axes:
            _missing(ax, "curvature.ntk_examples > 0")
        return save_figure(fig, stem, formats)
    several = out["kernel"].nunique() > 1
    colors = {task: f"C{i % 10}" for i, task in enumerate(sorted(out["task"].unique()))}
    markers = dict(zip(sorted(out["kernel"].unique()), itertools.cycle("os^Dv")))
    scales = sorted(out["sigma_scale"].unique())
    styles = dict(zip(scales, itertools.cycle(["-", "--", ":", "-."])))
    middle = scales[len(scales) // 2]

    def named(kernel: str, text: str) -> str:
        return f"{'all parameters' if kernel == 'none' else kernel}: {text}" if several else text

    def by_budget(ax: plt.Axes, g: pd.DataFrame, column: str, kernel: str, task: str, **line) -> None:
        """Each checkpoint a point; the line through the median over pre-training seeds per budget."""
        median = g.groupby("budget")[column].median()
        ax.plot(median.index, median.to_numpy(), color=colors[task], **line)
        ax.scatter(g["budget"], g[column], marker=markers[kernel], color=colors[task], s=14, alpha=0.6)

    for (kernel, task, scale), g in out.groupby(["kernel", "task", "sigma_scale"]):
        label = named(kernel, f"{task}, σ = {scale:g}·trK/n")
        by_budget(axes[0], g, "kappa", kernel, task, ls=styles[scale], label=label)
    per_checkpoint = out.drop_duplicates(["checkpoint", "task", "kernel"])
    for (kernel, task), g in per_checkpoint.groupby(["kernel", "task"]):
        by_budget(axes[1], g, "lambda_max", kernel, task, ls="-", label=named(kernel, task))
    for ax, label in zip(axes[:2], ("κ(K + σI)", "λ_max(K)")):
        token_axis(ax, ticks=out["budget"])
        ax.set_yscale("log")
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
    # one series per (kernel, task): ρ over its checkpoints, tasks never pooled
    panels = (
        (axes[2], "kappa", f"κ(K + σI), σ = {middle:g}·trK/n", out[out["sigma_scale"] == middle]),
        (axes[3], "lambda_max", "λ_max(K)", per_checkpoint),
    )
    for ax, column, label, data in panels:
        for (kernel, task), g in data.groupby(["kernel", "task"]):
            rho, lo, hi = spearman_interval(g[column].to_numpy(), g["forgetting"].to_numpy())
            ax.scatter(
                g[column],
                g["forgetting"],
                color=colors[task],
                marker=markers[kernel],
                label=named(kernel, f"{task}: {rho_text(rho, lo, hi)}"),
            )
        ax.set_xscale("log")
        plain_log_ticks(ax.xaxis)
        ax.set_xlabel(label)
        ax.set_ylabel("Δ log pre-training ppl at the tuned LR")
        ax.legend(fontsize=7, title="Spearman ρ over checkpoints [95% Fisher-z]", title_fontsize=7)
    axes[2].set_title(f"κ at the middle σ scale ({middle:g}·trK/n) vs forgetting, per task")
    axes[3].set_title("λ_max(K) vs forgetting, per task")
    fig.suptitle("The empirical NTK per checkpoint and the fine-tuning outcome")
    return save_figure(fig, stem, formats)


def plot_layer_selection(metrics: pd.DataFrame, stem: str | Path, formats: Iterable[str]) -> list[Path]:
    """Algorithm 2's test on each checkpoint's kernels: log of the kernel-ridge risk ratio
    R(base ∪ g) / R(base) vs log of the ranking ratio λ_max(K + S + σI) / λ_max(K + σI), one point
    per (checkpoint, task, candidate group), per σ; Algorithm 2 picks the smallest ratio."""
    set_style()
    rows = with_extra(
        metrics[metrics["metric"].isin(["ntk_group_ratio", "ntk_group_risk_ratio"])], "group", "sigma_scale"
    )
    fig, ax = plt.subplots(figsize=(7, 5.5))
    if rows.empty:
        _missing(ax, "curvature.ntk_examples > 0")
        return save_figure(fig, stem, formats)
    wide = rows.pivot_table(
        index=["checkpoint", "eval_data", "group", "sigma_scale"], columns="metric", values="value"
    ).reset_index()
    for scale, g in wide.groupby("sigma_scale"):
        rho, lo, hi = spearman_interval(g["ntk_group_ratio"].to_numpy(), g["ntk_group_risk_ratio"].to_numpy())
        ax.scatter(
            np.log(g["ntk_group_ratio"]),
            np.log(g["ntk_group_risk_ratio"]),
            s=18,
            label=f"σ = {scale:g}·trK/n: ρ = {rho:+.2f} [{lo:+.2f}, {hi:+.2f}]",
        )
    ax.set_xlabel("log ranking ratio λ_max(K + S + σI) / λ_max(K + σI)")
    ax.set_ylabel("log kernel-ridge risk ratio R(base ∪ g) / R(base)")
    ax.set_title("Algorithm 2: does a smaller ratio mean a smaller risk? (ρ > 0: yes)")
    ax.legend(fontsize=7, title="Spearman ρ over the points [95% Fisher-z]", title_fontsize=7)
    return save_figure(fig, stem, formats)


def plot_wise_ft(
    metrics: pd.DataFrame, tuned: pd.DataFrame, stem: str | Path, formats: Iterable[str]
) -> list[Path]:
    """WiSE-FT fronts: in-domain validation ppl vs pre-training ppl along α (θ_pre + α(θ_ft − θ_pre))
    at each (checkpoint, method)'s tuned learning rate, one line per budget (α = 0 ■, α = 1 ●)."""
    set_style()
    wise = with_extra(finetuned(metrics)[lambda d: d["metric"] == "wise_ppl"], "wise_alpha")
    keys = sorted(set(zip(wise["task"], wise["modification"]))) or [(None, None)]
    fig, axes = plt.subplots(1, len(keys), figsize=(6.5 * len(keys), 5), squeeze=False)
    for ax, (task, method) in zip(axes[0], keys):
        w = wise[(wise["task"] == task) & (wise["modification"] == method)]
        chosen = tuned[(tuned["task"] == task) & (tuned["modification"] == method)][
            ["checkpoint", "lambda_reg", "learning_rate"]
        ].drop_duplicates()
        w = w.merge(chosen, on=["checkpoint", "lambda_reg", "learning_rate"])
        if w.empty:
            _missing(ax, "finetune.wise_ft_alphas")
            continue
        pre = w[w["eval_data"] == "pretrain"].groupby(["budget", "lambda_reg", "wise_alpha"])["value"].mean()
        ident = (
            w[(w["eval_data"] == task) & (w["split"] == "validation")]
            .groupby(["budget", "lambda_reg", "wise_alpha"])["value"]
            .mean()
        )
        front = pd.concat({"pre": pre, "id": ident}, axis=1).dropna().reset_index()
        for (budget, lam), g in front.groupby(["budget", "lambda_reg"]):
            g = g.sort_values("wise_alpha")
            (line,) = ax.plot(
                g["pre"], g["id"], "-", marker=".", label=f"{format_tokens(budget)} tokens, λ {lam:g}"
            )
            ax.plot(g["pre"].iloc[0], g["id"].iloc[0], "s", color=line.get_color())
            ax.plot(g["pre"].iloc[-1], g["id"].iloc[-1], "o", color=line.get_color())
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("pre-training ppl")
        ax.set_ylabel("in-domain validation ppl")
        ax.set_title(f"{task} · {method}: WiSE-FT along α")
        ax.legend(fontsize=7)
    return save_figure(fig, stem, formats)
