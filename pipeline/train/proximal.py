"""How λ pulls θ toward θ_pre during fine-tuning (`finetune.methods.<name>.proximal`), after
"Linearization Explains Fine-Tuning in Large Language Models" (Section 3):

- coupled: the penalty λ‖θ − θ_pre‖² in the loss (`proximal_term`, the main paper's Section 4);
- decoupled: after each optimizer step θ ← θ − λη(θ − θ_pre), η the step's learning rate (eq. 5);
- selective: that step only on the tensors whose gradient points away from θ_pre,
  ⟨∇L(θ), θ − θ_pre⟩ ≥ 0, measured before the optimizer step (eq. 8), per parameter tensor.

Over the trained parameters only (`requires_grad`); in a sharded run over this rank's shards, the
selective inner products summed over ranks first, so every rank decides alike.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from pipeline.ranks import SINGLE, Ranks
from pipeline.train.distributed import local


def proximal_term(model: torch.nn.Module, reference: Mapping[str, torch.Tensor], lam: float):
    """λ‖θ − θ_ref‖² over all trainable parameters (a callable for `train(extra_loss=...)`); in a
    sharded run over this rank's shards (`reference` holds them), whose gradients it alone adds."""

    def term(m: torch.nn.Module) -> torch.Tensor:
        diffs = [(local(p) - reference[n]).pow(2).sum() for n, p in m.named_parameters() if p.requires_grad]
        return lam * torch.stack(diffs).sum()

    return term


class ProximalStep:
    """The decoupled (eq. 5) or selective (eq. 8) step toward θ_pre, for `train(proximal_step=...)`:
    the loop calls `before_step()` with the gradients in place and `after_step(lr)` after the
    optimizer's step."""

    def __init__(
        self,
        model: torch.nn.Module,
        reference: Mapping[str, torch.Tensor],
        lam: float,
        selective: bool,
        ranks: Ranks = SINGLE,
    ):
        self.pairs = [(p, reference[n]) for n, p in model.named_parameters() if p.requires_grad]
        self.lam, self.selective, self.ranks = lam, selective, ranks
        self.applied: torch.Tensor | None = None  # which tensors the last step pulled back
        self.fraction_applied: list[float] = []  # per step: the share of tensors pulled back

    @torch.no_grad()
    def before_step(self) -> None:
        if not self.selective:
            return
        dots = torch.stack(
            [
                (local(p.grad).double() * (local(p).double() - ref.double())).sum()
                if p.grad is not None
                else torch.zeros((), dtype=torch.float64, device=ref.device)
                for p, ref in self.pairs
            ]
        )
        self.applied = self.ranks.all_sum(dots) >= 0

    @torch.no_grad()
    def after_step(self, lr: float) -> None:
        scale = self.lam * lr
        mask = self.applied.tolist() if self.applied is not None else [True] * len(self.pairs)
        for (p, ref), on in zip(self.pairs, mask, strict=True):
            if on:
                mine = local(p)
                mine.sub_(scale * (mine - ref.to(mine.dtype)))
        self.fraction_applied.append(sum(mask) / max(len(mask), 1))
