"""Model shapes: the dimensions that size a decoder-only model's parameters and training memory.
Torch-free: the Snakefile sizes job resources from them at parse time (pipeline/train/memory.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelShape:
    """A Llama / OLMo-style decoder: `layers` blocks of attention (grouped-query when kv_heads <
    heads) and a gated MLP, embeddings of `vocab` x `hidden`, an output layer tied to them or not."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool = False
    context: int = 2048  # positions: the sequence length when a run sets none
    attention_dropout: float = 0.0  # > 0: training keeps each head's (seq x seq) probabilities

    @property
    def kv_dim(self) -> int:
        """Width of the keys (and of the values): kv_heads x head dimension."""
        return self.kv_heads * (self.hidden // self.heads)

    @property
    def layer_params(self) -> int:
        """Parameters of one decoder block: q, o (h x h), k, v (h x kv_dim), the gated MLP (3 x h x i)
        and norm weights (at most 4 of width h)."""
        h = self.hidden
        return 2 * h * h + 2 * h * self.kv_dim + 3 * h * self.intermediate + 4 * h

    @property
    def embedding_params(self) -> int:
        """Input embeddings, the output layer unless tied, and the final norm."""
        return self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden

    @property
    def params(self) -> int:
        return self.layers * self.layer_params + self.embedding_params

    def train_flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token, the project's one formula (the sweep's GPU-hours and SLURM time
        limits, the GPU kit's MFU, the benches): 6 x the matmul parameters (the blocks and the output
        layer; not the input embedding, a lookup) plus the attention scores and their use over
        `seq_len` positions (12 x layers x width x seq_len; Kaplan et al. 2020, Table 1)."""
        return 6.0 * (self.layers * self.layer_params + self.vocab * self.hidden) + 12.0 * self.layers * (
            self.hidden * seq_len
        )


def shape_of(config) -> ModelShape:
    """The shape of a transformers config (an object with its attributes, e.g. model.config)."""
    heads = config.num_attention_heads
    return ModelShape(
        layers=config.num_hidden_layers,
        hidden=config.hidden_size,
        intermediate=config.intermediate_size,
        heads=heads,
        kv_heads=getattr(config, "num_key_value_heads", None) or heads,
        vocab=config.vocab_size,
        tied=bool(getattr(config, "tie_word_embeddings", False)),
        context=config.max_position_embeddings,
        attention_dropout=float(getattr(config, "attention_dropout", 0.0) or 0.0),
    )
