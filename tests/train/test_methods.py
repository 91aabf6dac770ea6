"""Fine-tuning methods (finetune.methods): what is trained (all, output layer, module groups, LoRA),
the proximal variants (coupled, decoupled eq. 5, selective eq. 8), replay, WiSE-FT and the
linearization gap rows of a fine-tuning job."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from pipeline.analysis.linearization_figures import plot_gap_tokens, plot_table1, plot_wise_ft
from pipeline.analysis.stats import tuned_table
from pipeline.data.replay import replay_rows, with_replay
from pipeline.models.loading import load_checkpoint
from pipeline.models.trained_params import (
    LoraSettings,
    lora_parameter_count,
    merge,
    select,
)
from pipeline.tables import metrics_frame
from pipeline.train.finetune import FinetuneConfig, task_base_rows
from pipeline.train.proximal import ProximalStep
from tests.train.test_finetune import CFG, run

LORA = {"lora": {"rank": 4, "alpha": 8.0, "target_modules": ["q_proj", "v_proj"]}}


def _model(study_files):
    model, *_ = load_checkpoint(study_files["spec"], study_files["ckpt"], "cpu", dtype=torch.float32)
    return model


def test_lora_at_initialisation_is_the_base_model_bit_for_bit(study_files):
    base = _model(study_files)
    x = torch.randint(0, base.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = base(input_ids=x).logits
    lora = LoraSettings(rank=4, alpha=8.0, target_modules=("q_proj", "v_proj"))
    expected = lora_parameter_count(base, lora)
    wrapped = select(base, LORA)
    with torch.no_grad():
        got = wrapped(input_ids=x).logits
    assert torch.equal(got, want)
    trained = sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
    cfg = wrapped.base_model.model.config
    q_out = cfg.num_attention_heads * (cfg.hidden_size // cfg.num_attention_heads)
    v_out = cfg.num_key_value_heads * (cfg.hidden_size // cfg.num_attention_heads)
    by_hand = cfg.num_hidden_layers * 4 * ((cfg.hidden_size + q_out) + (cfg.hidden_size + v_out))
    assert trained == expected == by_hand


def test_merged_lora_changes_only_the_adapted_weights(study_files):
    base = _model(study_files)
    before = {n: p.detach().clone() for n, p in base.named_parameters()}
    wrapped = select(base, LORA)
    with torch.no_grad():
        for n, p in wrapped.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.1)
    merged = merge(wrapped)
    changed = {n for n, p in merged.named_parameters() if not torch.equal(p, before[n])}
    marked = {n for n, p in merged.named_parameters() if p.requires_grad}
    assert changed == marked and changed
    assert all(n.endswith(("q_proj.weight", "v_proj.weight")) for n in changed)


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"lora": {"target_modules": ["nonexistent"]}}, r"'nonexistent' matches no module; .*q_proj"),
        ({"lora": {"rank": 4096, "target_modules": ["q_proj"]}}, r"lora.rank: 4096 is larger than .*q_proj"),
        ({"modules": ["*.nothing.*"]}, r"params.modules: '\*.nothing.\*' matches no parameter"),
    ],
)
def test_bad_trained_parameters_name_the_key(study_files, params, match):
    with pytest.raises(ValueError, match=match):
        select(_model(study_files), params)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"replay_fraction": 1.0}, r"replay_fraction: 1.0 is outside \[0, 1\)"),
        ({"wise_ft_alphas": (0.0, 0.5)}, r"wise_ft_alphas: \[0.0, 0.5\] must contain 0 .* and 1"),
        ({"proximal": "sideways"}, r"proximal: 'sideways' is unknown"),
        ({"params": "half"}, r"params: 'half' is unknown"),
    ],
)
def test_bad_method_settings_name_the_key(change, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(CFG, **change)


def test_decoupled_and_selective_steps_follow_eqs_5_and_8():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
    reference = {n: p.detach().clone() for n, p in model.named_parameters()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    model(torch.randn(4, 3)).pow(2).sum().backward()
    moved = {n: p.detach().clone() for n, p in model.named_parameters()}
    dots = {n: float((p.grad * (p.detach() - reference[n])).sum()) for n, p in model.named_parameters()}
    lam, lr = 2.0, 0.1

    decoupled = ProximalStep(model, reference, lam, selective=False)
    decoupled.before_step()
    decoupled.after_step(lr)
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.detach(), moved[n] - lam * lr * (moved[n] - reference[n]))
        p.data.copy_(moved[n])

    selective = ProximalStep(model, reference, lam, selective=True)
    selective.before_step()
    selective.after_step(lr)
    assert 0 < sum(d >= 0 for d in dots.values()) < len(dots)  # the case decides something
    for n, p in model.named_parameters():
        want = moved[n] - lam * lr * (moved[n] - reference[n]) if dots[n] >= 0 else moved[n]
        torch.testing.assert_close(p.detach(), want)
    assert selective.fraction_applied == [sum(d >= 0 for d in dots.values()) / len(dots)]


def test_replay_rows_follow_the_task_rows():
    assert replay_rows(16, 0.25) == 4 and replay_rows(16, 0.0) == 0 and replay_rows(16, 0.01) == 1
    with pytest.raises(ValueError, match="replay_fraction: 0.99 of a batch of 4 leaves no row"):
        replay_rows(4, 0.99)
    task = lambda s: {"input_ids": torch.full((3, 5), s), "labels": torch.full((3, 5), 7)}  # noqa: E731
    replay = lambda s: {"input_ids": torch.full((1, 8), 100 + s), "labels": torch.full((1, 8), 9)}  # noqa: E731
    b = with_replay(task, replay, pad_id=0)(2)
    assert b["input_ids"].shape == (4, 8)
    assert (b["input_ids"][:3, :5] == 2).all() and (b["input_ids"][:3, 5:] == 0).all()
    assert (b["labels"][:3, 5:] == -100).all() and (b["input_ids"][3] == 102).all()


def _rows(rows):
    return metrics_frame(rows)


def test_a_lora_run_is_its_own_modification_and_moves_only_adapted_weights(study_files, monkeypatch):
    from pipeline.train import finetune

    cfg = dataclasses.replace(CFG, params=LORA, epochs=1)
    runs = []
    set_up = finetune.set_up

    def set_up_and_keep(*args, **kwargs):  # the run: after evaluation its model is the merged one
        runs.append(set_up(*args, **kwargs))
        return runs[-1]

    monkeypatch.setattr(finetune, "set_up", set_up_and_keep)
    df = _rows(run(study_files, "book", lr=3e-2, cfg=cfg, method="lora"))
    assert set(df["modification"]) == {"lora"}
    (done,) = runs
    changed = {
        n
        for n, p in done.model.named_parameters()
        if not torch.equal(p.detach(), done.reference[n].to(p.dtype))
    }
    assert changed and all(n.endswith(("q_proj.weight", "v_proj.weight")) for n in changed)
    extra = json.loads(df["extra"].iloc[0])
    assert extra["params"] == LORA and extra["trained_parameters"] < 10_000
    assert df.loc[df["metric"] == "distance_l2", "value"].iloc[0] > 0


def test_proximal_variants_keep_the_model_closer(study_files):
    def distance(lam=0.0, **change):
        cfg = dataclasses.replace(CFG, epochs=1, **change)
        df = _rows(run(study_files, "book", lr=3e-2, lam=lam, cfg=cfg))
        return df, float(df.loc[df["metric"] == "distance_l2", "value"].iloc[0])

    _, free = distance()
    _, decoupled = distance(lam=5.0, proximal="decoupled")
    df, selective = distance(lam=5.0, proximal="selective")
    assert decoupled < free and selective < free
    applied = json.loads(df["extra"].iloc[0])["proximal_applied_fraction"]
    assert 0 < applied <= 1


def test_wise_ft_and_linearization_rows(study_files, tmp_path):
    cfg = dataclasses.replace(CFG, epochs=1, wise_ft_alphas=(0.0, 0.5, 1.0), linearization_tokens=256)
    rows = run(study_files, "book", lr=3e-2, cfg=cfg)
    df = _rows(rows)
    wise = df[df["metric"] == "wise_ppl"]
    alphas = wise["extra"].map(lambda e: json.loads(e)["wise_alpha"])
    at = {(d, a): v for d, a, v in zip(wise["eval_data"], alphas, wise["value"], strict=True)}
    ft_pre = df[(df["metric"] == "ppl") & (df["eval_data"] == "pretrain")]["value"].iloc[0]
    assert at[("pretrain", 1.0)] == pytest.approx(ft_pre, rel=1e-6)  # α = 1 is the fine-tuned model
    lin = df[df["metric"].str.startswith("lin_")]
    assert set(lin["eval_data"]) == {"pretrain", "book"}
    gap = lin[lin["metric"] == "lin_gap"]["value"]
    assert ((gap > 0) & (gap < 10)).all()
    loss_ft = lin[(lin["metric"] == "lin_loss_ft") & (lin["eval_data"] == "book")]["value"].iloc[0]
    assert loss_ft > 0
    # the stage's figures draw these rows (the tuned rate: the only one run)
    base = task_base_rows(
        study_files["spec"], study_files["ckpt"], study_files["dir"] / "book.parquet", "book", cfg, "t"
    )
    metrics = _rows(rows + base)
    tuned = tuned_table(metrics)
    plot_wise_ft(metrics, tuned, tmp_path / "wise", ["png"])
    plot_table1(metrics, tuned, tmp_path / "table1", ["png"])
    plot_gap_tokens(metrics, tmp_path / "gap", ["png"])
    assert all((tmp_path / f"{n}.png").stat().st_size > 10_000 for n in ("wise", "table1", "gap"))


def test_replay_changes_the_run(study_files):
    cfg = dataclasses.replace(CFG, epochs=1)
    plain = _rows(run(study_files, "book", lr=3e-2, cfg=cfg))
    mixed = _rows(run(study_files, "book", lr=3e-2, cfg=dataclasses.replace(cfg, replay_fraction=0.25)))

    def pre(df):
        return float(df[(df["metric"] == "ppl") & (df["eval_data"] == "pretrain")]["value"].iloc[0])

    assert pre(mixed) != pre(plain)
    assert json.loads(mixed["extra"].iloc[0])["replay_fraction"] == 0.25


def test_config_rows_are_recorded():
    assert {"params", "proximal", "replay_fraction"} <= set(FinetuneConfig().recorded())


def test_a_killed_lora_run_resumes_to_the_same_rows(study_files, tmp_path):
    cfg = dataclasses.replace(CFG, params=LORA, epochs=2, checkpoint_every=3)
    killed = run(study_files, "book", lr=3e-1, cfg=cfg, method="lora", state=tmp_path / "a", stop_after=4)
    assert killed == []
    resumed = run(study_files, "book", lr=3e-1, cfg=cfg, method="lora", state=tmp_path / "a")
    straight = run(study_files, "book", lr=3e-1, cfg=cfg, method="lora", state=tmp_path / "b")
    assert [r["value"] for r in resumed] == [r["value"] for r in straight]
