"""The README's result tables, rendered from a study's analysis tables (`make docs`).

    python -m pipeline.analysis.readme_tables results/default   # refresh reference, figures, README
    python -m pipeline.analysis.readme_tables --check           # README == rendering of docs/reference

With a study directory: the rows the tables need are copied from its `analysis/*.parquet` into
`docs/reference/` (small, committed), its PNG figures refresh those in `docs/figures/`, and each
table is rendered from the reference files into README.md between `<!-- tables:<name>:begin -->`
and `<!-- tables:<name>:end -->`. tests/analysis/test_readme_tables.py checks that the committed
README equals the rendering of the committed reference, so the documented numbers cannot drift
from the outputs they came from.
"""

from __future__ import annotations

import argparse
import math
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.analysis.stats import SETTING_KEYS

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"
FIGURES = ROOT / "docs" / "figures"
README = ROOT / "README.md"
NOTE = (
    "<!-- rendered by `make docs` (pipeline/analysis/readme_tables.py) from docs/reference/: do not edit -->"
)

# Each reference file: its source in the study directory and the columns the README needs.
SOURCES = {
    "deltas": "analysis/deltas.parquet",
    "sensitivity": "analysis/sensitivity.parquet",
    "inflection": "analysis/inflection.parquet",
    "optimal_lr": "analysis/finetune_optimal_lr.parquet",
    "tuned": "analysis/finetune_tuned.parquet",
    "distances": "metrics.parquet",
}
FT_KEYS = ["model", "task", "learning_rate", "lambda_reg"]
COLUMNS = {
    "deltas": [*SETTING_KEYS, "budget", "seed", "value", "base", "delta_log", "diverged"],
    "sensitivity": [*SETTING_KEYS, "n_seeds", "spearman_rho", "strictly_increasing"]
    + ["delta_log_first", "delta_log_last"],
    "inflection": [*SETTING_KEYS, "n_seeds", "inflection_budget", "ci_low", "ci_high", "max_budget"],
    "optimal_lr": [
        "model",
        "task",
        "lambda_reg",
        "budgets",
        "optimal_lrs",
        "lr_at_edge",
        "lr_slope",
        "lr_trend",
    ]
    + ["pretrain_inflection", "id_inflection", "scenario", "matches_figure7"],
    "tuned": ["model", "task", "lambda_reg", "budget", "learning_rate", "eval_data", "split", "mean", "sd"]
    + ["n_seeds"],
    "distances": [*FT_KEYS, "seed", "budget", "value", "diverged"],
}
SORT = {"deltas": [*SETTING_KEYS, "budget", "seed"], "optimal_lr": ["model", "task", "lambda_reg"]}
SORT |= {"tuned": ["model", "task", "lambda_reg", "eval_data", "split", "budget"]}
SORT |= {"distances": [*FT_KEYS, "budget", "seed"], "sensitivity": SETTING_KEYS, "inflection": SETTING_KEYS}

Tables = dict[str, pd.DataFrame]


def _documented(name: str, df: pd.DataFrame) -> pd.Series:
    """Rows the README shows: the Gaussian sweep and fine-tuning (the default method, `sft`), on the
    pre-training corpus or a fine-tuning task's test split (in-domain); ‖θ_ft − θ_pre‖₂; every
    optimal-LR row of `sft`."""
    if name == "optimal_lr":
        return df["modification"] == "sft"
    if name == "tuned":  # perplexity at the tuned rate: pre-training, and in-domain test
        return (
            (df["modification"] == "sft")
            & (df["metric"] == "ppl")
            & ((df["eval_data"] == "pretrain") | (df["eval_data"] == df["task"]) & (df["split"] == "test"))
        )
    if name == "distances":
        return (
            (df["modification"] == "sft") & (df["eval_data"] == "weights") & (df["metric"] == "distance_l2")
        )
    gauss = (df["modification"] == "gaussian") & (df["eval_data"] == "pretrain")
    in_domain = (df["eval_data"] == df["task"]) & (df["split"] == "test")
    sft = (df["modification"] == "sft") & ((df["eval_data"] == "pretrain") | in_domain)
    return gauss | sft


def reduce_study(study: str | Path) -> Tables:
    """The rows and columns of a study's outputs (results/<study>) that the README's tables need."""
    out = {}
    for name, cols in COLUMNS.items():
        df = pd.read_parquet(Path(study) / SOURCES[name])
        df = df[_documented(name, df)][cols]
        out[name] = df.sort_values(SORT[name]).reset_index(drop=True)
    return out


