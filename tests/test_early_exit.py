"""The function-level ``early_exit`` pass (`tasmopt.optimizer.early_exit`): a counted loop
whose body is one guarded branch returns as soon as the guard is false. Behaviour is kept at
trip counts 0, 1 and many, with the guard false from the start, false after a few rounds and
never false, and failures stay failures; adversarial: a guard that reads the counter, a
failure guard on the counter, a guard with an effect, a guard that moves the state, code
after the branch, a caller that reads the counter after the loop, a loop another function
calls or reached by fall-through are all left alone, and a wrong rewrite is caught by the
function check."""

from __future__ import annotations

from math import gcd
from pathlib import Path

import pytest

from tasmopt.frontend import compile_modules
from tasmopt.optimizer import compile as compile_tir
from tasmopt.optimizer.early_exit import early_exit, find_guarded_loops
from tasmopt.report import CompileOptions
from tasmopt.tasm.parser import parse
from tasmopt.vm.simulator import run
from tasmopt.vm.witness import VmInput

ROOT = Path(__file__).resolve().parents[1]

#: euclid(x, y): K rounds of `if 0 < y { (x, y) = (y, x mod y) }`, the result x; the
#: lowering's shape (corpus uint.numth gcd), with the round count K pushed at the call
EUCLID = """\
__euclid:
    push 0
    dup 2
    dup 2
    push K
    call __loop__1
    pop 1
    dup 1
    swap 5
    pop 5
    return

__loop__1:
    dup 0
    push 0
    eq
    skiz
    return
    addi -1
    GUARD
    skiz
    call __then__1
    recurse

__then__1:
    dup 1
    pick 3
    div_mod
    place 2
    pop 1
    return
"""

#: the guard ``0 < y`` (y at st1 after the counter; the body's st3 is the 0 pushed first)
GUARD = "dup 1\n    dup 4\n    lt"


def _text(k: int = 48, guard: str = GUARD, base: str = EUCLID) -> str:
    return base.replace("push K", f"push {k}").replace("GUARD", guard)


def _outcome(text: str, x: int, y: int):
    """(ok, outputs, final stack, cycles) of ``euclid(x, y)`` printing its result."""
    main = "main:\n    read_io 2\n    call __euclid\n    write_io 1\n    halt\n"
    r = run(parse(main + text), VmInput(public_input=(x, y), initial_stack=[0] * 16))
    ok = r.error is None
    return ok, list(r.public_output), list(r.stack) if ok else None, r.cycles


def _rewritten(text: str) -> str:
    lines = text.splitlines()
    found = find_guarded_loops(lines)
    assert len(found) == 1, "expected the loop to qualify"
    return "\n".join(early_exit(lines, found[0])[0]) + "\n"


@pytest.mark.parametrize("k", [0, 1, 2, 48])
@pytest.mark.parametrize(
    "x, y",
    [(0, 0), (12, 0), (0, 12), (12, 18), (1071, 462), (2**32 - 1, 2**31 + 7), (832040, 514229)],
)
def test_early_exit_keeps_behaviour_at_trip_counts_zero_one_and_many(k, x, y):
    """Same outputs and final stack as the loop that runs all K rounds; with K = 48 the
    result is gcd(x, y) (32-bit Fibonacci neighbours need the most rounds)."""
    old = _text(k)
    new = _rewritten(old)
    a, b = _outcome(old, x, y), _outcome(new, x, y)
    assert a[:3] == b[:3]
    assert b[3] <= a[3] + 3 * k  # at most the three words per round; usually far fewer
    if k == 48:
        assert a[1] == [gcd(x, y)]


def test_early_exit_saves_the_idle_rounds():
    old, new = _text(48), _rewritten(_text(48))
    assert _outcome(new, 12, 18)[3] < _outcome(old, 12, 18)[3] // 3


@pytest.mark.parametrize("x, y", [(2**40, 3), (3, 2**40)])
def test_a_failing_guard_fails_in_the_rewritten_loop_too(x, y):
    """``lt`` fails on a non-u32 operand: y = 2^40 fails in the first round of both; x =
    2^40 fails inside ``div_mod`` in both."""
    old = _text(48)
    assert _outcome(old, x, y)[0] is False
    assert _outcome(_rewritten(old), x, y)[0] is False


@pytest.mark.parametrize(
    "guard, why",
    [
        ("dup 0\n    push 5\n    lt", "the guard reads the counter"),
        ("dup 0\n    pop_count\n    pop 1\n    dup 1", "a failure guard on the counter"),
        ("read_io 1", "the guard consumes input"),
        ("dup 1\n    write_io 1\n    push 1", "the guard has an effect"),
        ("push 0\n    read_mem 1\n    pop 1", "the guard reads RAM"),
        ("swap 2\n    dup 2", "the guard moves the state"),
        ("pick 1\n    addi 1\n    place 1\n    dup 1", "the guard changes the state"),
        ("dup 1\n    dup 4\n    lt\n    push 1", "the guard leaves two values"),
    ],
)
def test_guards_the_proof_does_not_cover_are_left_alone(guard, why):
    assert find_guarded_loops(_text(guard=guard).splitlines()) == [], why


def test_code_after_the_branch_is_left_alone():
    text = _text().replace(
        "    call __then__1\n    recurse", "    call __then__1\n    swap 1\n    swap 1\n    recurse"
    )
    assert find_guarded_loops(text.splitlines()) == []


@pytest.mark.parametrize("after", ["write_io 1", "dup 0", "skiz"])
def test_a_caller_that_may_read_the_counter_keeps_the_loop(after):
    text = _text().replace("    call __loop__1\n    pop 1", f"    call __loop__1\n    {after}")
    assert find_guarded_loops(text.splitlines()) == []


