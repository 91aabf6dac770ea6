"""A training step never waits for the host: the loop reads device values back once per logging step
(the losses since the last one), counted here op by op while a tiny model trains."""

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from pipeline.data.batches import IGNORE_INDEX
from pipeline.train.config import TrainConfig
from pipeline.train.loop import Callback, train
from pipeline.train.proximal import ProximalStep, ProximalTerm

# ops that make the host wait for the device: a value read back (.item(), int(), bool(), float()),
# or an output whose size depends on the values (boolean indexing)
WAITING_OPS = {
    torch.ops.aten._local_scalar_dense.default,
    torch.ops.aten.nonzero.default,
    torch.ops.aten.masked_select.default,
}
# not per step: the fused head's overflow check runs on CPU only (on CUDA its max-shift path reads
# nothing back: on the CPU it reads host memory, not a device); its probe of the model runs once, at
# the start of a run
NOT_STEPS = {("losses.py", "_chunk_nll"), ("losses.py", "_probe_agrees")}


def _site() -> tuple[str, str]:
    """The read's call site: the innermost pipeline frame (file name, function), or the frame of
    NOT_STEPS it is made under."""
    import sys

    frames = []
    frame = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename
        if "/pipeline/" in path:
            frames.append((path.rsplit("/", 1)[-1], frame.f_code.co_name))
        frame = frame.f_back
    return next((f for f in frames if f in NOT_STEPS), frames[0] if frames else ("?", "?"))


class Reads(TorchDispatchMode):
    """Each read-back op's call site."""

    def __init__(self) -> None:
        super().__init__()
        self.sites: list[tuple[str, str]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in WAITING_OPS:
            self.sites.append(_site())
        return func(*args, **(kwargs or {}))


class ToList(TorchFunctionMode):
    """`Tensor.tolist`, which reads the values without a dispatched op on the CPU."""

    def __init__(self, sites: list) -> None:
        super().__init__()
        self.sites = sites

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.tolist:
            self.sites.append(_site())
        return func(*args, **(kwargs or {}))


def _batches(vocab: int):
    def batch(step: int) -> dict[str, torch.Tensor]:
        rows = torch.from_numpy(np.random.default_rng(step).integers(2, vocab, (4, 17)))
        labels = rows[:, 1:].clone()
        labels[0, 10:] = IGNORE_INDEX  # a padded row: the micro-batches' shares differ
        return {"input_ids": rows[:, :-1], "labels": labels}

    return batch


@pytest.mark.parametrize("micro_batch_size", [None, 2])
def test_the_host_waits_for_the_device_once_per_logging_step(tiny_model, micro_batch_size):
    """8 steps logged every 4, with the selective proximal step and the coupled term: 2 reads, both
    the losses' (loop._report), none in the steps between, none in the proximal step."""
    reference = {n: p.detach().clone() for n, p in tiny_model.named_parameters()}
    step = ProximalStep(tiny_model, reference, 0.5, selective=True)
    callbacks = [ProximalTerm(reference, 0.01), step]
    cfg = TrainConfig(steps=8, lr=1e-2, log_every=4)
    with Reads() as reads, ToList(reads.sites):
        result = train(
            tiny_model,
            _batches(tiny_model.config.vocab_size),
            cfg,
            callbacks=callbacks,
            micro_batch_size=micro_batch_size,
        )
    waits = [s for s in reads.sites if s not in NOT_STEPS]
    assert waits == [("loop.py", "_report")] * 2
    assert len(result.losses) == 8 and all(np.isfinite(result.losses))
    assert len(step.fraction_applied) == 8  # read once, after training


def test_the_selective_test_agrees_with_float64():
    """⟨∇L, θ − θ_pre⟩ per tensor in the tensors' own dtype (no float64 copies) decides as the float64
    formula did, and the step is the same bit for bit where it applies."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(16)])
    reference = {n: p.detach().clone() for n, p in model.named_parameters()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    model(torch.randn(8, 64)).pow(2).sum().backward()
    moved = {n: p.detach().clone() for n, p in model.named_parameters()}
    old = torch.stack(
        [
            (p.grad.double() * (p.detach().double() - reference[n].double())).sum()
            for n, p in model.named_parameters()
        ]
    )
    step = ProximalStep(model, reference, 2.0, selective=True)
    step.before_step()
    assert torch.equal(step.applied, old >= 0) and 0 < int(step.applied.sum()) < len(old)
    step.after_step(0.1)
    for (n, p), on in zip(model.named_parameters(), step.applied, strict=True):
        want = moved[n].clone()
        if on:
            want.sub_(2.0 * 0.1 * (want - reference[n]))
        assert torch.equal(p.detach(), want), n


def test_each_batch_is_loaded_once_a_step_ahead(tiny_model):
    """While step s runs, batch s + 1 is already loaded (and on CUDA copied from pinned memory
    without blocking); none is loaded twice or past the last step."""
    base, loaded, seen = _batches(tiny_model.config.vocab_size), [], []

    def batch_fn(step: int) -> dict[str, torch.Tensor]:
        loaded.append(step)
        return base(step)

    class Seen(Callback):
        def after_step(self, loop) -> None:
            seen.append(list(loaded))

    train(tiny_model, batch_fn, TrainConfig(steps=4, lr=1e-3, log_every=4), callbacks=[Seen()])
    assert seen == [[0, 1], [0, 1, 2], [0, 1, 2, 3], [0, 1, 2, 3]]


def test_a_multimodal_step_finds_its_scored_positions_on_the_host():
    """A LLaVA batch scores its replies only: the loop finds their positions on the host, so the head
    takes them without a read-back (boolean indexing would wait), with the same loss and gradients
    bit for bit; two steps logged once: the loop reads back once."""
    from pipeline.models.losses import fused_head
    from pipeline.train.loop import SCORED, _batch_loss, _Batches
    from pipeline.train.placement import WHOLE
    from tests.multimodal.test_llava import _batch, build_llava, causal_lm, resize_rows, tiny_tower

    lm = causal_lm("olmo2", 100, tied=False)
    resize_rows(lm, 101)
    llava = build_llava(lm, tiny_tower(), 100, projector_seed=0).train()
    batch = _batch(llava, 100)
    batch["labels"][:, :-3] = IGNORE_INDEX
    head = fused_head(llava)
    planned = _Batches(lambda step: batch, None, WHOLE, torch.device("cpu")).take(0).parts[0][0]
    assert SCORED in planned

    def loss_and_grads(b):
        llava.zero_grad()
        loss = _batch_loss(llava, head, b)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in llava.parameters() if p.grad is not None]

    (got, got_g), (want, want_g) = loss_and_grads(planned), loss_and_grads(batch)
    assert torch.equal(got, want) and all(torch.equal(a, b) for a, b in zip(got_g, want_g, strict=True))

    with Reads() as reads, ToList(reads.sites):
        train(llava, lambda step: batch, TrainConfig(steps=2, lr=1e-3, log_every=2))
    # transformers' LLaVA forward checks its image tokens against the features (its own reads, in
    # body_hidden); the loop adds only the losses' read-back
    assert [s for s in reads.sites if s[0] == "loop.py"] == [("loop.py", "_report")]
