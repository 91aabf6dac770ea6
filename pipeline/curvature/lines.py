"""The pre-training loss along a line θ + λε against its quadratic prediction (Appendix D, Figures
9-10), on one model held in memory.

The loss is the mean NLL of a fixed held-out token set (the perturbation stage's held-out split,
capped at `curvature.max_tokens`), evaluated through the model's own logits (the fused output layer
has no double backward) in the stage's dtype (float64 by default, so that L(λ) − L(0) at λ ~ 1e-2 is
not float32 rounding). The model is switched to eager attention (flash SDPA and the small-head CPU
kernel have no double backward; pytorch #116350), which is logged. transformers computes the
softmax and RMSNorm in float32 whatever the model's dtype, so a float64 model is exact to about 1e-7
relative inside those layers (a finite difference of gradients agrees with the HVP to ~2e-5).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

import pyarrow as pa
import torch
import torch.nn.functional as F

from pipeline.curvature.hessian import Vector, directional, fd_curvature
from pipeline.curvature.summary import smallest_lambda_error
from pipeline.data.batches import IGNORE_INDEX
from pipeline.io import write_parquet
from pipeline.models.compile import uncompile_layers

if TYPE_CHECKING:
    import pandas as pd

    from pipeline.curvature.config import CurvatureConfig
    from pipeline.data.heldout import EvalSet

log = logging.getLogger(__name__)
T = TypeVar("T")
EAGER = "eager"  # transformers' own: double backward on every device

# One row per (line, λ); the line's own numbers (L(0), gᵀε, εᵀHε, the curve's fit) repeat on its rows.
LINE_COLUMNS: dict[str, pa.DataType] = {
    "study": pa.string(),
    "checkpoint": pa.string(),
    "model": pa.string(),
    "budget": pa.float64(),  # pre-training tokens
    "direction": pa.string(),  # gaussian | finetune
    "seed": pa.int64(),  # Gaussian: the perturbation seed; fine-tuning: the run's seed
    "task": pa.string(),  # fine-tuning direction: task, method (finetune.methods), learning rate, proximal λ
    "modification": pa.string(),
    "learning_rate": pa.float64(),
    "lambda_reg": pa.float64(),
    "grid": pa.string(),  # small (near 0) | wide
    "lambda": pa.float64(),  # θ + λε; Gaussian: λ = γ; fine-tuning: λ = 1 is θ_ft
    "loss": pa.float64(),  # L(θ + λε), mean NLL per token (nats)
    "quadratic": pa.float64(),  # L(θ) + λ gᵀε + ½ λ² εᵀHε
    "finite": pa.bool_(),  # False: L(θ + λε) is NaN/inf (recorded; the curve continues)
    "loss0": pa.float64(),
    "grad_dot": pa.float64(),  # gᵀε
    "curvature": pa.float64(),  # εᵀHε (double backward)
    "curvature_fd": pa.float64(),  # εᵀHε fitted to the small grid's losses (cross-check)
    "direction_norm": pa.float64(),  # ‖ε‖₂
    "eval_tokens": pa.int64(),
}


def line_frame(rows: Sequence[Mapping]) -> pd.DataFrame:
    """Rows -> a DataFrame with exactly LINE_COLUMNS, typed (an empty table keeps the columns)."""
    import pandas as pd  # here: a fine-tuning job imports this module long before it writes a line

    df = pd.DataFrame(list(rows), columns=list(LINE_COLUMNS))
    schema = pa.schema([pa.field(k, v) for k, v in LINE_COLUMNS.items()])
    return pa.Table.from_pandas(df, schema=schema, preserve_index=False).to_pandas()


def write_lines(path: str, rows: Sequence[Mapping]) -> pd.DataFrame:
    df = line_frame(rows)
    write_parquet(path, df)
    return df


def prepare(model: torch.nn.Module, dtype: str, name: str) -> torch.nn.Module:
    """The model in `dtype` with eager attention and uncompiled layers (double backward); the
    attention switch is logged."""
    uncompile_layers(model)
    impl = getattr(model.config, "_attn_implementation", None)
    if impl != EAGER:
        model.set_attn_implementation(EAGER)
        log.info("%s: attention %r -> %r for this stage: HVPs need double backward", name, impl, EAGER)
    model.to(getattr(torch, dtype))
    model.eval()  # no dropout: the loss is a deterministic function of θ
    return model


def trainable(model: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def token_loss(model: torch.nn.Module, data: EvalSet, batch_size: int, device: torch.device):
    """`batch_losses` of the mean NLL over `data`'s scored tokens: per batch, its NLL sum / n_tokens."""

    def batch_losses() -> Iterator[torch.Tensor]:
        for s in range(0, len(data.inputs), batch_size):
            x = data.inputs[s : s + batch_size].to(device)
            y = data.labels[s : s + batch_size].to(device)
            logits = model(input_ids=x).logits
            nll = F.cross_entropy(
                logits.reshape(-1, logits.size(-1)), y.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum"
            )
            yield nll / data.n_tokens

    return batch_losses


