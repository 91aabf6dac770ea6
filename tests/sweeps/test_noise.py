import pytest
import torch

from pipeline.models.build import init_std, init_std_from_config
from pipeline.sweeps.noise import perturb_gaussian, perturbed


def _snapshot(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_noise_has_gamma_times_init_std_per_tensor(tiny_model):
    stds = init_std(tiny_model)
    before = _snapshot(tiny_model)
    gamma = 3.0
    n = perturb_gaussian(tiny_model, stds, gamma, seed=7)
    assert n == sum(1 for s in stds.values() if s > 0)
    for name, p in tiny_model.named_parameters():
        noise = p.detach() - before[name]
        if stds[name] == 0.0:
            assert torch.equal(noise, torch.zeros_like(noise)), f"{name} has init std 0 and must get no noise"
            continue
        # std of N samples has relative sd ~ 1/sqrt(2N); smallest tensors have 1024 entries
        tol = 5 / (2 * noise.numel()) ** 0.5
        assert noise.std().item() == pytest.approx(gamma * stds[name], rel=tol), name
        assert abs(noise.mean().item()) < 5 * gamma * stds[name] / noise.numel() ** 0.5, name


def test_same_seed_same_noise_and_seeds_differ(tiny_model):
    stds = init_std(tiny_model)
    base = _snapshot(tiny_model)
    perturb_gaussian(tiny_model, stds, 1.0, seed=1)
    a = _snapshot(tiny_model)
    tiny_model.load_state_dict(base, strict=False)
    perturb_gaussian(tiny_model, stds, 1.0, seed=1)
    b = _snapshot(tiny_model)
    tiny_model.load_state_dict(base, strict=False)
    perturb_gaussian(tiny_model, stds, 1.0, seed=2)
    c = _snapshot(tiny_model)
    name = "model.layers.0.mlp.up_proj.weight"
    assert torch.equal(a[name], b[name])
    assert not torch.equal(a[name], c[name])


def test_noise_scales_linearly_with_gamma(tiny_model):
    stds = init_std(tiny_model)
    base = _snapshot(tiny_model)
    name = "lm_head.weight"
    perturb_gaussian(tiny_model, stds, 1.0, seed=3)
    one = tiny_model.get_parameter(name).detach() - base[name]
    tiny_model.load_state_dict(base, strict=False)
    perturb_gaussian(tiny_model, stds, 4.0, seed=3)
    four = tiny_model.get_parameter(name).detach() - base[name]
    torch.testing.assert_close(four, 4 * one, rtol=1e-4, atol=1e-6)


def test_perturbed_context_restores_weights_exactly(tiny_model):
    stds = init_std(tiny_model)
    base = _snapshot(tiny_model)
    with perturbed(tiny_model, stds, 6.0, seed=0):
        assert not torch.equal(tiny_model.get_parameter("lm_head.weight"), base["lm_head.weight"])
    for name, p in tiny_model.named_parameters():
        assert torch.equal(p, base[name]), name


def test_negative_gamma_is_rejected(tiny_model):
    with pytest.raises(ValueError, match="gamma must be >= 0"):
        perturb_gaussian(tiny_model, init_std(tiny_model), -1.0, seed=0)


def test_init_std_from_config_matches_hf_initialisation(tiny_model):
    recorded = init_std(tiny_model)
    from_config = init_std_from_config(tiny_model, tiny_model.config)
    assert set(recorded) == set(from_config)
    for name, std in from_config.items():
        assert recorded[name] == pytest.approx(std, abs=2e-3), name


def test_bf16_parameters_keep_dtype(tiny_model):
    model = tiny_model.to(torch.bfloat16)
    stds = init_std(model)
    perturb_gaussian(model, stds, 2.0, seed=0)
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
