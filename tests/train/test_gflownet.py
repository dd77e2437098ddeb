"""Stage 2: trajectory balance with a conditional log Z head, verifier rewards, annealed
temperature, and a checkpoint that resumes and is written with its lineage."""

from __future__ import annotations

import math

import pytest
import torch

from tasmopt.model.checkpoint import read_config, save_checkpoint
from tasmopt.model.config import ModelConfig
from tasmopt.model.graph import batch_graphs
from tasmopt.model.model import TasmModel
from tasmopt.model.vocab import EOS, PAD
from tasmopt.train.gflownet import (
    LOGZ_FILE,
    PARTIAL_CREDIT,
    LogZHead,
    Stage2Config,
    _anchor_tokens,
    _inputs,
    _Rewards,
    temperature_at,
    train_stage2,
    trajectory_balance,
)

TINY = ModelConfig(
    d_model=32, gnn_layers=1, gnn_heads=2, d_edge=8, dec_layers=1, dec_heads=2, d_ff=64
)


@pytest.fixture()
def rows(example_rows):
    return [r for r in example_rows if 1 <= len(r.baseline) <= 8][:6]


def test_temperature_is_annealed_from_start_to_end():
    assert (Stage2Config().temperature_start, Stage2Config().temperature_end) == (1.0, 0.5)
    cfg = Stage2Config(steps=11, temperature_start=2.0)
    assert temperature_at(0, cfg) == 2.0 and temperature_at(10, cfg) == pytest.approx(0.5)
    assert temperature_at(5, cfg) == pytest.approx(1.25)


def test_rewards_follow_design_section_4(rows):
    cfg = Stage2Config(partial_steps=10)
    rewards = _Rewards(cfg)
    row = rows[0]
    value, ok = rewards(row, list(row.baseline), step=50)
    assert ok and value == pytest.approx(1.0)  # a copy: valid, no saving
    bad = ["push 12345", *row.baseline]
    assert rewards(row, bad, step=50) == (pytest.approx(1e-3), False)
    assert rewards(row, bad, step=3) == (PARTIAL_CREDIT, False)  # warm-up partial credit


def test_pooled_verification_gives_the_in_process_rewards(rows):
    """The verifier pool (for GPU runs, where verification is the bottleneck) must reward
    exactly what the in-process verifier does, in the same order, rejections included."""
    items = []
    for row in rows[:3]:
        items.append((row, list(row.baseline)))
        items.append((row, ["push 7", "pop 1", *row.baseline]))  # equivalent, slower
        items.append((row, ["push 12345", *row.baseline]))  # changes the op stack
    serial = _Rewards(Stage2Config(partial_steps=0)).many(items, step=5)
    pooled_rewards = _Rewards(Stage2Config(partial_steps=0, verify_workers=2))
    try:
        pooled = pooled_rewards.many(items, step=5)
    finally:
        pooled_rewards.close()
    assert pooled == serial
    assert [ok for _, ok in serial] == [True, True, False] * 3


def test_log_z_is_predicted_per_block_and_the_loss_is_trajectory_balance(rows):
    torch.manual_seed(0)
    model, head = TasmModel(TINY).eval(), LogZHead(TINY.d_model)  # no dropout: repeatable
    inputs = _inputs(rows[:2], model)
    batch = batch_graphs([inputs[0][0], inputs[1][0]])
    enc = model.encode(batch)
    log_z = head(enc.memory, enc.memory_mask)
    assert log_z.shape == (2,) and not torch.allclose(log_z[0], log_z[1])  # conditional
    tokens = torch.tensor([[EOS, PAD], [EOS, PAD]])
    loss, log_pf, log_z2 = trajectory_balance(model, head, batch, tokens, torch.zeros(2))
    assert loss.item() == pytest.approx(((log_z2 + log_pf) ** 2).mean().item(), rel=1e-5)
    loss.backward()
    assert head.net[0].weight.grad is not None
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    # exact balance: a reward equal to Z * P_F gives zero loss
    balanced = (log_z2 + log_pf).detach()
    zero, _, _ = trajectory_balance(model, head, batch, tokens, balanced)
    assert zero.item() == pytest.approx(0.0, abs=1e-6)


def test_a_stage2_run_resumes_and_writes_its_lineage(tmp_path, rows):
    torch.manual_seed(0)
    parent = save_checkpoint(TasmModel(TINY), tmp_path / "tiny-v1", "tiny-v1")
    cfg = Stage2Config(
        steps=3, blocks=3, samples=4, device="cpu", partial_steps=1, temperature_start=2.0
    )
    res = train_stage2(parent, rows, tmp_path, "tiny-s2", cfg)
    assert len(res.history) == 3
    assert all(math.isfinite(h["loss"]) and h["trajectories"] > 0 for h in res.history)
    assert [h["temperature"] for h in res.history] == [2.0, 1.25, 0.5]
    config = read_config(res.checkpoint)
    assert config["stage"] == "gflownet" and config["parent"] == "tiny-v1"
    assert (res.checkpoint / LOGZ_FILE).exists()
    again = train_stage2(res.checkpoint, rows, tmp_path, "tiny-s2b", Stage2Config(steps=1))
    assert read_config(again.checkpoint)["parent"] == "tiny-s2"


def test_anchors_are_the_verified_targets_and_can_be_turned_off(tmp_path, rows):
    """Each step trains on the picked blocks' verified targets (off-policy trajectories with
    their known reward) unless ``anchors=False``; the sampled share is reported apart."""
    model = TasmModel(TINY)
    tokens = _anchor_tokens(rows, model)
    encodable = [t for t in tokens if t is not None]
    assert encodable and all(t[-1] == EOS for t in encodable)
    torch.manual_seed(0)
    parent = save_checkpoint(model, tmp_path / "tiny-v1", "tiny-v1")
    on = train_stage2(parent, rows, tmp_path, "a", Stage2Config(steps=2, blocks=len(rows)))
    assert all(h["anchors"] == len(encodable) for h in on.history)
    off = train_stage2(
        parent, rows, tmp_path, "b", Stage2Config(steps=2, blocks=len(rows), anchors=False)
    )
    assert all(h["anchors"] == 0 for h in off.history)
    assert all(0.0 <= h["valid_share"] <= 1.0 for h in on.history + off.history)
