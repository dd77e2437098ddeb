"""`evaluate_rows` with sampled hypotheses after the beams (issue 12 item 7: sampling for
diversity): the beam's hypotheses come first and unchanged, samples only add distinct
programs, and a seeded run repeats exactly."""

from __future__ import annotations

import torch

from tasmopt.model.config import ModelConfig
from tasmopt.model.model import TasmModel
from tasmopt.train.evaluate import evaluate_rows

TINY = ModelConfig(
    d_model=32, gnn_layers=1, gnn_heads=2, d_edge=8, dec_layers=1, dec_heads=2, d_ff=64
)


def _rows(example_rows):
    return [r for r in example_rows if 2 <= len(r.baseline) <= 10][:6]


def test_samples_add_hypotheses_after_the_beam(example_rows) -> None:
    torch.manual_seed(0)
    model = TasmModel(TINY).eval()
    rows = _rows(example_rows)
    assert rows
    beam = evaluate_rows(model, rows, k=2)
    more = evaluate_rows(model, rows, k=2, samples=6, temperature=1.5, seed=3)
    again = evaluate_rows(model, rows, k=2, samples=6, temperature=1.5, seed=3)
    for b, m, a in zip(beam, more, again):
        assert m.hypotheses >= b.hypotheses
        assert m.valid_hypotheses >= b.valid_hypotheses
        assert m.top1_valid == b.top1_valid  # the beam's best stays first
        assert (m.hypotheses, m.valid_hypotheses, m.best) == (
            a.hypotheses,
            a.valid_hypotheses,
            a.best,
        )
    # an untrained model's samples at a high temperature are (almost surely) not its beams
    assert sum(m.hypotheses for m in more) > sum(b.hypotheses for b in beam)
