"""The function-level ``pointers`` pass (`tasmopt.optimizer.pointers`): a ``recurse_or_return``
loop that addresses RAM at ``base + i`` is conjugated by a change of variables so that it
keeps and bumps the pointer. Behaviour is kept at trip counts 0, 1 and many (reads and
writes, one array and two), and adversarially: changes that are not bijections or that move
the loop's test are refused, loops entered otherwise than by this function's calls are left
alone, and a wrong conjugation is caught by the function check."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

import tasmopt.optimizer.pointers as pointers
from tasmopt.frontend import compile_modules
from tasmopt.isa import P
from tasmopt.optimizer import compile as compile_tir
from tasmopt.optimizer.pointers import (
    Change,
    change_code,
    find_pointer_loops,
    prove_change,
    rewrite_pointer_loop,
)
from tasmopt.report import CompileOptions
from tasmopt.tasm.parser import parse
from tasmopt.vm.equivalence import check_blocks
from tasmopt.vm.simulator import run
from tasmopt.vm.state import VmInput

ROOT = Path(__file__).resolve().parents[1]

#: loop state (top first): acc, base, a, b, c, i, n. Adds RAM[base + i] for i in i..n-1.
SUM = """\
__f:
    dup 6
    dup 6
    eq
    push 0
    eq
    skiz
    call __f__loop
    return

__f__loop:
    dup 1
    dup 6
    add
    read_mem 1
    pop 1
    add
    pick 5
    addi 1
    place 5
    recurse_or_return
"""

#: the same state; writes acc + i to RAM[base + i] and prints i (i is used besides the address)
FILL = """\
__f:
    dup 6
    dup 6
    eq
    push 0
    eq
    skiz
    call __f__loop
    return

__f__loop:
    dup 5
    write_io 1
    dup 0
    dup 6
    add
    dup 2
    dup 7
    add
    write_mem 1
    pop 1
    pick 5
    addi 1
    place 5
    recurse_or_return
"""

#: two arrays (bases at st1 and st2) read at the same index: acc += RAM[x + i] * RAM[y + i]
DOT = """\
__f:
    dup 6
    dup 6
    eq
    push 0
    eq
    skiz
    call __f__loop
    return

__f__loop:
    dup 1
    dup 6
    add
    read_mem 1
    pop 1
    dup 3
    dup 7
    add
    read_mem 1
    pop 1
    mul
    add
    pick 5
    addi 1
    place 5
    recurse_or_return
"""

#: reads RAM[x + 3i] (a stride) and RAM[2i + 5] (an array at a constant address)
STRIDED = """\
__f:
    dup 6
    dup 6
    eq
    push 0
    eq
    skiz
    call __f__loop
    return

__f__loop:
    dup 5
    push 3
    mul
    dup 2
    add
    read_mem 1
    pop 1
    add
    dup 5
    push 2
    mul
    addi 5
    read_mem 1
    pop 1
    add
    pick 5
    addi 1
    place 5
    recurse_or_return
"""

#: a pointer at st0 walks down beside the counter: acc (st1) = acc * 2^32 + RAM[p - 1]
DOWN = """\
__f:
    dup 6
    dup 6
    eq
    push 0
    eq
    skiz
    call __f__loop
    return

__f__loop:
    addi -1
    pick 1
    push 4294967296
    mul
    pick 5
    addi 1
    place 5
    dup 1
    read_mem 1
    pop 1
    add
    swap 1
    recurse_or_return
"""

MAIN = """\
main:
    call __f
    write_io 5
    write_io 2
    halt