def test_a_loop_another_function_calls_or_reached_by_fall_through_is_left_alone():
    lines = _text().splitlines()
    assert find_guarded_loops(lines, others_call=frozenset({"__loop__1"})) == []
    fall = _text().replace("    pop 5\n    return\n\n__loop__1:", "    pop 5\n\n__loop__1:")
    assert find_guarded_loops(fall.splitlines()) == []


def _compile_numth(monkeypatch: pytest.MonkeyPatch | None = None):
    mods = compile_modules(ROOT / "corpus" / "uint" / "numth.tri", [ROOT / "corpus"])
    opts = CompileOptions(sources=("rules", "search"), only=frozenset({"gcd"}))
    r = compile_tir(mods[-1].ops, options=opts)
    return next(f for f in r.functions if f.name == "gcd")


def _gcd_call(text: str, a: int, b: int):
    main = "main:\n    read_io 2\n    call __gcd\n    write_io 1\n    halt\n"
    r = run(parse(main + text), VmInput(public_input=(a, b), initial_stack=[0] * 16))
    assert r.error is None, r.error
    return list(r.public_output)


def test_the_optimizer_exits_gcd_early_and_keeps_behaviour():
    """corpus uint.numth gcd (48 rounds of Euclid): fewer cycles, no execution table taller,
    the padded height no larger, gcd(a, b) on pairs that need 0, 1 and many rounds."""
    f = _compile_numth()
    assert any(n.startswith("early exit") and "cycles" in n for n in f.notes), f.notes
    assert f.cycles < f.baseline_cycles
    assert f.padded_height <= f.baseline_padded_height
    for table in ("processor", "op_stack", "ram", "jump_stack", "u32"):
        assert f.heights.get(table, 0) <= f.baseline_heights.get(table, 0), table
    text = "\n".join(f.tasm) + "\n"
    for a, b in [(5, 0), (0, 5), (12, 18), (2**32 - 1, 2**31 + 7), (832040, 514229)]:
        assert _gcd_call(text, a, b) == [gcd(a, b)]


def test_a_wrong_early_exit_is_caught_by_the_function_check(monkeypatch):
    """If the pass returned on the wrong side of the guard (``g != 0`` instead of ``g ==
    0``), the function check must refuse it and gcd keep its loop."""
    import tasmopt.optimizer.early_exit as mod

    real = mod.early_exit

    def wrong(lines, loop):
        out, spans = real(lines, loop)
        (a, _b), *_ = spans
        assert [ln.strip() for ln in out[a : a + 2]] == ["push 0", "eq"]
        return out[:a] + out[a + 2 :], [(a, a + 2)]  # `skiz; return`: leaves when g != 0

    monkeypatch.setattr(mod, "early_exit", wrong)
    f = _compile_numth()
    assert not any(n.startswith("early exit") and "->" in n for n in f.notes), f.notes
    assert any(n.startswith("early exit") for n in f.notes), f.notes


# -- more ways to make an early exit accept a different program ------------------------------


def test_a_sponge_in_the_guard_is_left_alone():
    guard = "sponge_init\n    dup 1\n    dup 4\n    lt"
    assert find_guarded_loops(_text(guard=guard).splitlines()) == []


@pytest.mark.parametrize("x, y", [(12, 18), (1071, 462), (5, 0), (2**31 + 1, 2**31 - 1)])
def test_a_high_degree_guard_keeps_behaviour(x, y):
    """g = (y^8 != 0), a degree-8 term under two eq: the same rounds exit."""
    guard = "dup 1\n    dup 0\n    mul\n    dup 0\n    mul\n    dup 0\n    mul\n    push 0\n    eq\n    push 0\n    eq"
    old = _text(48, guard=guard)
    assert _outcome(_rewritten(old), x, y)[:3] == _outcome(old, x, y)[:3]


def test_a_label_inside_the_body_is_left_alone():
    mid = _text().replace("    skiz\n    call __then__1", "__mid:\n    skiz\n    call __then__1")
    assert find_guarded_loops(mid.splitlines()) == []


def test_a_client_baseline_that_differs_from_our_lowering_is_what_the_result_must_match():
    """The client's gcd runs 3 rounds where our lowering runs 48: whatever comes back
    behaves as the client's program, never as our lowering."""
    from tasmopt.lower.triton import lower
    from tasmopt.module import ModuleText
    from tasmopt.vm.equivalence import check_function

    mods = compile_modules(ROOT / "corpus" / "uint" / "numth.tri", [ROOT / "corpus"])
    ops = mods[-1].ops
    low = lower(ops)
    labels = {f.name: f.label for f in low.functions if f.name}
    ours = ModuleText.from_lowering(low)
    lines = list(ours.lines)
    g = ours.section_lines("gcd")
    at = lines.index(g[0]) + next(i for i, ln in enumerate(g) if ln.strip() == "push 48")
    lines[at] = "    push 3"
    client = "\n".join(lines) + "\n"
    for mismatched in (False, True):
        opts = CompileOptions(
            sources=("rules", "search"), only=frozenset({"gcd"}), rewrite_mismatched=mismatched
        )
        r = compile_tir(ops, client, options=opts)
        out = ModuleText.from_text(r.tasm, labels).harness("gcd", "release")
        ref = ModuleText.from_text(client, labels).harness("gcd", "release")
        v = check_function(ref, out, seed=7)
        assert v.equivalent, v.reason
        mine = ModuleText.from_text("\n".join(ours.lines) + "\n", labels)
        assert not check_function(mine.harness("gcd", "release"), out, seed=7).equivalent
