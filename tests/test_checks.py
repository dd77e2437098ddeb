"""The function-level ``checks`` pass (`tasmopt.optimizer.checks`): ``push 0; eq; assert``
becomes ``skiz; call F`` with ``F: push 0; assert; return``. Behaviour (halting, failure,
outputs, the op stack) is kept for a zero and for non-zero values, in a loop; adversarially,
a check a ``skiz`` may skip, one split by a label, a label already taken and a last section
that falls through are left alone, and each assert's error id stays with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tasmopt.frontend import compile_modules
from tasmopt.optimizer import compile as compile_tir
from tasmopt.optimizer.checks import zero_checks
from tasmopt.report import CompileOptions
from tasmopt.tasm.parser import parse
from tasmopt.vm.simulator import run
from tasmopt.vm.state import VmInput

ROOT = Path(__file__).resolve().parents[1]

#: _ a b -> _ a + b, failing unless the high word of a's split is 0 (a u32 range check) and
#: unless b == 0 (error id 7)
F = """\
__f:
    swap 1
    split
    swap 1
    push 0
    eq
    assert
    dup 1
    push 0
    eq
    assert error_id 7
    add
    return
"""

#: _ n -> _ s: sum over k in n..1 of the high words of split(k * 2^32 + k) checked zero
#: in every iteration of a recurse loop (fails on the first k with a non-zero high word)
LOOP = """\
__f:
    push 0
    swap 1
    call __loop
    pop 1
    return

__loop:
    dup 0
    push 0
    eq
    skiz
    return
    dup 0
    split
    swap 1
    push 0
    eq
    assert
    pick 2
    add
    place 1
    addi -1
    recurse
"""

MAIN = """\
main:
    read_io 2
    call __f
    write_io 1
    halt
"""


def outcome(text: str, inputs: tuple[int, ...]):
    r = run(parse(MAIN + text), VmInput(public_input=inputs), measure=False, start="main")
    return (type(r.error).__name__ if r.error else None, list(r.public_output)), r.cycles


@pytest.mark.parametrize(
    "case", [(5, 0), (2**32 - 1, 0), (2**32, 0), (5, 1), (2**40 + 3, 9), (0, 0), (1, 2**63)]
)
def test_a_zero_check_keeps_behaviour_for_zero_and_non_zero_values(case):
    new, count = zero_checks(F.splitlines())
    assert count == 2
    text = "\n".join(new) + "\n"
    assert "push 0\n    eq" not in text
    (before, cycles_before), (after, cycles_after) = outcome(F, case), outcome(text, case)
    assert after == before, case
    if before[0] is None:
        assert cycles_after == cycles_before - 4  # two checks, two cycles each
    else:
        assert before[0] is not None and after[0] == before[0]  # both fail


def test_each_assert_keeps_its_error_id():
    new, _ = zero_checks(F.splitlines())
    text = "\n".join(new)
    assert "__f__fail:\n    push 0\n    assert\n    return" in text
    assert "__f__fail1:\n    push 0\n    assert error_id 7\n    return" in text
    assert text.count("call __f__fail1") == 1 and text.count("call __f__fail\n") == 1
    r = run(parse(MAIN + text + "\n"), VmInput(public_input=(5, 1)), measure=False, start="main")
    assert r.error is not None and "7" in str(r.error)  # the failing assert is error id 7


@pytest.mark.parametrize("n", [0, 1, 2, 9])
def test_a_check_in_a_loop_keeps_behaviour_at_trip_counts_zero_one_and_many(n):
    new, count = zero_checks(LOOP.splitlines())
    assert count == 1
    text = "\n".join(new) + "\n"
    (before, c_before), (after, c_after) = outcome(LOOP, (0, n)), outcome(text, (0, n))
    assert before[0] is None and after == before
    assert c_after == c_before - 2 * n


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (F.replace("    dup 1\n    push 0\n", "    dup 1\n    skiz\n    push 0\n"), "skiz"),
        (
            F.replace("    dup 1\n    push 0\n    eq\n", "    dup 1\n    push 0\n__l:\n    eq\n"),
            "label",
        ),
        (
            F.replace(
                "    push 0\n    eq\n    assert error_id 7",
                "    push 1\n    eq\n    assert error_id 7",
            ),
            "not zero",
        ),
    ],
)
def test_a_check_a_skiz_may_skip_or_split_by_a_label_or_not_against_zero_stays(text, why):
    new, count = zero_checks(text.splitlines())
    assert count == 1, why  # the first check still qualifies
    assert "assert error_id 7" in "\n".join(new).split("\n\n__f__fail")[0], why


def test_a_taken_label_or_a_last_section_that_falls_through_gives_up():
    assert zero_checks(F.splitlines(), taken=frozenset({"__f__fail"})) is None
    falls = F.replace("    add\n    return\n", "    add\n")  # control would run into F
    assert zero_checks(falls.splitlines()) is None
    assert zero_checks(F.replace("assert", "pop 1").splitlines()) is None  # nothing to do


def test_the_optimizer_checks_the_ledger_loop_with_skiz_and_keeps_behaviour():
    """corpus kernel.ledger total_supply: a u32 range check per iteration (``load``, inlined
    into the loop); the rewrite is
    kept, fewer cycles, padded height no larger, and the function check (run inside the
    pass) passed on the verifier's witnesses."""
    mods = compile_modules(
        ROOT / "corpus" / "kernel" / "ledger.tri", [ROOT / "corpus"], spill="next-use"
    )
    opts = CompileOptions(sources=("rules", "search"), only=frozenset({"total_supply", "load"}))
    r = compile_tir(mods[-1].ops, options=opts)
    f = next(f for f in r.functions if f.name.endswith("total_supply"))
    assert any(n.startswith("checks:") for n in f.notes), f.notes
    assert "    call __total_supply__fail" in f.tasm  # load's range check, inlined
    assert f.cycles < f.baseline_cycles
    assert f.padded_height <= f.baseline_padded_height