"""


def behaviour(text: str, state: list[int], ram: dict[int, int]):
    """Outputs, final RAM and stack of ``__f`` on the loop state ``state`` (top first)."""
    stack = [0] * 16 + list(reversed(state))
    r = run(
        parse(MAIN + text),
        VmInput(ram=ram, initial_stack=stack),
        measure=False,
        start="main",
    )
    assert r.error is None, r.error
    return list(r.public_output), dict(r.ram), list(r.stack)


def _state(acc: int, x: int, y: int, i: int, n: int) -> list[int]:
    return [acc, x, y, 11, 12, i, n]


def _ram(x: int, y: int) -> dict[int, int]:
    cells = {(x + k) % P: 3 * k + 1 for k in range(-2, 30)}
    cells |= {(y + k) % P: 7 * k + 5 for k in range(-2, 30)}
    return cells | {k: 11 * k + 2 for k in range(0, 40)}


CASES = [
    # acc, x, y, i, n: trip counts 0, 1, 2 and 7, a start other than 0, bases near p
    (0, 1000, 2000, 0, 0),
    (5, 1000, 2000, 0, 1),
    (5, 1000, 2000, 3, 5),
    (9, 1000, 2000, 0, 7),
    (9, P - 3, 4, 0, 7),
    (1, 2**32 + 7, P - 1, 2, 9),
]


@pytest.mark.parametrize("text", [SUM, FILL, DOT, STRIDED], ids=["sum", "fill", "dot", "strided"])
@pytest.mark.parametrize("case", CASES)
def test_every_proposed_change_keeps_behaviour_at_trip_counts_zero_one_and_many(text, case):
    lines = text.splitlines()
    (loop,) = find_pointer_loops(lines)
    assert loop.changes
    acc, x, y, i, n = case
    before = behaviour(text, _state(acc, x, y, i, n), _ram(x, y))
    for change in loop.changes:
        new, spans = rewrite_pointer_loop(lines, loop, change)
        assert spans
        after = behaviour("\n".join(new) + "\n", _state(acc, x, y, i, n), _ram(x, y))
        assert after == before, change
    if text is FILL:  # the loop really ran: it printed every i
        assert before[0][: n - i] == list(range(i, n))


def test_the_changes_found_are_the_bases_the_addresses_add_to_i():
    (s,) = find_pointer_loops(SUM.splitlines())
    assert s.changes == (Change(1), Change(None, ((1, 1),)), Change(None))
    (d,) = find_pointer_loops(DOT.splitlines())
    assert Change(1, ((2, 1),)) in d.changes and Change(2, ((1, 1),)) in d.changes
    (w,) = find_pointer_loops(DOWN.splitlines())
    assert Change(None, retarget=(0, -1)) in w.changes
    assert Change(None, offset=-1, retarget=(0, -1)) in w.changes  # it reads at p - 1
    (t,) = find_pointer_loops(STRIDED.splitlines())
    assert t.changes[0] == Change(1, (), 3) and Change(None, (), 2, 5) in t.changes


def test_a_base_the_body_changes_is_no_base_but_may_carry_the_test():
    """The body steps st1 by one: no access is at a kept base plus i (no shift, no walk),
    but st1 is a second induction variable (a retarget), which keeps behaviour too."""
    moved = SUM.replace(
        "    pick 5\n    addi 1\n",
        "    pick 1\n    addi 1\n    place 1\n    pick 5\n    addi 1\n",
    )
    lines = moved.splitlines()
    (loop,) = find_pointer_loops(lines)
    assert loop.changes == (Change(None, retarget=(1, 1)), Change(None))
    for case in CASES:
        acc, x, y, i, n = case
        before = behaviour(moved, _state(acc, x, y, i, n), _ram(x, y))
        new, _ = rewrite_pointer_loop(lines, loop, loop.changes[0])
        assert behaviour("\n".join(new) + "\n", _state(acc, x, y, i, n), _ram(x, y)) == before


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (Change(5), "does not restore"),  # st5 += st5: not invertible this way
        (Change(6), "does not restore"),
        (Change(None, ((6, 1),)), "changes whether st5 == st6"),  # it would stop elsewhere
        (Change(None, ((5, 1),)), "changes whether st5 == st6"),  # i += i
        (Change(None, ((6, 1),), 2), "changes whether st5 == st6"),
        (Change(15), "out of reach"),
        (Change(1, (), 0), "scale 0"),  # every i maps to b: not a bijection
        (Change(None, retarget=(0, 0)), "scale 0"),  # a pointer that does not move
        (Change(None, retarget=(5, 1)), "out of reach"),  # the counter itself
        (Change(1, (), P), "scale 0"),
    ],
)
def test_changes_that_are_not_test_preserving_bijections_are_refused(change, why):
    assert why in (prove_change(change) or "")


@pytest.mark.parametrize(
    "change",
    [
        Change(1),
        Change(None, ((1, 1),)),
        Change(2, ((1, 1), (3, 4))),
        Change(0),
        Change(1, (), 3, 1),
        Change(None, (), P - 1, 7),
        Change(None, ((2, 3),), 3),
        Change(None, retarget=(0, -1)),
        Change(None, retarget=(9, P - 5)),
        Change(None, offset=-1, retarget=(0, -1)),
    ],
)
def test_sound_changes_are_proven(change):
    assert prove_change(change) is None


def test_a_loop_another_function_calls_is_left_alone():
    assert find_pointer_loops(SUM.splitlines(), others_call=frozenset({"__f__loop"})) == []


def test_a_loop_entered_by_fall_through_is_left_alone():
    fall = SUM.replace("    call __f__loop\n    return\n", "    call __f__loop\n    pop 1\n")
    assert find_pointer_loops(fall.splitlines()) == []


def test_a_call_behind_two_skips_is_left_alone():
    # T would go before the second skiz, where the first one could skip its first line
    two = SUM.replace("    eq\n    skiz\n", "    eq\n    skiz\n    skiz\n")
    assert find_pointer_loops(two.splitlines()) == []


def test_a_body_with_control_flow_is_left_alone():
    branchy = SUM.replace(
        "    add\n    pick 5\n", "    add\n    dup 0\n    skiz\n    call __g\n    pick 5\n"
    )
    branchy += "\n__g:\n    return\n"
    assert find_pointer_loops(branchy.splitlines()) == []


def test_the_site_change_goes_under_the_condition():
    lines = SUM.splitlines()
    (loop,) = find_pointer_loops(lines)
    new, _ = rewrite_pointer_loop(lines, loop, Change(1))
    t1, _ = change_code(Change(1), offset=1)
    k = new.index("    skiz")
    assert [ln.strip() for ln in new[k - len(t1) : k]] == t1


def _module(path: str):
    return compile_modules(ROOT / "corpus" / path, [ROOT / "corpus"])[-1].ops


@functools.cache
def _optimized(path: str):
    """The optimizer's result for a corpus module (rules and search), once per test run."""
    return compile_tir(_module(path), options=CompileOptions(sources=("rules", "search")))