def read_reference(reference: str | Path = REFERENCE) -> Tables:
    return {name: pd.read_parquet(Path(reference) / f"{name}.parquet") for name in COLUMNS}


def write_reference(tables: Tables, reference: str | Path = REFERENCE) -> None:
    Path(reference).mkdir(parents=True, exist_ok=True)
    for name, df in tables.items():
        df.to_parquet(Path(reference) / f"{name}.parquet", index=False)


# ----------------------------------------------------------------------------- formatting


def tokens(b: float) -> str:
    """A budget in millions of tokens, as the README writes it: 0.25M, 2M."""
    return f"{b / 1e6:.3g}M"


def ppl(x: float) -> str:
    if not math.isfinite(x):
        return "diverged"
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}"


def lr(x: float) -> str:
    """A learning rate as the README writes it: 1e-3, 1.5e-3."""
    mantissa, exponent = f"{x:.2e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def _num(x: float, digits: int) -> str:
    return f"{x:.{digits}f}" if math.isfinite(x) else "n/a"


def _mean_sd(mean: float, sd: float) -> str:
    return ppl(mean) + (f" ± {sd:.2g}" if math.isfinite(sd) else "")


def _budget_or_none(b: float) -> str:
    return tokens(b) if math.isfinite(b) else "none"


def _inflection(row: pd.Series) -> str:
    """Inflection budget with its bootstrap interval over seeds when the seeds disagree."""
    if not math.isfinite(row["inflection_budget"]):
        return f"none within {tokens(row['max_budget'])}"
    text = tokens(row["inflection_budget"])
    lo, hi = row["ci_low"], row["ci_high"]
    if row["n_seeds"] > 1 and math.isfinite(lo) and (lo, hi) != (row["inflection_budget"],) * 2:
        text += f" ({tokens(lo)}-{tokens(hi)})"
    return text


def _pick(budgets: list[float], idx: list[int]) -> list[float]:
    """Budgets at the given positions (negative from the end), each once, in order."""
    return sorted({budgets[i] for i in idx if -len(budgets) <= i < len(budgets)})


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _table(header: list[str], rows: list[list[str]]) -> str:
    return "\n".join([_row(header), _row(["---"] * len(header)), *map(_row, rows)])


