"""The rules' merged RAM round trips (`tasmopt.rules._memory_run`): a spill or reload of
adjacent cells word by word becomes one ``write_mem``/``read_mem`` of up to five words.
Checked by running both on distinct values with the final op stack and RAM compared; a run
whose addresses are not adjacent, go the other way, or would exceed five words is not merged;
and the block verifier refuses the wrong merges (spec/triton-vm.md §5, ``read_mem n`` and
``write_mem n``)."""

from __future__ import annotations

import pytest

from tasmopt.rules import rewrite
from tasmopt.tasm.parser import parse
from tasmopt.tasm.program import Instr
from tasmopt.vm.equivalence import BlockCheck, check_block
from tasmopt.vm.simulator import run
from tasmopt.vm.witness import VmInput

BASE = 1_073_742_036  # a spill address, as the frontend's scratch region uses


def _code(text: str) -> list[Instr]:
    return list(parse(text.replace(";", "\n")).instructions)


def _final(code: list[Instr]) -> tuple[list[int], dict[int, int]]:
    """Op stack (the 16 values pushed first, distinct) and the RAM cells touched, after
    ``code``; RAM starts with distinct values at the cells read."""
    text = "\n".join(f"push {100 + k}" for k in range(16)) + "\n"
    text += "\n".join(str(i) for i in code) + "\nhalt\n"
    ram = {BASE - 20 + k: 5_000 + k for k in range(60)}
    r = run(parse(text), VmInput(ram=dict(ram)))
    assert r.error is None, r.error
    return list(r.stack)[-16:], {k: v for k, v in r.ram.items() if BASE - 20 <= k < BASE + 40}


def _spill(words: list[int], step: int = 1) -> str:
    """Word-by-word stores of the top elements at ``BASE``, ``BASE + step``, ..."""
    out, addr = [], BASE
    for w in words:
        out.append(f"push {addr};write_mem {w};pop 1")
        addr += step * w
    return ";".join(out)


def _reload(words: list[int], step: int = 1) -> str:
    out, addr = [], BASE
    for w in words:
        out.append(f"push {addr};read_mem {w};pop 1")
        addr -= step * w
    return ";".join(out)


@pytest.mark.parametrize(
    "words,merged",
    [
        ([1, 1], ["write_mem 2"]),
        ([1, 1, 1, 1, 1], ["write_mem 5"]),
        ([2, 3], ["write_mem 5"]),
        ([1] * 7, ["write_mem 5", "write_mem 2"]),
        ([2, 2, 2], ["write_mem 5", "write_mem 1"]),
        ([3, 4], ["write_mem 5", "write_mem 2"]),
    ],
)
def test_adjacent_stores_merge_and_keep_their_meaning(words, merged):
    code = _code(_spill(words))
    out = rewrite(code)
    assert [str(i) for i in out if i.name == "write_mem"] == merged
    assert len(out) < len(code)
    assert _final(out) == _final(code)


@pytest.mark.parametrize(
    "words,merged",
    [
        ([1, 1], ["read_mem 2"]),
        ([2, 2, 1], ["read_mem 5"]),
        ([2] * 4, ["read_mem 5", "read_mem 3"]),
        ([4] * 12, ["read_mem 5"] * 9 + ["read_mem 3"]),
    ],
)
def test_adjacent_loads_merge_and_keep_their_meaning(words, merged):
    code = _code(_reload(words))
    out = rewrite(code)
    assert [str(i) for i in out if i.name == "read_mem"] == merged
    assert _final(out) == _final(code)


@pytest.mark.parametrize(
    "text",
    [
        _spill([1, 1], step=2),  # a gap between the cells
        _spill([1, 1], step=-1),  # stores going down: the second is not where the first ended
        _reload([1, 1], step=-1),  # loads going up
        _spill([3, 3]),  # six words: more than one instruction moves
        f"push {BASE};write_mem 1;pop 1;push {BASE + 1};read_mem 1",  # a store, then a load
        f"push {BASE};write_mem 2;pop 2;push {BASE + 2};write_mem 1",  # pops the pointer and more
    ],
)
def test_runs_that_are_not_one_round_trip_keep_their_meaning(text):
    """Whatever the rules make of these, the stack and RAM come out the same."""
    code = _code(text)
    assert _final(rewrite(code)) == _final(code)


def test_a_gap_or_the_wrong_direction_is_not_merged():
    for text in (_spill([1, 1], step=2), _spill([1, 1], step=-1), _reload([1, 1], step=-1)):
        out = rewrite(_code(text))
        assert not any(i.name.endswith("_mem") and i.arg == 2 for i in out), text


def test_the_verifier_refuses_a_merge_one_cell_off_or_reversed():
    """Adversarial: the rule only proposes, the block verifier decides. A merged store at
    the wrong start, or a store of the two words in the other order, leaves different RAM;
    a merged load in the other order leaves a different stack. The right merges pass."""
    store = tuple(_spill([1, 1]).split(";"))
    load = tuple(_reload([1, 1]).split(";"))
    right_store = (f"push {BASE}", "write_mem 2", "pop 1")
    right_load = (f"push {BASE}", "read_mem 2", "pop 1")
    assert check_block(BlockCheck(store, right_store, "release", 16, 7)).equivalent
    assert check_block(BlockCheck(load, right_load, "release", 16, 7)).equivalent
    wrongs = [
        (store, (f"push {BASE + 1}", "write_mem 2", "pop 1")),
        (store, ("swap 1", f"push {BASE}", "write_mem 2", "pop 1")),
        (store, (f"push {BASE}", "write_mem 2")),  # the pointer is left behind
        (load, (f"push {BASE - 1}", "read_mem 2", "pop 1")),
        (load, (f"push {BASE}", "read_mem 2", "pop 1", "swap 1")),
        # the same two stores at an address from the stack (it may alias the constant one)
        (store, ("dup 2", "write_mem 2", "pop 1")),
        # at an address of high degree in a stack value
        (store, ("dup 2", "dup 0", "mul", "dup 0", "mul", "write_mem 2", "pop 1")),
    ]
    for base, cand in wrongs:
        assert not check_block(BlockCheck(base, cand, "release", 16, 7)).equivalent, cand