def _run_fn(text: str, label: str, args: list[int], ram: dict[int, int], outs: int):
    main = f"main:\n    call {label}\n" + "    write_io 1\n" * outs + "    halt\n"
    stack = [0] * 16 + list(args)
    r = run(parse(main + text), VmInput(ram=ram, initial_stack=stack), measure=False, start="main")
    assert r.error is None, r.error
    return list(r.public_output), dict(r.ram)


@pytest.mark.parametrize("n", [0, 1, 2, 9])
def test_the_optimizer_walks_pointers_in_sum_and_dot_and_keeps_behaviour(n):
    r = _optimized("array/reduce.tri")
    by = {f.name: f for f in r.functions}
    for name in ("sum", "dot"):
        assert any(m.startswith("pointers") and "->" in m for m in by[name].notes), by[name].notes
    ram = {1000 + k: k * k + 3 for k in range(12)} | {3000 + k: 5 * k + 1 for k in range(12)}
    out, _ = _run_fn(r.tasm, "__sum", [1000, n], ram, 1)
    assert out == [sum(k * k + 3 for k in range(n)) % P]
    out, _ = _run_fn(r.tasm, "__dot", [1000, 3000, n], ram, 1)
    assert out == [sum((k * k + 3) * (5 * k + 1) for k in range(n)) % P]


@pytest.mark.parametrize("n", [0, 1, 5])
def test_the_optimizer_walks_pointers_in_memset_and_keeps_behaviour(n):
    r = _optimized("array/copy.tri")
    memset = next(f for f in r.functions if f.name == "memset")
    assert any(m.startswith("pointers") and "->" in m for m in memset.notes), memset.notes
    _, ram = _run_fn(r.tasm, "__memset", [500, 42, n], {}, 0)
    assert {a: v for a, v in ram.items() if v} == {500 + k: 42 for k in range(n)}


def test_a_wrong_conjugation_is_caught_by_the_function_check(monkeypatch):
    """If a call site applied T as if the loop's entry condition were not on top (offset 0
    instead of 1: an off-by-one), the loop would start from the wrong pointers: the proof
    refuses it (`guarded_enter_ok`), and with that obligation dropped the witnesses must
    reject it and the function keep its code. (Restoring with T instead of
    T^-1 is no test here: sum drops st5 and st6 after the loop, so that one is equivalent.)"""
    real = pointers.change_code

    def shallow(change, offset=0):
        return real(change, 0)

    monkeypatch.setattr(pointers, "change_code", shallow)
    # the proof refuses it first (T under the condition is not T) ...
    (loop,) = find_pointer_loops(SUM.splitlines())
    assert all(pointers.prove_change(c) is not None for c in loop.changes if c.moves_test)
    # ... and with that obligation dropped, the function check on witnesses still does
    monkeypatch.setattr(pointers, "guarded_enter_ok", lambda *a: True)
    r = compile_tir(
        _module("array/reduce.tri"), options=CompileOptions(sources=("rules", "search"))
    )
    s = next(f for f in r.functions if f.name == "sum")
    assert not any(m.startswith("pointers") and "->" in m for m in s.notes), s.notes
    assert any(m.startswith("pointers") and "not verified" in m for m in s.notes), s.notes


