"""The function-level ``shortcuts`` pass (`tasmopt.optimizer.shortcuts`): a call of a section
that is one instruction and ``return`` becomes that instruction (or a direct call). Behaviour
is kept on both sides of the ``skiz`` that guards it, with a two-word instruction, a failing
one, and a forwarded call into a loop; adversarially, sections another function calls or
that control can fall into stay, and sections that are not exactly one plain instruction and
``return`` are left alone. The one call no ``skiz`` can skip of a longer straight-line section
takes its body; one a ``skiz`` may skip, or a section called twice or by another function,
stays."""

from __future__ import annotations

from pathlib import Path

import pytest

from tasmopt.frontend import compile_modules, link
from tasmopt.optimizer import compile as compile_tir
from tasmopt.optimizer.shortcuts import shortcut_calls
from tasmopt.report import CompileOptions
from tasmopt.tasm.parser import parse
from tasmopt.vm.simulator import run
from tasmopt.vm.state import VmInput

ROOT = Path(__file__).resolve().parents[1]

#: _ c x -> _ r: r = 1/x + 7 when c != 0 (fails on x = 0 then), else x
F = """\
__f:
    dup 1
    skiz
    call __inv
    swap 1
    skiz
    call __seven
    return

__inv:
    invert
    return

__seven:
    addi 7
    return
"""

#: push 7 is two words: skiz must skip both
TWO_WORDS = """\
__f:
    skiz
    call __p
    return

__p:
    push 7
    return
"""

#: a branch body that only calls a loop: _ c n -> _ (n steps of doubling a 1 when c != 0)
FORWARD = """\
__f:
    push 1
    swap 2
    skiz
    call __t
    pop 1
    return

__t:
    call __loop
    return

__loop:
    dup 0
    push 0
    eq
    skiz
    return
    addi -1
    swap 1
    dup 0
    add
    swap 1
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
    ("text", "cases"),
    [
        (F, [(0, 5), (1, 5), (1, 0), (0, 0), (3, 2**40)]),
        (TWO_WORDS, [(9, 0), (9, 1), (9, 5)]),
        (FORWARD, [(0, 0), (0, 1), (3, 0), (3, 1), (5, 2)]),
    ],
    ids=["inv-and-seven", "two-words", "forward-to-loop"],
)
def test_shortcuts_keep_behaviour_on_both_sides_of_the_skiz(text, cases):
    new, labels = shortcut_calls(text.splitlines())
    assert labels
    new_text = "\n".join(new) + "\n"
    for label in labels:  # the sections went: nothing calls them, nothing falls into them
        assert f"{label}:" not in new_text
    taken = 0
    for case in cases:
        (before, c_before), (after, c_after) = outcome(text, case), outcome(new_text, case)
        assert after == before, case
        if before[0] is None:
            assert c_after <= c_before
            taken += c_after < c_before
    assert taken  # some case took a shortcut and was cheaper


def test_the_failing_instruction_still_fails_where_it_ran():
    new, _ = shortcut_calls(F.splitlines())
    for text in (F, "\n".join(new) + "\n"):
        (err, _), _ = outcome(text, (1, 0))  # c = 1: invert 0
        assert err is not None
        (err, _), _ = outcome(text, (0, 0))  # c = 0: not run
        assert err is None


def test_a_section_another_function_calls_stays():
    new, labels = shortcut_calls(F.splitlines(), others_call=frozenset({"__inv"}))
    assert "__inv" in labels and "__inv:" in "\n".join(new)
    assert "    invert" in new[:8]  # the call here is still shortcut


def test_a_section_control_can_fall_into_stays():
    fall = F.replace("    call __seven\n    return\n", "    call __seven\n    pop 1\n")
    new, _ = shortcut_calls(fall.splitlines())
    assert "__inv:" in "\n".join(new)  # the entry section falls into it now


@pytest.mark.parametrize(
    "body",
    [
        "    return\n",  # nothing before the return
        "    recurse\n    return\n",  # control flow
        "    skiz\n    return\n",
        "    invert\n    recurse\n",  # not a return at the end
        "    push 1\n    add\n    return\n",  # two instructions
        "    call __g\n    return\n",  # itself (the label is __g)
    ],
)
def test_sections_that_are_not_one_plain_instruction_and_return_are_left_alone(body):
    text = "__f:\n    skiz\n    call __g\n    return\n\n__g:\n" + body
    assert shortcut_calls(text.splitlines()) is None


def test_the_optimizer_shortcuts_a_one_instruction_branch_and_keeps_behaviour():
    # the CLI's default spill policy: the else branch is just "invert; return"
    mods = compile_modules(
        ROOT / "corpus" / "field" / "inverse.tri", [ROOT / "corpus"], spill="next-use"
    )
    ops = link(mods)
    r = compile_tir(ops, options=CompileOptions(sources=("rules", "search")))
    f = next(f for f in r.functions if f.name == "field_inverse__inv_or_zero")
    assert any(n.startswith("shortcuts") and "called inline" in n for n in f.notes), f.notes
    main = "main:\n    read_io 1\n    call __field_inverse__inv_or_zero\n    write_io 1\n    halt\n"
    for x, want in [(0, 0), (1, 1), (2, (2**64 - 2**32 + 2) // 2)]:
        out = run(parse(main + r.tasm), VmInput(public_input=(x,)), measure=False, start="main")
        assert out.error is None and list(out.public_output) == [want]


@pytest.mark.parametrize(
    ("x", "cases"),
    [
        ("assert", [(0, 1), (1, 1), (1, 12345), (0, 12345)]),  # a guard, fails only if taken
        ("write_io 1", [(0, 4), (2, 4)]),  # an effect, only if taken
        ("split", [(0, 2**40 + 3), (1, 2**40 + 3)]),  # two results
    ],
)
def test_a_guard_or_an_effect_happens_exactly_where_the_call_did(x, cases):
    text = f"__f:\n    swap 1\n    skiz\n    call __t\n    push 9\n    return\n\n__t:\n    {x}\n    return\n"
    new, _ = shortcut_calls(text.splitlines())
    new_text = "\n".join(new) + "\n"
    assert f"    skiz\n    {x}\n" in new_text
    for case in cases:
        assert outcome(new_text, case)[0] == outcome(text, case)[0], case
    if x == "assert":  # the guard really fails where the branch is taken on 12345
        assert outcome(text, (1, 12345))[0][0] is not None


def test_a_section_entered_in_the_middle_is_left_alone():
    # a label between the instruction and the return: __t is one instruction without return
    text = "__f:\n    skiz\n    call __t\n    call __m\n    return\n\n__t:\n    invert\n\n__m:\n    return\n"
    assert shortcut_calls(text.splitlines()) is None


def test_forward_only_keeps_one_instruction_sections_called():
    # the conditions pass forwards call chains but leaves `skiz; call T` for the branches pass
    text = "__f:\n    skiz\n    call __t\n    call __u\n    return\n\n__t:\n    invert\n    return\n\n__u:\n    call __g\n    return\n"
    new, labels = shortcut_calls(text.splitlines(), forward_only=True)
    assert labels == ["__u"]
    assert "    call __t" in new and "    call __g" in new and "__u:" not in "\n".join(new)


#: _ c x -> _ r: an unguarded call of a three-instruction body (x*x + c), then a guarded one
UNGUARDED = """\
__f:
    call __sq
    dup 0
    skiz
    call __inv
    return