def _seed_means(d: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Seed-mean value (inf if a seed diverged) and the base per (keys, budget)."""
    d = d.assign(value=np.where(np.isfinite(d["value"]), d["value"], np.inf))
    return d.groupby([*keys, "budget"], dropna=False).agg(value=("value", "mean"), base=("base", "first"))


def _settings(t: Tables, mask: Callable[[pd.DataFrame], pd.Series]) -> pd.DataFrame:
    """One row per setting: its sensitivity and inflection side by side."""
    sens, infl = t["sensitivity"], t["inflection"]
    return sens[mask(sens)].merge(infl[mask(infl)], on=[*SETTING_KEYS, "n_seeds"], validate="one_to_one")


def _label(parts: list[tuple[str, bool]]) -> str:
    return ", ".join(text for text, show in parts if show)


# ----------------------------------------------------------------------------- the tables


def gaussian_table(t: Tables) -> str:
    """Per γ: Δ log-ppl smallest → largest budget, ρ, perturbed ppl at three budgets, inflection."""
    d = t["deltas"][t["deltas"]["modification"] == "gaussian"]
    budgets = sorted(d["budget"].unique())
    shown = _pick(budgets, [0, len(budgets) // 2, -1])
    means = _seed_means(d, ["model", "gamma"])
    models = sorted(d["model"].unique())
    settings = _settings(t, lambda df: df["modification"] == "gaussian").sort_values(["model", "gamma"])
    header = [
        "γ (× init std)",
        f"Δ log-ppl at {tokens(budgets[0])} → {tokens(budgets[-1])}",
        "Spearman ρ",
        "perturbed ppl at " + " / ".join(map(tokens, shown)),
        "inflection",
    ]
    rows = []
    for model in models:
        base = means.loc[model].groupby("budget")["base"].first()
        label = _label([(model, len(models) > 1), ("base (γ = 0)", True)])
        rows.append([label, "", "", " / ".join(ppl(base[b]) for b in shown), ""])
        for _, s in settings[settings["model"] == model].iterrows():
            m = means.loc[(model, s["gamma"])]["value"]
            rising = " (strictly rising)" if s["strictly_increasing"] else ""
            rows.append(
                [
                    _label([(model, len(models) > 1), (f"{s['gamma']:g}", True)]),
                    f"{_num(s['delta_log_first'], 3)} → {_num(s['delta_log_last'], 3)}{rising}",
                    _num(s["spearman_rho"], 2),
                    " / ".join(ppl(m[b]) for b in shown),
                    _inflection(s),
                ]
            )
    return _table(header, rows)


def finetune_table(t: Tables) -> str:
    """Per task and LR: Δ log pre-training ppl, pre-training ppl at four budgets, inflection, ID test ppl."""
    d = t["deltas"][t["deltas"]["modification"] == "sft"]
    keys = FT_KEYS
    pre, idt = d[d["eval_data"] == "pretrain"], d[(d["eval_data"] == d["task"]) & (d["split"] == "test")]
    budgets = sorted(pre["budget"].unique())
    shown = _pick(budgets, [0, len(budgets) // 2, -2, -1])
    pre_means, id_means = _seed_means(pre, keys), _seed_means(idt, keys)
    models, lambdas = sorted(pre["model"].unique()), sorted(pre["lambda_reg"].unique())
    settings = _settings(
        t, lambda df: (df["modification"] == "sft") & (df["eval_data"] == "pretrain")
    ).sort_values(keys)
    first, last = tokens(budgets[0]), tokens(budgets[-1])
    header = [
        "task, LR",
        f"Δ log pre-training ppl {first} → {last}",
        "pre-training ppl after fine-tuning at " + " / ".join(map(tokens, shown)),
        "inflection",
        f"in-domain test ppl {first} → {last}",
    ]
    rows = []
    for model in models:
        base = pre_means.loc[model].groupby("budget")["base"].first()
        label = _label([(model, len(models) > 1), ("base (not fine-tuned)", True)])
        rows.append([label, "", " / ".join(ppl(base[b]) for b in shown), "", ""])
        for _, s in settings[settings["model"] == model].iterrows():
            key = tuple(s[k] for k in keys)
            m = pre_means.loc[key]["value"]
            ident = id_means.loc[key]["value"] if key in id_means.index.droplevel("budget") else None
            rising = " (strictly rising)" if s["strictly_increasing"] else ""
            label = _label(
                [
                    (model, len(models) > 1),
                    (f"{s['task']}, {lr(s['learning_rate'])}", True),
                    (f"λ {s['lambda_reg']:g}", len(lambdas) > 1),
                ]
            )
            rows.append(
                [
                    label,
                    f"{_num(s['delta_log_first'], 2)} → {_num(s['delta_log_last'], 2)}{rising}",
                    " / ".join(ppl(m[b]) for b in shown),
                    _inflection(s),
                    "n/a" if ident is None else f"{ppl(ident.iloc[0])} → {ppl(ident.iloc[-1])}",
                ]
            )
    return _table(header, rows)


def finetune_lr_tables(t: Tables) -> str:
    """The tuned-LR view (Figures 6, 7) per task, and ‖θ_ft − θ_pre‖₂ per learning rate (Figure 8)."""
    opt, tuned = t["optimal_lr"], t["tuned"]
    several = opt["model"].nunique() > 1 or opt["lambda_reg"].nunique() > 1
    rows = []
    for _, o in opt.iterrows():
        edge = list(o["lr_at_edge"])
        lrs = [
            (lr(x) if math.isfinite(x) else "none") + (" (edge)" if e else "")
            for x, e in zip(o["optimal_lrs"], edge)
        ]
        shown = f"{lrs[0]} at every budget" if len(set(lrs)) == 1 else " / ".join(lrs)
        label = f"{o['model']}, {o['task']}, λ {o['lambda_reg']:g}" if several else o["task"]
        at = tuned[
            (tuned["model"] == o["model"])
            & (tuned["task"] == o["task"])
            & (tuned["lambda_reg"] == o["lambda_reg"])
        ]
        pre = at[at["eval_data"] == "pretrain"].sort_values("budget")
        ident = at[at["eval_data"] == o["task"]].sort_values("budget")
        trend = f"{o['lr_trend']} ({round(o['lr_slope'], 2) + 0.0:+.2f})"  # + 0.0: no "-0.00"
        rows.append(
            [
                label,
                shown,
                " / ".join(_mean_sd(m, sd) for m, sd in zip(pre["mean"], pre["sd"])),
                _budget_or_none(o["pretrain_inflection"]),
                f"{ppl(ident['mean'].iloc[0])} → {ppl(ident['mean'].iloc[-1])}" if len(ident) else "n/a",
                trend,
                o["scenario"],
                "yes" if o["matches_figure7"] else "no",
            ]
        )
    budgets = " / ".join(tokens(b) for b in opt["budgets"].iloc[0]) if len(opt) else ""
    seeds = int(tuned["n_seeds"].max()) if len(tuned) else 0
    tuned = _table(
        ["task", f"optimal LR at {budgets}", f"pre-training ppl at the optimal LR (mean ± sd, {seeds} seeds)"]
        + ["its inflection", "in-domain test ppl", "optimal-LR trend (decades per decade of tokens)"]
        + ["Figure 7 scenario", "matches Figure 7"],
        rows,
    )
    w = t["distances"][np.isfinite(t["distances"]["value"])]
    dev = (w["value"] / w.groupby(FT_KEYS)["value"].transform("mean") - 1).abs()
    w = w.assign(dev=dev)
    rows = [
        [lr(x), f"{g['value'].min():.1f} – {g['value'].max():.1f}", f"±{100 * g['dev'].max():.0f}%"]
        for x, g in w.groupby("learning_rate")
    ]
    dist = _table(
        [
            "LR",
            "‖θ_ft − θ_pre‖₂, min – max over tasks and budgets",
            "largest deviation from the (task, LR) mean across budgets",
        ],
        rows,
    )
    if w["learning_rate"].nunique() < 2:
        return f"{tuned}\n\n{dist}"
    slope = np.polyfit(np.log10(w["learning_rate"]), np.log10(w["value"]), 1)[0]
    return f"{tuned}\n\n{dist}\n\nFitted over all runs: ‖θ_ft − θ_pre‖₂ ∝ LR^{slope:.2f}."


SECTIONS: dict[str, Callable[[Tables], str]] = {
    "gaussian": gaussian_table,
    "finetune": finetune_table,
    "finetune_lr": finetune_lr_tables,
}


def render(t: Tables) -> dict[str, str]:
    """Each marked README section's content (the note line, then the table)."""
    return {name: f"{NOTE}\n{fn(t)}\n" for name, fn in SECTIONS.items()}


def _marker(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- tables:{name}:begin -->\n)(.*?)(<!-- tables:{name}:end -->)", re.S)


def sections_of(readme: str) -> dict[str, str]:
    """The content between each pair of markers in a README text."""
    found = {name: _marker(name).search(readme) for name in SECTIONS}
    missing = [name for name, m in found.items() if m is None]
    if missing:
        raise ValueError(f"README has no <!-- tables:NAME:begin/end --> markers for {missing}")
    return {name: m.group(2) for name, m in found.items()}


def replace_sections(readme: str, sections: dict[str, str]) -> str:
    sections_of(readme)  # every marker present
    for name, text in sections.items():
        readme = _marker(name).sub(lambda m, text=text: m.group(1) + text + m.group(3), readme)
    return readme


def copy_figures(study: Path, figures: Path = FIGURES) -> list[Path]:
    """Refresh each PNG in docs/figures from the study's figure of the same name."""
    copied = []
    for dest in sorted(figures.glob("*.png")):
        src = study / "figures" / dest.name
        if not src.exists():
            raise FileNotFoundError(f"{src}: docs/figures/{dest.name} has no counterpart in the study")
        shutil.copyfile(src, dest)
        copied.append(dest)
    return copied


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "study", nargs="?", type=Path, help="study directory (results/<study>); omit to re-render"
    )
    ap.add_argument("--check", action="store_true", help="only check README against docs/reference")
    ap.add_argument("--readme", type=Path, default=README)
    ap.add_argument("--reference", type=Path, default=REFERENCE)
    ap.add_argument("--figures", type=Path, default=FIGURES)
    args = ap.parse_args(argv)
    if args.study is not None and not args.check:
        write_reference(reduce_study(args.study), args.reference)
        copied = copy_figures(args.study, args.figures)
        print(f"docs: reference tables from {args.study}, {len(copied)} figures copied")
    sections = render(read_reference(args.reference))
    readme = args.readme.read_text()
    if args.check:
        stale = [name for name, text in sections_of(readme).items() if text != sections[name]]
        if stale:
            print(
                f"{args.readme}: tables {stale} differ from {args.reference}; run `make docs`",
                file=sys.stderr,
            )
        return 1 if stale else 0
    args.readme.write_text(replace_sections(readme, sections))
    print(f"docs: {args.readme} tables {list(sections)} rendered from {args.reference}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