@torch.no_grad()
def along_line(
    params: Sequence[torch.Tensor], direction: Vector, lambdas: Sequence[float], evaluate: Callable[[], T]
) -> list[T]:
    """evaluate() at θ + λε for each λ, the parameters set in place and restored exactly afterwards
    (WiSE-FT's θ_pre + α(θ_ft − θ_pre) is θ_ft + (α − 1)(θ_ft − θ_pre))."""
    base = [p.detach().clone() for p in params]
    out = []
    try:
        for lam in lambdas:
            for p, b, e in zip(params, base, direction, strict=True):
                p.copy_(b if lam == 0 else b + lam * e.to(b.dtype))  # λ = 0 is θ exactly, whatever ε holds
            out.append(evaluate())
    finally:
        for p, b in zip(params, base, strict=True):
            p.copy_(b)
    return out


def line_losses(
    model: torch.nn.Module,
    params: Sequence[torch.Tensor],
    direction: Vector,
    lambdas: Sequence[float],
    loss_fn,
) -> list[float]:
    """L(θ + λε) for each λ (`along_line`)."""
    return along_line(params, direction, lambdas, lambda: float(sum(float(lb) for lb in loss_fn())))


def line_rows(
    model: torch.nn.Module,
    data: EvalSet,
    directions: Sequence[tuple[dict, Vector]],
    grids: Mapping[str, Sequence[float]],
    cfg: CurvatureConfig,
    common: Mapping,
) -> list[dict]:
    """Rows of every direction's line: (fields of the line, ε aligned with `trainable(model)`).

    One double-backward pass gives L(θ), gᵀε and εᵀHε of all directions; then each λ of each grid is
    one forward pass.
    """
    device = next(model.parameters()).device
    params = [p for _, p in trainable(model)]
    loss_fn = token_loss(model, data, cfg.batch_size, device)
    loss0, gdots, curvs = directional(loss_fn, params, [e for _, e in directions])
    rows = []
    for (fields, eps), gd, curv in zip(directions, gdots, curvs, strict=True):
        losses = {g: line_losses(model, params, eps, lams, loss_fn) for g, lams in grids.items()}
        fd = fd_curvature(grids["small"], losses["small"], loss0)
        norm = math.sqrt(sum(float(e.double().pow(2).sum()) for e in eps))
        for g, lams in grids.items():
            for lam, loss in zip(lams, losses[g], strict=True):
                rows.append(
                    {
                        **common,
                        **fields,
                        "grid": g,
                        "lambda": lam,
                        "loss": loss,
                        "quadratic": loss0 + lam * gd + 0.5 * lam**2 * curv,
                        "finite": math.isfinite(loss),
                        "loss0": loss0,
                        "grad_dot": gd,
                        "curvature": curv,
                        "curvature_fd": fd,
                        "direction_norm": norm,
                        "eval_tokens": data.n_tokens,
                    }
                )
        small = [r for r in rows[-sum(map(len, grids.values())) :] if r["grid"] == "small"]
        log.info(
            "%s line %s: L0 %.5f, gᵀε %.4g, εᵀHε %.4g (fit %.4g); rel. error of the quadratic at the "
            "smallest λ %.2e; L/quadratic at the widest λ %s",
            fields.get("direction"),
            {k: v for k, v in fields.items() if k != "direction" and v is not None},
            loss0,
            gd,
            curv,
            fd,
            smallest_lambda_error(small),
            _widest(rows[-len(grids["wide"]) :]),
        )
    return rows


def _widest(rows: Sequence[Mapping]) -> str:
    r = max(rows, key=lambda r: r["lambda"])
    return f"λ={r['lambda']:g}: {r['loss']:.4g} vs {r['quadratic']:.4g}"


def finetune_direction(
    model: torch.nn.Module, reference: Mapping[str, torch.Tensor]
) -> tuple[list[tuple[str, torch.nn.Parameter]], Vector]:
    """Set `model` from θ_ft to θ_pre (`reference`) in place; returns its parameters and θ_ft − θ_pre."""
    named = trainable(model)
    eps = []
    with torch.no_grad():
        for n, p in named:
            ref = reference[n].to(p.device, p.dtype)
            eps.append(p.detach() - ref)
            p.copy_(ref)
    return named, eps
