"""WiSE-FT (Wortsman et al., 2022) inside a fine-tuning job: the weight-space interpolation
θ_pre + α(θ_ft − θ_pre) evaluated at each α of `finetune.wise_ft_alphas`, without more training.
α = 0 is the checkpoint, α = 1 the fine-tuned model; the front (in-domain vs pre-training
perplexity along α) shows how much forgetting an interpolation buys back. The model is moved
along the curvature stage's line machinery (`lines.along_line`, ε = θ_ft − θ_pre, λ = α − 1).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from pipeline.curvature.lines import along_line

if TYPE_CHECKING:
    import torch


def wise_ft(
    params: Mapping[str, torch.Tensor],
    reference: Mapping[str, torch.Tensor],
    alphas: Sequence[float],
    evaluate: Callable[[], dict],
) -> list[tuple[float, dict]]:
    """(α, evaluate() at θ_pre + α(θ_ft − θ_pre)) for each α, over the tensors `params` (what
    fine-tuning changed, at θ_ft, by name: whole parameters, or this rank's shards of them, moved
    in place) and `reference` (θ_pre of the same parts); `params` are restored exactly afterwards."""
    names = list(params)
    moved = [params[n] for n in names]
    direction = [p.detach() - reference[n].to(p.device, p.dtype) for n, p in zip(names, moved, strict=True)]
    results = along_line(moved, direction, [a - 1.0 for a in alphas], evaluate)
    return list(zip(alphas, results, strict=True))