def test_a_wrong_body_from_the_search_is_not_used(monkeypatch):
    """The body the pass picks is checked against T^-1; B; T before it is used: a search
    that returned a truncated (wrong) body is refused there, and the body is left to the
    block sources (whose candidates `check_block` proves one by one)."""
    (loop,) = find_pointer_loops(SUM.splitlines())
    options = CompileOptions(sources=("rules", "search"))
    chosen = pointers._choose(loop, options, check_blocks)
    assert chosen is not None and chosen[1] is not None  # the real search: a proven body
    monkeypatch.setattr(pointers, "optimize_block", lambda instrs, cfg: [list(instrs)[:3]])
    change, body = pointers._choose(loop, options, check_blocks)
    assert body is None


# -- adversarial: what the change of variables must carry through unchanged ----------------

#: a rare guard: fails at the first cell holding 12345 (after printing the cells before it)
GUARDED = SUM.replace(
    "    read_mem 1\n    pop 1\n    add\n",
    "    read_mem 1\n    pop 1\n    dup 0\n    write_io 1\n    dup 0\n    push -12345\n"
    "    add\n    invert\n    pop 1\n    add\n",
)

#: the sponge: every cell read is absorbed (with nine zeros), the state squeezed at the end
SPONGE = SUM.replace(
    "    read_mem 1\n    pop 1\n    add\n",
    "    read_mem 1\n    pop 1\n" + "    push 0\n" * 9 + "    sponge_absorb\n",
)

#: an aliased address: RAM[x + i] := RAM[x + i - 1] * RAM[x + i - 1] * 3 (each iteration
#: reads what the one before wrote; the cube-like term is of high degree after a few trips)
ALIASED = SUM.replace(
    "    dup 1\n    dup 6\n    add\n    read_mem 1\n    pop 1\n    add\n",
    "    dup 1\n    dup 6\n    add\n    addi -1\n    read_mem 1\n    pop 1\n    dup 0\n"
    "    mul\n    push 3\n    mul\n    dup 2\n    dup 7\n    add\n    write_mem 1\n    pop 1\n",
)


def _run_main(main: str, text: str, state: list[int], ram: dict[int, int]):
    stack = [0] * 16 + list(reversed(state))
    r = run(parse(main + text), VmInput(ram=ram, initial_stack=stack), measure=False, start="main")
    return (type(r.error).__name__ if r.error else None, list(r.public_output), dict(r.ram))


SPONGE_MAIN = "main:\n    sponge_init\n    call __f\n    sponge_squeeze\n    write_io 5\n    halt\n"


@pytest.mark.parametrize(
    ("text", "main", "ram"),
    [
        (GUARDED, MAIN, {1000 + k: (12345 if k == 4 else k + 1) for k in range(12)}),
        (SPONGE, SPONGE_MAIN, {1000 + k: 7 * k + 2 for k in range(12)}),
        (ALIASED, MAIN, {999 + k: k + 2 for k in range(12)}),
    ],
    ids=["rare-guard", "sponge", "aliased-address"],
)
@pytest.mark.parametrize("n", [0, 1, 3, 7])
def test_changes_carry_guards_the_sponge_and_aliased_cells_through(text, main, ram, n):
    lines = text.splitlines()
    (loop,) = find_pointer_loops(lines)
    state = _state(5, 1000, 2000, 0, n)
    before = _run_main(main, text, state, ram)
    layouts = tuple(Change(None, swap=k) for k in pointers.SWAPS)  # the layouts stage's
    for change in loop.changes + layouts:
        new, _ = rewrite_pointer_loop(lines, loop, change)
        assert _run_main(main, "\n".join(new) + "\n", state, ram) == before, change
    if text is GUARDED and n == 7:
        assert before[0] is not None  # the guard really failed, at the fifth cell


def test_a_loop_entered_in_the_middle_is_left_alone():
    # a label inside the body: the loop section no longer ends in recurse_or_return, and
    # the label's own section is entered by fall-through
    mid = SUM.replace("    add\n    pick 5\n", "    add\n\n__mid:\n    pick 5\n")
    mid = mid.replace("    call __f__loop\n", "    call __f__loop\n    call __mid\n")
    assert find_pointer_loops(mid.splitlines()) == []


