"""How λ pulls θ toward θ_pre during fine-tuning (`finetune.methods.<name>.proximal`), after
"Linearization Explains Fine-Tuning in Large Language Models" (Section 3):

- coupled: the penalty λ‖θ − θ_pre‖² in the loss (`ProximalTerm`, the main paper's Section 4);
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
from pipeline.train.loop import Callback, Loop


class ProximalTerm(Callback):
    """The coupled penalty λ‖θ − θ_ref‖² over all trainable parameters, added to the loss; in a
    sharded run over this rank's shards (`reference` holds them), whose gradients it alone adds."""

    def __init__(self, reference: Mapping[str, torch.Tensor], lam: float):
        self.reference, self.lam = reference, lam

    def extra_loss(self, model: torch.nn.Module) -> torch.Tensor:
        diffs = [
            (local(p) - self.reference[n]).pow(2).sum()
            for n, p in model.named_parameters()
            if p.requires_grad
        ]
        return self.lam * torch.stack(diffs).sum()


class ProximalStep(Callback):
    """The decoupled (eq. 5) or selective (eq. 8) step toward θ_pre around each optimizer step.

    The selective test and the step stay on the device (no read-back to the host, no float64
    copies): each tensor's ⟨∇L, θ − θ_pre⟩ in its own dtype, and the step multiplied by 0 where the
    test fails. The share of tensors pulled back per step is read at the end (`fraction_applied`).
    """

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
        self.applied: torch.Tensor | None = (
            None  # which tensors the last step pulls back (bool, on the device)
        )
        self.counts: list[torch.Tensor] = []  # per step: how many tensors were pulled back

    @property
    def fraction_applied(self) -> list[float]:
        """Per step: the share of tensors pulled back."""
        n = len(self.pairs)
        return [k / max(n, 1) for k in torch.stack(self.counts).tolist()] if self.counts else []

    @torch.no_grad()
    def before_step(self, loop: Loop | None = None) -> None:
        if not self.selective:
            return
        dots = torch.stack(
            [
                torch.vdot(local(p.grad).flatten(), (local(p) - ref).flatten()).float()
                if p.grad is not None
                else torch.zeros((), device=ref.device)
                for p, ref in self.pairs
            ]
        )
        self.applied = self.ranks.all_sum(dots) >= 0

    @torch.no_grad()
    def after_step(self, loop: Loop | float) -> None:
        """The step with the learning rate of the step just taken (`loop.lr`, or the rate itself)."""
        scale = self.lam * (loop if isinstance(loop, float) else loop.lr)
        if self.applied is None:
            for p, ref in self.pairs:
                mine = local(p)
                mine.sub_(scale * (mine - ref.to(mine.dtype)))
            self.counts.append(torch.tensor(len(self.pairs)))
            return
        for (p, ref), on in zip(self.pairs, self.applied, strict=True):
            mine = local(p)
            mine.sub_((scale * (mine - ref.to(mine.dtype))).mul_(on))  # x 1 exactly, or x 0
        self.counts.append(self.applied.sum())
