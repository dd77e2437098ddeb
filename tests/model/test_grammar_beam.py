"""Grammar mask and beam search on an untrained model: whatever the weights, no forbidden
token is emitted, EOS comes only at the exit depth, and the K hypotheses are distinct."""

from __future__ import annotations

import pytest
import torch
from modelkit import tiny_config

from tasmopt.isa import instruction_set
from tasmopt.lower.effects import instruction_effect
from tasmopt.model.beam import beam_search, sample
from tasmopt.model.grammar import GrammarState, GrammarTables
from tasmopt.model.graph import batch_graphs
from tasmopt.model.inputs import block_data, low_water
from tasmopt.model.model import TasmModel
from tasmopt.model.vocab import EOS, vocab


def _replay(instrs, entry: int) -> tuple[int, int, int]:
    """(final relative depth, lowest relative depth, deepest read beyond the window)."""
    table = instruction_set()
    h = low = 0
    over = 0
    for ins in instrs:
        arg = ins.arg if ins.name not in ("push", "addi") else None
        text = ins.name if arg is None else f"{ins.name} {arg}"
        over = max(over, instruction_effect(text).depth - (entry + h))
        h += table[ins.name].stack_delta(arg)
        low = min(low, h)
    return h, low, over


@pytest.fixture(scope="module")
def model() -> TasmModel:
    torch.manual_seed(0)
    return TasmModel(tiny_config()).eval()


@pytest.fixture(scope="module")
def inputs(example_blocks):
    picked = [b for b in example_blocks if 2 <= len(b[3]) <= 12][:12]
    datas, imms, meta = [], [], []
    for ops, entry, net, base in picked:
        d, m = block_data(ops, entry, net, base, max_len=64)
        datas.append(d)
        imms.append(m)
        meta.append((entry, net, low_water(base), len(base)))
    return batch_graphs(datas), imms, meta


@pytest.mark.parametrize("how", ["beam", "sample"])
def test_hypotheses_respect_the_grammar(model, inputs, how) -> None:
    batch, imms, meta = inputs
    if how == "beam":
        hyps = beam_search(model, batch, imms, k=8)
    else:
        hyps = sample(
            model, batch, imms, k=16, temperature=2.0, generator=torch.Generator().manual_seed(1)
        )
    assert sum(len(h) for h in hyps) > 0
    for hs, (entry, net, floor, n) in zip(hyps, meta):
        for h in hs:
            final, low, over = _replay(h.instrs, entry)
            assert final == net  # EOS only at the exit depth
            assert low >= floor  # never below the baseline's low-water mark
            assert over <= 0  # never reads outside the block's window
            assert len(h.instrs) <= n  # never longer than the baseline


def test_no_masked_token_is_ever_emitted(model, inputs) -> None:
    """Re-run the state machine over each hypothesis's tokens: every token was allowed."""
    batch, imms, _ = inputs
    hyps = beam_search(model, batch, imms, k=4)
    tables = GrammarTables.build(vocab())
    for g, hs in enumerate(hyps):
        for h in hs:
            state = GrammarState.start(
                batch.entry_depth[g : g + 1],
                batch.net_effect[g : g + 1],
                batch.floor[g : g + 1],
                batch.ptr_valid[g : g + 1],
                batch.limit[g : g + 1],
            )
            for tok in h.tokens + [EOS]:
                assert bool(state.allowed(tables)[0, tok]), vocab().tokens[tok].text
                state = state.step(tables, torch.tensor([tok]))


def test_eos_only_at_exit_depth() -> None:
    tables = GrammarTables.build(vocab())
    one = torch.tensor([1])
    state = GrammarState.start(
        torch.tensor([2]),
        torch.tensor([-1]),
        torch.tensor([-1]),
        torch.zeros(1, 128, dtype=torch.bool),
        torch.tensor([5]),
    )
    assert not bool(state.allowed(tables)[0, EOS])
    pop2 = next(t.id for t in vocab().tokens if t.text == "pop 2")
    add = next(t.id for t in vocab().tokens if t.text == "add")
    assert not bool(state.allowed(tables)[0, pop2])  # below the floor
    assert bool(state.allowed(tables)[0, add])
    state = state.step(tables, torch.tensor([add]))
    assert bool(state.allowed(tables)[0, EOS])
    assert int(state.h[0]) == -1 and one.item() == 1


def test_beam_returns_k_distinct_hypotheses(model, example_blocks) -> None:
    ops, entry, net, base = max(
        (b for b in example_blocks if len(b[3]) <= 16), key=lambda b: len(b[3])
    )
    d, m = block_data(ops, entry, net, base, max_len=64)
    (hyps,) = beam_search(model, batch_graphs([d]), [m], k=16)
    assert len(hyps) == 16
    assert len({tuple(map(str, h.instrs)) for h in hyps}) == 16
    assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)


@pytest.mark.parametrize(
    ("text", "entry", "net", "floor", "forbidden_at"),
    [
        # the sponge instructions move ten elements: the mask follows them exactly
        ("sponge_squeeze\npop 5\npop 5", 0, 0, 0, None),
        ("sponge_squeeze", 0, 10, 0, None),
        ("sponge_absorb", 10, -10, -10, None),
        ("divine 5\ndivine 5\nsponge_absorb", 0, 0, 0, None),
        ("push 1\nsponge_squeeze\nswap 10\npop 1\npop 5\npop 5", 0, 0, 0, None),
        ("sponge_absorb", 9, -10, -10, 0),  # reads ten, the window holds nine
        ("sponge_squeeze\npick 10\npop 5\npop 5\npop 1", 0, 0, 0, 1),  # st10 is below entry
        ("sponge_absorb", 10, -10, -9, 0),  # below the baseline's low-water mark
    ],
)
def test_ten_element_moves(text, entry, net, floor, forbidden_at) -> None:
    from tasmopt.model.vocab import MAX_POINTERS, POINTER_KINDS
    from tasmopt.tasm.parser import parse_instructions

    voc = vocab()
    tables = GrammarTables.build(voc)
    toks = voc.encode(parse_instructions(text), [])
    state = GrammarState.start(
        torch.tensor([entry]),
        torch.tensor([net]),
        torch.tensor([floor]),
        torch.zeros(1, len(POINTER_KINDS) * MAX_POINTERS, dtype=torch.bool),
        torch.tensor([len(toks) + 1]),
    )
    for t, tok in enumerate(toks):
        allowed = bool(state.allowed(tables)[0, tok])
        assert allowed == (t != forbidden_at), (t, voc.tokens[tok].text)
        if not allowed:
            return
        state = state.step(tables, torch.tensor([tok]))
    assert forbidden_at is None and bool(state.allowed(tables)[0, EOS])


def test_decoding_stops_when_asked(model, inputs) -> None:
    # a request's deadline: decoding ends at the next check and returns only what finished
    batch, imms, _ = inputs
    calls = []

    def stop() -> bool:
        calls.append(1)
        return True

    hyps = beam_search(model, batch, imms, k=4, stop=stop)
    full = beam_search(model, batch, imms, k=4)
    assert len(calls) == 1 and len(hyps) == len(full)
    assert sum(map(len, hyps)) <= sum(map(len, full))
    samples = sample(model, batch, imms, k=4, stop=stop)
    assert len(calls) == 2 and len(samples) == len(full)