__sq:
    dup 0
    mul
    add
    return

__inv:
    invert
    return
"""


def test_the_one_unskippable_call_of_a_longer_body_takes_the_body():
    """``early_exit`` leaves ``call T`` unguarded in a loop body: T's instructions replace
    the call (the call and return words go) and the section is deleted."""
    new, labels = shortcut_calls(UNGUARDED.splitlines())
    assert labels == ["__inv", "__sq"]
    new_text = "\n".join(new) + "\n"
    assert "__sq:" not in new_text and new_text.startswith("__f:\n    dup 0\n    mul\n    add\n")
    for case in [(0, 0), (3, 4), (5, 0), (2**63, 2**40 + 1)]:
        (before, c_before), (after, c_after) = outcome(UNGUARDED, case), outcome(new_text, case)
        assert after == before, case
        assert c_after < c_before


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (UNGUARDED.replace("    call __sq\n", "    skiz\n    call __sq\n"), "a skiz may skip it"),
        (UNGUARDED.replace("    call __sq\n", "    call __sq\n    call __sq\n"), "two call sites"),
    ],
)
def test_a_longer_body_that_a_skiz_may_skip_or_called_twice_stays(text, why):
    new, labels = shortcut_calls(text.splitlines())
    assert "__sq" not in labels and "__sq:" in "\n".join(new), why


def test_a_longer_body_another_function_calls_stays():
    new, labels = shortcut_calls(UNGUARDED.splitlines(), others_call=frozenset({"__sq"}))
    assert "__sq" not in labels and "    call __sq" in new
