"""What a decoder layer saves for the backward pass per token, measured, against the memory planner
(pipeline/train/memory.py `activation_bytes`), on this machine's device: OLMo-2 and OLMo (v1)
layers, float32 and bf16 autocast, SDPA attention. Saved-tensor hooks count the second layer's
saved tensors (parameters excluded) at two sequence lengths; the slope between them is the bytes
per token (the weights' autocast copies, constant in tokens, drop out). Then the peak of whole
training steps against the planner's total.

usage: python bench/bench_activation_memory.py [--device cuda] [--tokens 1024 2048]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.models.shapes import ModelShape, shape_of  # noqa: E402
from pipeline.train.memory import GIB, activation_bytes, estimate  # noqa: E402


def layer_model(arch: str, shape: ModelShape, layers: int, device: torch.device) -> torch.nn.Module:
    """A random model of `arch` (olmo2 | olmo) with SDPA attention."""
    from transformers import Olmo2Config, Olmo2ForCausalLM, OlmoConfig, OlmoForCausalLM

    config_cls, model_cls = (
        (Olmo2Config, Olmo2ForCausalLM) if arch == "olmo2" else (OlmoConfig, OlmoForCausalLM)
    )
    config = config_cls(
        vocab_size=shape.vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        max_position_embeddings=4096,
        pad_token_id=0,
        bos_token_id=0,
        eos_token_id=0,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    return model_cls(config).to(device).train()


def saved_bytes(model: torch.nn.Module, tokens: int, autocast: bool, device: torch.device) -> int:
    """Bytes the second decoder layer saves for backward (parameters excluded) on 1 x `tokens`."""
    params = {p.data_ptr() for p in model.parameters()}
    inside, seen = [False], {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if inside[0] and t.data_ptr() not in params:
            seen.setdefault(t.data_ptr(), t.numel() * t.element_size())
        return t

    layer = model.model.layers[1]
    hooks = [
        layer.register_forward_pre_hook(lambda *a: inside.__setitem__(0, True)),
        layer.register_forward_hook(lambda *a: inside.__setitem__(0, False)),
    ]
    ids = torch.randint(0, model.config.vocab_size, (1, tokens), device=device)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            model(input_ids=ids).logits.float().sum().backward()
    for h in hooks:
        h.remove()
    return sum(seen.values())


def peak_of_steps(shape: ModelShape, batch: int, seq_len: int, device: torch.device) -> tuple[float, float]:
    """Peak GiB of two bf16-mixed training steps by the pipeline's loop, and the planner's GiB."""
    from pipeline.train.config import TrainConfig
    from pipeline.train.loop import train

    model = layer_model("olmo2", shape, shape.layers, device)

    def batch_fn(step: int) -> dict[str, torch.Tensor]:
        rows = torch.randint(
            2, shape.vocab, (batch, seq_len + 1), generator=torch.Generator().manual_seed(step)
        )
        return {"input_ids": rows[:, :-1], "labels": rows[:, 1:]}

    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    train(model, batch_fn, TrainConfig(steps=2, lr=1e-4, precision="bf16-mixed"))
    planned = estimate(shape_of(model.config), 1, batch, seq_len, "bf16-mixed", False)
    return torch.cuda.max_memory_allocated(device) / GIB, planned.total / GIB


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tokens", type=int, nargs=2, default=[1024, 2048])
    args = ap.parse_args()
    device = torch.device(args.device)
    shapes = {
        "h1024-i4096": ModelShape(
            layers=2, hidden=1024, intermediate=4096, heads=16, kv_heads=16, vocab=8192
        ),
        "h2048-i8192 (OLMo-1B)": ModelShape(
            layers=2, hidden=2048, intermediate=8192, heads=16, kv_heads=16, vocab=8192
        ),
        "h512-i1376-gqa": ModelShape(
            layers=2, hidden=512, intermediate=1376, heads=8, kv_heads=2, vocab=8192
        ),
    }
    print(f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'})")
    print("shape | arch | precision | saved B/token/layer | planner | measured/planner | per hidden unit")
    t1, t2 = args.tokens
    for name, shape in shapes.items():
        for arch in ("olmo2", "olmo"):
            model = layer_model(arch, shape, 2, device)
            for autocast in (False, True):
                slope = (
                    saved_bytes(model, t2, autocast, device) - saved_bytes(model, t1, autocast, device)
                ) / (t2 - t1)
                precision = "bf16-mixed" if autocast else "fp32"
                planned = activation_bytes(shape, precision)
                print(
                    f"{name} | {arch} | {precision} | {slope:,.0f} | {planned:,} | {slope / planned:.3f} | "
                    f"{slope / shape.hidden:.1f}"
                )
            del model
    if device.type == "cuda":
        print("whole steps (bf16-mixed, olmo2): shape | batch x seq | peak GiB | planner GiB | ratio")
        for shape, batch, seq in (
            (
                ModelShape(layers=8, hidden=1024, intermediate=4096, heads=16, kv_heads=16, vocab=8192),
                8,
                1024,
            ),
            (ModelShape(layers=6, hidden=384, intermediate=1536, heads=6, kv_heads=6, vocab=50304), 64, 1024),
        ):
            peak, planned = peak_of_steps(shape, batch, seq, device)
            print(f"{shape} | {batch} x {seq} | {peak:.2f} | {planned:.2f} | {peak / planned:.3f}")


if __name__ == "__main__":
    main()