def test_a_client_baseline_that_differs_from_our_lowering_is_returned_as_sent():
    from tasmopt.lower.triton import lower

    ops = _module("array/reduce.tri")
    ours = "\n".join(lower(ops).lines)
    # the client's sum starts from 1 instead of 0: it disagrees with our lowering
    start = ours.index("__sum:")
    assert ours[start:].startswith("__sum:\n    push 0\n")
    client = ours[:start] + ours[start:].replace("    push 0\n", "    push 1\n", 1)
    r = compile_tir(ops, baseline_tasm=client, options=CompileOptions(sources=("rules", "search")))
    s = next(f for f in r.functions if f.name == "sum")
    assert s.mismatch is not None
    assert not any(n.startswith("pointers") for n in s.notes)
    ram = {1000 + k: k + 1 for k in range(12)}
    for n in (0, 3):
        a, _ = _run_fn(r.tasm, "__sum", [1000, n], ram, 1)
        b, _ = _run_fn(client, "__sum", [1000, n], ram, 1)
        assert a == b


# -- layouts: the loop-carried layout, st0 exchanged with st_k ------------------------------


@pytest.mark.parametrize("k", pointers.SWAPS)
@pytest.mark.parametrize("text", [SUM, FILL, DOT, STRIDED], ids=["sum", "fill", "dot", "strided"])
@pytest.mark.parametrize("case", CASES[:4])
def test_every_layout_keeps_behaviour_at_trip_counts_zero_one_and_many(k, text, case):
    lines = text.splitlines()
    (loop,) = find_pointer_loops(lines)
    change = Change(None, swap=k)
    assert prove_change(change) is None
    acc, x, y, i, n = case
    before = behaviour(text, _state(acc, x, y, i, n), _ram(x, y))
    new, _ = rewrite_pointer_loop(lines, loop, change)
    assert behaviour("\n".join(new) + "\n", _state(acc, x, y, i, n), _ram(x, y)) == before


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (Change(None, swap=5), "keep their places"),  # st5 would leave the test
        (Change(None, swap=6), "keep their places"),
        (Change(None, swap=16), "keep their places"),
        (Change(None, swap=1, retarget=(0, -1)), "not combined"),
    ],
)
def test_layouts_that_move_the_test_are_refused(change, why):
    assert why in (prove_change(change) or "")


def test_the_optimizer_carries_eval_rams_accumulator_on_top_and_keeps_behaviour():
    """corpus field.poly eval_ram (Horner over RAM, walking down): the accumulator the
    body brings from st1 every iteration is carried at st0 instead: fewer cycles, no padded
    height larger, and p(x) for n = 0, 1 and many."""
    mods = compile_modules(ROOT / "corpus" / "field" / "poly.tri", [ROOT / "corpus"])
    opts = CompileOptions(sources=("rules", "search"), only=frozenset({"eval_ram"}))
    r = compile_tir(mods[-1].ops, options=opts)
    f = next(x for x in r.functions if x.name == "eval_ram")
    assert any(m.startswith("layout") and "st0 <-> st1" in m for m in f.notes), f.notes
    assert f.cycles < f.baseline_cycles and f.padded_height <= f.baseline_padded_height
    text = "\n".join(f.tasm) + "\n"
    coeffs = [5, 0, 2**40 + 3, 7, P - 1, 9]
    for n in (0, 1, 2, 6):
        x = 3
        want = 0
        for c in reversed(coeffs[:n]):
            want = (want * x + c) % P
        ram = {500 + k: c for k, c in enumerate(coeffs)}
        out, _ = _run_fn(text, "__eval_ram", [500, n, x], ram, 1)  # base deepest
        assert out == [want], n


def test_a_wrong_layout_is_caught_by_the_function_check(monkeypatch):
    """A call site that exchanged the wrong pair (st0 with st_k+1, the body right) starts
    the loop from a wrong state: the proof refuses it, and with that obligation dropped the
    witnesses reject it and eval_ram keeps its code."""
    real = pointers.change_code

    def off_by_one(change, offset=0):
        if change.swap and offset:  # only where the call site applies T under its condition
            change = Change(None, swap=change.swap + 1)
        return real(change, offset)

    monkeypatch.setattr(pointers, "change_code", off_by_one)
    assert pointers.prove_change(Change(None, swap=1)) == "T under a skiz condition is not T"
    monkeypatch.setattr(pointers, "guarded_enter_ok", lambda *a: True)  # the proof dropped
    mods = compile_modules(ROOT / "corpus" / "field" / "poly.tri", [ROOT / "corpus"])
    opts = CompileOptions(sources=("rules", "search"), only=frozenset({"eval_ram"}))
    f = next(x for x in compile_tir(mods[-1].ops, options=opts).functions if x.name == "eval_ram")
    assert not any(m.startswith("layout") and "->" in m for m in f.notes), f.notes
    assert any(m.startswith("layout") and "not verified" in m for m in f.notes), f.notes
