"""The named fine-tuning learning-rate grids (`finetune.learning_rates: paper | instruct | llava`): the
values a fixed-grid sweep fans out over and an adaptive search starts from. Light: read at parse
time."""

from __future__ import annotations

# Table 4: the fine-tuning learning-rate grid of the paper's controlled experiments.
PAPER_FINETUNE_LRS: tuple[float, ...] = (
    4e-6,
    8e-6,
    1e-5,
    2e-5,
    4e-5,
    5e-5,
    6e-5,
    7e-5,
    8e-5,
    9e-5,
    1e-4,
    1.1e-4,
    1.2e-4,
    1.4e-4,
    1.6e-4,
    1.8e-4,
    2e-4,
    2.4e-4,
    4e-4,
    5e-4,
    6e-4,
    8e-4,
    1e-3,
    2e-3,
    3e-3,
    4e-3,
    6e-3,
)


# Table 2 (Appendix B.2): instruction tuning on Anthropic-HH, Alpaca and TULU.
INSTRUCT_FINETUNE_LRS: tuple[float, ...] = (1e-6, 5e-6, 1e-5, 5e-5, 8e-5, 1e-4, 2e-4)


# Table 2 (Appendix B.2): LLaVA's stage 2 (visual instruction tuning; pipeline/multimodal).
LLAVA_FINETUNE_LRS: tuple[float, ...] = (8e-6, 1e-5, 2e-5, 4e-5, 1e-4)


# Named learning-rate grids: `finetune.learning_rates: paper | instruct | llava` (the schema's enum).
FINETUNE_LR_GRIDS: dict[str, tuple[float, ...]] = {
    "paper": PAPER_FINETUNE_LRS,
    "instruct": INSTRUCT_FINETUNE_LRS,
    "llava": LLAVA_FINETUNE_LRS,
}


def finetune_lr_grid(value: str | list[float] | tuple[float, ...]) -> tuple[float, ...]:
    """`finetune.learning_rates`: a list of values or the name of a grid in FINETUNE_LR_GRIDS."""
    if isinstance(value, str):
        if value not in FINETUNE_LR_GRIDS:
            raise ValueError(
                f"finetune.learning_rates: unknown grid {value!r}; "
                f"expected a list of numbers or one of {sorted(FINETUNE_LR_GRIDS)}"
            )
        return FINETUNE_LR_GRIDS[value]
    return tuple(value)
