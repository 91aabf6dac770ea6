"""The linearization stage's findings of one study, as markdown tables (a diagnostic
beside the registered claims of docs/findings.md): whatever rows the study has.

- the gap vs tokens: per (task, method, learning rate, λ), the seed-mean linearization gap on the
  pre-training windows at each budget and Spearman ρ against tokens;
- linearized vs real: per (budget, learning rate, λ), the in-domain validation loss of the real
  model (the coupled method `sft`), of the linearized method, and whether the linearized one is
  within 10% of the real one's improvement over the checkpoint;
- the tuned pre-training ppl per method and budget, with its inflection (Definition 4.2);
- the NTK: Spearman ρ of κ (per σ scale) and λ_max against the forgetting at the tuned rate,
  over (checkpoint, task), with a 95% Fisher-z interval; Algorithm 2 on the real kernels.

usage: python bench/linearization_findings.py results/default
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from pipeline.analysis.evidence import spearman_interval
from pipeline.analysis.linearization_figures import ntk_outcomes, with_extra
from pipeline.analysis.stats import finetuned, inflection_point
from pipeline.analysis.style import format_tokens


def table(rows: list[list], header: list[str]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(out + ["| " + " | ".join(map(str, r)) + " |" for r in rows])


def gap_vs_tokens(metrics: pd.DataFrame) -> str:
    gap = finetuned(metrics)
    gap = gap[(gap["metric"] == "lin_gap") & (gap["eval_data"] == "pretrain")]
    keys = ["task", "modification", "learning_rate", "lambda_reg"]
    mean = gap.groupby([*keys, "budget"], as_index=False)["value"].mean()
    rows = []
    for key, g in mean.groupby(keys):
        g = g.sort_values("budget")
        rho = spearmanr(g["budget"], g["value"]).statistic if len(g) > 2 else np.nan
        rows.append(
            [
                *key[:2],
                f"{key[2]:g}",
                f"{key[3]:g}",
                " / ".join(f"{v:.3g}" for v in g["value"]),
                f"{rho:+.2f}",
            ]
        )
    budgets = " / ".join(format_tokens(b) for b in sorted(mean["budget"].unique()))
    return table(rows, ["task", "method", "LR", "λ", f"gap at {budgets}", "ρ vs tokens"])


def linearized_vs_real(metrics: pd.DataFrame) -> str:
    ft = with_extra(finetuned(metrics), "linearized")
    lin_methods = set(ft.loc[ft["linearized"].fillna(False).astype(bool), "modification"])
    if not lin_methods or "sft" not in set(ft["modification"]):
        return "(no linearized method beside sft)"
    val = ft[(ft["eval_data"] == ft["task"]) & (ft["split"] == "validation") & (ft["metric"] == "loss")]
    base = metrics[
        (metrics["modification"] == "none")
        & (metrics["split"] == "validation")
        & (metrics["metric"] == "loss")
    ]
    base = base[base["eval_data"] != "pretrain"].set_index(["checkpoint", "eval_data"])["value"]
    keys = ["checkpoint", "budget", "task", "learning_rate", "lambda_reg"]
    real = val[val["modification"] == "sft"].groupby(keys)["value"].mean()
    rows = []
    for method in sorted(lin_methods):
        lin = val[val["modification"] == method].groupby(keys)["value"].mean()
        for key, lv in lin.items():
            if key not in real.index:
                continue
            rv, bv = real[key], base.get((key[0], key[2]), np.nan)
            within = (lv - rv) <= 0.1 * (bv - rv)
            rows.append(
                [
                    format_tokens(key[1]),
                    key[2],
                    f"{key[3]:g}",
                    f"{key[4]:g}",
                    f"{bv:.3f}",
                    f"{rv:.3f}",
                    f"{lv:.3f}",
                    "yes" if within else "no",
                ]
            )
    return table(
        rows,
        ["budget", "task", "LR", "λ", "base ID val loss", "real", "linearized", "within 10% of the gain"],
    )


def tuned_by_method(tuned: pd.DataFrame) -> str:
    pre = tuned[(tuned["eval_data"] == "pretrain") & (tuned["metric"] == "ppl")]
    rows = []
    for (task, method, lam), g in pre.groupby(["task", "modification", "lambda_reg"]):
        g = g.sort_values("budget")
        infl = inflection_point(g["budget"].to_numpy(float), g["mean"].to_numpy(float))
        lrs = " / ".join(f"{x:.3g}" for x in g["learning_rate"])
        rows.append(
            [
                task,
                method,
                f"{lam:g}",
                lrs,
                " / ".join(f"{v:.0f}" for v in g["mean"]),
                format_tokens(infl) if np.isfinite(infl) else "none",
            ]
        )
    return table(
        rows, ["task", "method", "λ", "tuned LR per budget", "pre-training ppl at the tuned LR", "inflection"]
    )


def ntk(metrics: pd.DataFrame, tuned: pd.DataFrame) -> str:
    out = ntk_outcomes(metrics, tuned)
    if out.empty:
        return "(no NTK rows)"
    rows = []
    for (kernel, scale), g in out.groupby(["kernel", "sigma_scale"]):
        rho, lo, hi = spearman_interval(g["kappa"].to_numpy(), g["forgetting"].to_numpy())
        rows.append([kernel, f"κ(K + σI), σ = {scale:g}·trK/n", f"{rho:+.2f} [{lo:+.2f}, {hi:+.2f}]", len(g)])
    for kernel, g in out.drop_duplicates(["checkpoint", "task", "kernel"]).groupby("kernel"):
        rho, lo, hi = spearman_interval(g["lambda_max"].to_numpy(), g["forgetting"].to_numpy())
        rows.append([kernel, "λ_max(K)", f"{rho:+.2f} [{lo:+.2f}, {hi:+.2f}]", len(g)])
    per = out.drop_duplicates(["checkpoint", "task", "kernel"]).sort_values(["task", "budget"])
    lines = [
        f"{t} ({k}): λ_max " + " / ".join(f"{v:.3g}" for v in h["lambda_max"])
        for (k, t), h in per.groupby(["kernel", "task"])
    ]
    groups = with_extra(
        metrics[metrics["metric"].isin(["ntk_group_ratio", "ntk_group_risk_ratio"])], "group", "sigma_scale"
    )
    wide = groups.pivot_table(
        index=["checkpoint", "eval_data", "group", "sigma_scale"], columns="metric", values="value"
    ).reset_index()
    alg = []
    for scale, g in wide.groupby("sigma_scale"):
        rho, lo, hi = spearman_interval(g["ntk_group_ratio"].to_numpy(), g["ntk_group_risk_ratio"].to_numpy())
        pick = g.loc[g.groupby(["checkpoint", "eval_data"])["ntk_group_ratio"].idxmin()]
        best = g.loc[g.groupby(["checkpoint", "eval_data"])["ntk_group_risk_ratio"].idxmin()]
        agree = int((pick["group"].to_numpy() == best["group"].to_numpy()).sum())
        alg.append([f"{scale:g}", f"{rho:+.2f} [{lo:+.2f}, {hi:+.2f}]", f"{agree} / {len(pick)}"])
    return (
        table(
            rows,
            [
                "kernel",
                "statistic vs Δ log pre-training ppl at the tuned LR",
                "Spearman ρ [95% CI]",
                "points",
            ],
        )
        + "\n\n"
        + "; ".join(lines)
        + "\n\n"
        + table(
            alg, ["σ scale", "ρ(ranking ratio, ridge risk ratio) [95% CI]", "smallest ratio = lowest risk"]
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("study", type=Path)
    args = ap.parse_args()
    metrics = pd.read_parquet(args.study / "metrics.parquet")
    tuned = pd.read_parquet(args.study / "analysis" / "finetune_tuned.parquet")
    for title, text in (
        ("The linearization gap vs tokens (pre-training windows, seed mean)", gap_vs_tokens(metrics)),
        ("Linearized vs real fine-tuning (in-domain validation loss)", linearized_vs_real(metrics)),
        ("The tuned learning rate per method", tuned_by_method(tuned)),
        ("The NTK and the outcome", ntk(metrics, tuned)),
    ):
        print(f"### {title}\n\n{text}\n")


if __name__ == "__main__":
    main()
