"""Activation checkpointing: keep only each decoder layer's input in the forward pass and recompute
the layer's activations in the backward pass (~1/3 more compute for activation memory that no
longer grows with the layer count). Numbers do not change
(tests/train/test_precision.py::test_activation_checkpointing_gives_equal_gradients_by_recomputing)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def enable_activation_checkpointing(model: torch.nn.Module) -> None:
    """Checkpoint every decoder layer through transformers' own switch (non-reentrant
    torch.utils.checkpoint, which composes with FSDP2 and autocast). `activation_checkpointing_enable`
    is the newer name of `gradient_checkpointing_enable` (deprecated in transformers 5.23); both work."""
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise ValueError(
            f"activation_checkpointing: {type(model).__name__} does not support gradient checkpointing; "
            "set activation_checkpointing: false"
        )
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
