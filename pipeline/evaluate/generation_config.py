"""How responses are generated (config `alpaca_eval.generation`); pipeline/evaluate/generation.py
generates them. Light: the study config is parsed at workflow start-up, so this module imports
neither torch nor transformers."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GenerationConfig:
    """Settings of HF `generate` for the judged responses; every field changes the responses."""

    max_new_tokens: int = 256
    batch_size: int = 8
    do_sample: bool = False  # False: greedy
    temperature: float = 0.7  # with do_sample
    top_p: float = 0.9  # with do_sample
    seed: int = 0  # with do_sample: the sampling generator's seed

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1 or self.batch_size < 1:
            raise ValueError("generation: max_new_tokens and batch_size must be >= 1")
        if self.do_sample and not (self.temperature > 0 and 0 < self.top_p <= 1):
            raise ValueError("generation: sampling needs temperature > 0 and 0 < top_p <= 1")


@dataclass(frozen=True)
class Responses:
    """A job's responses for the judged metric: the instruction table to answer, how, and where the
    responses go."""

    instructions: str
    config: GenerationConfig
    output: str
