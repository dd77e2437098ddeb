"""Greedy decoding with baseline drafts (`tasmopt.model.speculative`) is greedy decoding:
the same tokens as beam search with one beam, whatever the weights, in fewer passes when the
model copies the baseline; it respects the grammar and stops when asked."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from modelkit import tiny_config

from tasmopt.model.beam import beam_search
from tasmopt.model.checkpoint import load_model
from tasmopt.model.graph import batch_graphs
from tasmopt.model.inputs import block_data
from tasmopt.model.model import TasmModel
from tasmopt.model.speculative import draft_from, greedy_decode
from tasmopt.model.vocab import EOS

SHIPPED = Path(__file__).resolve().parents[2] / "model_store" / "s1-corpus-v1"


def _batch(blocks, max_len: int):
    datas, imms = [], []
    for ops, entry, net, base in blocks:
        d, m = block_data(ops, entry, net, base, max_len=max_len)
        datas.append(d)
        imms.append(m)
    return batch_graphs(datas), imms


def test_draft_realigns_after_an_edit() -> None:
    base = [10, 11, 12, 13, 14, EOS]
    assert draft_from(base, [], 0, 3) == ([10, 11, 12], 0)
    # a token inserted after 11: the output's suffix [..., 11, 99] is not in the baseline,
    # so the draft resumes where the previous one left off
    assert draft_from(base, [10, 11, 99], 2, 4) == ([12, 13, 14, EOS], 2)
    # 12 deleted: the suffix [11, 13] -> [13] matches at index 4
    assert draft_from(base, [10, 11, 13], 3, 9) == ([14, EOS], 4)
    # of two matches the one nearest the expected index wins
    assert draft_from([7, 1, 7, 2, EOS], [7], 3, 2) == ([2, EOS], 3)
    assert draft_from(base, [10], 1, 0) == ([], 1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equals_one_beam_on_a_random_model(example_blocks, seed: int) -> None:
    torch.manual_seed(seed)
    model = TasmModel(tiny_config(dec_layers=2)).eval()
    blocks = [b for b in example_blocks if len(b[3]) <= 40]
    batch, imms = _batch(blocks, 64)
    want = beam_search(model, batch, imms, k=1, draft=0)
    for draft in (0, 1, 5, 16):
        got = greedy_decode(model, batch, imms, draft=draft)
        assert [[h.tokens for h in x] for x in got] == [[h.tokens for h in x] for x in want]
        for g, w in zip(got, want):
            for a, b in zip(g, w):
                assert a.logprob == pytest.approx(b.logprob, abs=1e-4)


def test_equals_one_beam_on_the_shipped_model_in_fewer_passes(example_blocks) -> None:
    """The shipped checkpoint copies most of the baseline: the drafts are accepted and the
    passes fall well below one per token."""
    model = load_model(SHIPPED, "cpu").eval()
    batch, imms = _batch(example_blocks, model.config.max_len)
    want = beam_search(model, batch, imms, k=1, draft=0)
    plain: dict[str, int] = {}
    drafted: dict[str, int] = {}
    assert greedy_decode(model, batch, imms, draft=0, counts=plain) is not None
    got = greedy_decode(model, batch, imms, draft=16, counts=drafted)
    assert [[h.tokens for h in x] for x in got] == [[h.tokens for h in x] for x in want]
    assert sum(1 for x in got if x) == len(example_blocks)
    assert 3 * drafted["passes"] <= 2 * plain["passes"]


def test_stop_leaves_unfinished_blocks_without_a_hypothesis(example_blocks) -> None:
    torch.manual_seed(0)
    model = TasmModel(tiny_config()).eval()
    batch, imms = _batch(example_blocks[:6], 64)
    assert greedy_decode(model, batch, imms, stop=lambda: True) == [[] for _ in range(6)]
    calls = iter([False, True])
    cut = greedy_decode(model, batch, imms, draft=0, stop=lambda: next(calls))
    # one pass emits one token: only a block whose first token is EOS could be done
    assert all(not x or not x[0].tokens for x in cut)


def test_a_pass_budget_keeps_the_blocks_finished_within_it_and_drops_the_rest(
    example_blocks,
) -> None:
    """``max_passes``: the decode stops after that many forward passes; every block that
    finished by then has exactly its uncapped hypothesis, the others none; enough passes
    change nothing."""
    model = load_model(SHIPPED, "cpu").eval()
    batch, imms = _batch(example_blocks, model.config.max_len)
    counts: dict[str, int] = {}
    full = greedy_decode(model, batch, imms, counts=counts)
    assert counts["passes"] > 2
    for cap in (1, 2, counts["passes"] - 1):
        seen: dict[str, int] = {}
        got = greedy_decode(model, batch, imms, max_passes=cap, counts=seen)
        assert seen["passes"] == cap
        assert any(not g for g in got)  # the block needing the most passes is cut
        for g, f in zip(got, full):
            assert not g or [h.tokens for h in g] == [h.tokens for h in f]
    same = greedy_decode(model, batch, imms, max_passes=counts["passes"])
    assert [[h.tokens for h in x] for x in same] == [[h.tokens for h in x] for x in full]
    via_beam = beam_search(model, batch, imms, k=1, max_passes=1)
    assert [[h.tokens for h in x] for x in via_beam] == [
        [h.tokens for h in x] for x in greedy_decode(model, batch, imms, max_passes=1)
    ]
