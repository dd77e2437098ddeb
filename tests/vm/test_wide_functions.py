"""Functions that take more op-stack elements than the harness's first witnesses hold: the
check deepens its witnesses instead of counting TooShallow runs as failures, and still
rejects every candidate that differs (design §2; spec/triton-vm.md: the op stack never
shrinks below 16 elements, TooShallow)."""

from __future__ import annotations

import random

import pytest

from tasmopt.vm.equivalence import check_function, harness
from tasmopt.vm.simulator import run
from tasmopt.vm.state import VmInput

#: A 50-element argument (a 25-lane state as in Keccak, each lane two u32 words): keep the
#: four deepest elements (its first two lanes), drop the rest, as the frontend lowers it.
WIDE = 50


def _popping(pops: list[int], tail: str = "") -> str:
    return "__first:\n" + "".join(f"    pop {k}\n" for k in pops) + tail + "    return\n"


BASELINE = _popping([1] * (WIDE - 4))


def test_a_function_taking_fifty_elements_is_proven_and_measured() -> None:
    """Before: every witness (48 elements deep) failed TooShallow, 'only 0 witnesses ran the
    baseline to its return', and the function fell back."""
    cand = _popping([5] * 9 + [1])
    v = check_function(harness(BASELINE, "__first"), harness(cand, "__first"))
    assert v.equivalent, v.reason
    assert v.halted >= 16
    assert (v.baseline_cycles, v.cycles) == (WIDE - 4 + 1, 10 + 1)


def test_one_element_too_many_or_too_few_is_rejected() -> None:
    base = harness(BASELINE, "__first")
    for pops in ([5] * 9, [5] * 9 + [2]):
        v = check_function(base, harness(_popping(pops), "__first"))
        assert not v.equivalent, pops


@pytest.mark.parametrize(
    "tail,wrong",
    [
        # the deepened witnesses hold distinct values below the baseline's low-water mark:
        # returning one of them (st55) in place of the argument the baseline keeps (st40)
        ("", "    dup 15\n    swap 1\n    pop 1\n"),
        # the neighbouring element of a 50-element argument after dropping 40
        ("    dup 4\n", "    dup 3\n"),
    ],
)
def test_a_wrong_or_too_deep_element_is_rejected(tail: str, wrong: str) -> None:
    """Caught because the witness values differ from each other (a stack of zeros would
    not tell these apart)."""
    head = "__f:\n" + "    pop 5\n" * 8
    base, cand = (head + t + "    return\n" for t in (tail, wrong))
    v = check_function(harness(base, "__f"), harness(cand, "__f"))
    assert not v.equivalent and "witness" in (v.reason or "")


def test_the_deepening_stops_at_its_bound_and_fails_closed() -> None:
    """A function that pops forever (past any stack) never halts: no witness counts."""
    loop = "__f:\n    pop 1\n    recurse\n"
    v = check_function(harness(loop, "__f"), harness(loop, "__f"))
    assert not v.equivalent
    assert v.halted == 0


def test_the_proven_program_runs_like_the_baseline_on_deep_stacks() -> None:
    """Independently of the check: both programs on random 80-element stacks."""
    cand = _popping([5] * 9 + [1])
    rng = random.Random(5)
    for _ in range(8):
        stack = tuple(rng.randrange(2**64 - 2**32 + 1) for _ in range(80))
        outs = [run(harness(t, "__first"), VmInput(initial_stack=stack)) for t in (BASELINE, cand)]
        assert outs[0].error is None and outs[1].error is None
        assert outs[0].stack == outs[1].stack


def test_a_rare_guard_on_a_deep_argument_is_solved_on_the_deepened_stack() -> None:
    """An ``assert`` that an element 44 deep equals 12345 fails on every random witness:
    the guard-directed witnesses are drawn on the deepened stack and solved there, so an
    equivalent candidate is proven on witnesses that pass the guard, and one that differs
    only after it is rejected by such a witness (not accepted on failing runs)."""
    head = "__f:\n" + "    pop 5\n" * 8 + "    dup 4\n    push 12345\n    eq\n    assert\n"
    base = head + "    return\n"
    good = head + "    push 0\n    pop 1\n    return\n"
    bad = head + "    addi 1\n    return\n"
    v = check_function(harness(base, "__f"), harness(good, "__f"))
    assert v.equivalent and v.halted >= 16, v.reason
    v = check_function(harness(base, "__f"), harness(bad, "__f"))
    assert not v.equivalent and "directed witness" in (v.reason or ""), v.reason


def test_a_sponge_absorbing_deep_arguments_in_another_order_is_rejected() -> None:
    """Ten arguments 40 deep absorbed into the sponge: absorbing them with two swapped
    leaves another sponge state (the witnesses start with a live sponge)."""
    head = "__f:\n" + "    pop 5\n" * 8
    base = head + "    sponge_absorb\n    return\n"
    cand = head + "    swap 1\n    sponge_absorb\n    return\n"
    v = check_function(harness(base, "__f"), harness(cand, "__f"))
    assert not v.equivalent and "witness" in (v.reason or ""), v.reason
