"""The rules' pick/place chains (`tasmopt.rules._swap_chain`): ``swap 1; ..; swap k`` is
``pick k`` and ``swap k; ..; swap 1`` is ``place k``. Checked by running both on a stack of
distinct values (a chain that is one swap short, or out of order, is not merged)."""

from __future__ import annotations

import pytest

from tasmopt.rules import rewrite
from tasmopt.tasm.parser import parse
from tasmopt.tasm.program import Instr
from tasmopt.vm.simulator import run
from tasmopt.vm.witness import VmInput


def _final_stack(code: list[Instr]) -> list[int]:
    text = "\n".join(f"push {100 + k}" for k in range(16)) + "\n"
    text += "\n".join(str(i) for i in code) + "\nhalt\n"
    r = run(parse(text), VmInput())
    assert r.error is None, r.error
    return list(r.stack)[-16:]  # the pushed values (the bottom holds the program digest)


def _swaps(args: list[int]) -> list[Instr]:
    return [Instr("swap", a) for a in args]


@pytest.mark.parametrize("k", range(2, 16))
def test_a_pick_chain_becomes_pick_and_a_place_chain_place(k):
    up = _swaps(list(range(1, k + 1)))
    down = _swaps(list(range(k, 0, -1)))
    assert [str(i) for i in rewrite(up)] == [f"pick {k}"]
    assert [str(i) for i in rewrite(down)] == [f"place {k}"]
    assert _final_stack(rewrite(up)) == _final_stack(up)
    assert _final_stack(rewrite(down)) == _final_stack(down)


@pytest.mark.parametrize("args", [[1, 3], [2, 1, 3], [3, 2], [2, 3], [1, 2, 4]])
def test_a_broken_chain_keeps_its_meaning(args):
    """Whatever the rules make of a sequence that is not one whole chain, it does the same."""
    code = _swaps(args)
    assert _final_stack(rewrite(code)) == _final_stack(code)


@pytest.mark.parametrize("k", [2, 7, 15])
def test_the_verifier_refuses_a_chain_merged_one_off(k):
    """Adversarial: the rule only proposes; the block verifier decides. A chain merged into
    the neighbouring pick/place, or into the other direction, is refused (distinct
    witnesses tell slot k from k - 1); the right merge is accepted."""
    from tasmopt.vm.equivalence import BlockCheck, check_block

    up = tuple(f"swap {a}" for a in range(1, k + 1))
    down = tuple(f"swap {a}" for a in range(k, 0, -1))
    for base, right, wrongs in (
        (up, f"pick {k}", [f"pick {k - 1}", f"place {k}", f"pick {min(k + 1, 15)}"]),
        (down, f"place {k}", [f"place {k - 1}", f"pick {k}", f"swap {k}"]),
    ):
        assert check_block(BlockCheck(base, (right,), "release", 16, 7)).equivalent
        for wrong in wrongs:
            if wrong == right:
                continue
            v = check_block(BlockCheck(base, (wrong,), "release", 16, 7))
            assert not v.equivalent, (base, wrong)
