"""The function-level ``loops`` pass (`tasmopt.optimizer.loops`): counted loops whose counter
an induction variable makes redundant end in ``recurse_or_return``. Behaviour is preserved
at trip counts 0, 1 and many; adversarial: a body that reads or moves the counter, steps the
induction variable by anything but one, changes the bound, a call site whose counter is not
``n - i``, a call a ``skiz`` may skip, and a wrong layout are all refused or caught."""

from __future__ import annotations

from pathlib import Path

import pytest

import tasmopt.optimizer.loops as loops
from tasmopt.frontend import compile_modules
from tasmopt.isa import P
from tasmopt.optimizer import compile as compile_tir
from tasmopt.optimizer.loops import (
    exclusive_loops,
    find_counted_loops,
    loop_shapes,
    permutation_program,
    rewrite_loops,
)
from tasmopt.report import CompileOptions
from tasmopt.tasm.parser import parse
from tasmopt.vm.simulator import run
from tasmopt.vm.witness import VmInput

ROOT = Path(__file__).resolve().parents[1]

#: memset(dst, v, n) as our lowering writes it: i counts up beside the counter c = n - i.
MEMSET = """\
__memset:
    push 0
    dup 1
    call __loop__2
    pop 1
    pop 4
    return

__loop__2:
    dup 0
    push 0
    eq
    skiz
    return
    addi -1
    dup 4
    dup 2
    add
    dup 4
    swap 1
    write_mem 1
    pop 1
    swap 1
    addi 1
    swap 1
    recurse
"""

#: reads dst, v, n; memset; reads dst again and prints the cells dst+5 .. dst-1
MAIN = """\
main:
    read_io 3
    call __memset
    read_io 1
    addi 5
    read_mem 5
    read_mem 2
    pop 1
    write_io 5
    write_io 2
    halt
"""


def behaviour(text: str, dst: int, v: int, n: int):
    r = run(
        parse(MAIN + text),
        VmInput(public_input=(dst, v, n, dst), initial_stack=[0] * 16),
        measure=False,
    )
    assert r.error is None, r.error
    return (list(r.public_output), list(r.stack)), r.cycles


def test_the_memset_loop_qualifies_with_i_and_n_found():
    (loop,) = find_counted_loops(MEMSET.splitlines())
    assert (loop.label, loop.i_depth, loop.n_depth) == ("__loop__2", 1, 2)
    assert len(loop.sites) == 1


@pytest.mark.parametrize("n", [0, 1, 2, 5, 13])
def test_behaviour_is_kept_at_trip_counts_zero_one_and_many(n):
    lines = MEMSET.splitlines()
    new, spans = rewrite_loops(lines, find_counted_loops(lines))
    text = "\n".join(new) + "\n"
    assert "recurse_or_return" in text and spans
    # the unoptimized rewrite (B' = U; push 0; B; pop 1; A): cycles are the optimizer's
    before, _ = behaviour(MEMSET, 1000, 77, n)
    after, _ = behaviour(text, 1000, 77, n)
    assert after == before
    assert before[0].count(77) == min(n, 6)  # the loop really wrote


def _call(text: str, label: str, acc: int, n: int):
    """Outputs and final stack of ``label(acc, n)`` printing its one result."""
    main = f"main:\n    read_io 2\n    call {label}\n    write_io 1\n    halt\n"
    r = run(parse(main + text), VmInput(public_input=(acc, n), initial_stack=[0] * 16))
    assert r.error is None, r.error
    return list(r.public_output), list(r.stack)


#: add3(acc, n): acc + 3n by a loop with no induction variable (the body keeps n)
ADD3 = """\
__add3:
    dup 0
    call __loop__1
    pop 1
    pop 1
    return

__loop__1:
    dup 0
    push 0
    eq
    skiz
    return
    push -1
    add
    swap 2
    addi 3
    swap 2
    recurse
"""


@pytest.mark.parametrize("n", [0, 1, 2, 9])
def test_a_loop_without_induction_variable_gets_one_made_from_the_counter(n):
    lines = ADD3.splitlines()
    (loop,) = find_counted_loops(lines)
    assert loop.i_depth is None and loop.n_depth == 1
    assert loop.from_zero  # the call site counts down from a copy of n: i starts at 0
    new, _ = rewrite_loops(lines, [loop])
    text = "\n".join(new) + "\n"
    assert "recurse_or_return" in text

    assert _call(text, "__add3", 5, n) == _call(ADD3, "__add3", 5, n) == ([5 + 3 * n], [0] * 16)


#: bump(acc, n): n times { if acc == 7 { acc += 100 }; acc += 1 } — a body with a branch
BUMP = """\
__bump:
    dup 0
    call __loop__1
    pop 1
    pop 1
    return

__loop__1:
    dup 0
    push 0
    eq
    skiz
    return
    push -1
    add
    dup 2
    push 7
    eq
    skiz
    call __then__1
    swap 2
    addi 1
    swap 2
    recurse

__then__1:
    swap 2
    addi 100
    swap 2
    return
"""


def _bump(text: str, acc: int, n: int):
    return _call(text, "__bump", acc, n)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 6])
def test_a_loop_body_with_a_branch_keeps_behaviour_on_both_paths(n):
    lines = BUMP.splitlines()
    (loop,) = find_counted_loops(lines)
    assert loop.i_depth is None and loop.n_depth == 1  # acc += 1 on one path only is no i
    new, _ = rewrite_loops(lines, [loop])
    text = "\n".join(new) + "\n"
    assert "recurse_or_return" in text and "call __then__1" in text
    want = _bump(BUMP, 5, n)
    assert _bump(text, 5, n) == want
    assert want[0] == [5 + n + (100 if n >= 3 else 0)]  # the branch was taken when n >= 3


@pytest.mark.parametrize(
    "old, new",
    [
        ("    dup 2\n    push 7\n    eq\n    skiz", "    dup 0\n    push 7\n    eq\n    skiz"),
        ("    swap 2\n    addi 100\n    swap 2\n    return", "    addi 1\n    return"),
        ("    swap 2\n    addi 100\n    swap 2\n    return", "    call __bump\n    return"),
        ("    skiz\n    call __then__1", "    skiz\n    addi 1"),
    ],
    ids=["condition-on-counter", "branch-moves-counter", "branch-calls", "skiz-without-call"],
)
def test_a_branchy_body_that_touches_the_counter_is_refused(old, new):
    assert old in BUMP
    assert find_counted_loops(BUMP.replace(old, new, 1).splitlines()) == []


def _variant(old: str, new: str) -> list[str]:
    assert old in MEMSET
    return MEMSET.replace(old, new, 1).splitlines()


#: memset variants that break the reuse of i as the loop's induction variable: the loop
#: may still be rewritten with an i made from the counter, which must keep behaviour
NOT_I = {
    "step-2": ("    addi 1\n    swap 1\n    recurse", "    addi 2\n    swap 1\n    recurse"),
    "bound-moves": (
        "    swap 1\n    addi 1\n    swap 1\n",
        "    swap 1\n    addi 1\n    swap 2\n    addi 1\n    swap 2\n    swap 1\n",
    ),
    "counter-n-plus-1": (
        "    dup 1\n    call __loop__2",
        "    dup 1\n    addi 1\n    call __loop__2",
    ),
    "i-starts-at-1": ("    push 0\n    dup 1\n    call", "    push 1\n    dup 1\n    call"),
}
#: variants no rewrite may touch
REFUSED = {
    # the body reads the counter (writes c instead of v)
    "reads-counter": (
        "    dup 4\n    swap 1\n    write_mem 1",
        "    dup 1\n    swap 1\n    write_mem 1",
    ),
    # a skiz may skip the call
    "skiz": ("    dup 1\n    call __loop__2", "    dup 1\n    dup 0\n    skiz\n    call __loop__2"),
    # the counter test is not the lowering's (returns on c == 1)
    "test-c-1": ("    dup 0\n    push 0\n    eq", "    dup 0\n    push 1\n    eq"),
    # the body absorbs the counter into the sponge (a sponge it only resets is fine:
    # test_a_body_that_uses_the_sponge_without_the_counter_keeps_behaviour)
    "sponge-absorbs-counter": (
        "    swap 1\n    recurse",
        "    swap 1\n    sponge_init\n" + "    push 0\n" * 9 + "    dup 9\n    sponge_absorb\n"
        "    recurse",
    ),
    # a rare guard on the counter (fails only when c == 12345)
    "rare-guard-on-counter": (
        "    swap 1\n    recurse",
        "    swap 1\n    dup 0\n    push 12345\n    eq\n    push 0\n    eq\n    assert\n"
        "    recurse",
    ),
    # the counter as a RAM address (may alias a cell the loop writes)
    "counter-as-address": (
        "    swap 1\n    recurse",
        "    swap 1\n    push 9\n    dup 1\n    write_mem 1\n    pop 1\n    recurse",
    ),
    # a high-degree term of the counter reaches the output
    "counter-power-output": (
        "    swap 1\n    recurse",
        "    swap 1\n    dup 0\n    dup 0\n    mul\n    dup 0\n    mul\n    dup 0\n    mul\n"
        "    write_io 1\n    recurse",
    ),
    # the counter is moved by the body
    "moves-counter": ("    swap 1\n    recurse", "    swap 1\n    swap 1\n    swap 2\n    recurse"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_loops_no_rewrite_may_touch_are_refused(name):
    assert find_counted_loops(_variant(*REFUSED[name])) == []


NOT_I["skiz-in-prefix"] = (
    "    push 0\n    dup 1\n    call __loop__2",
    "    push 5\n    push 0\n    skiz\n    push 0\n    dup 1\n    call __loop__2",
)  # the prefix's `push 0` is always skipped: i starts at 5, not 0, and c = n


@pytest.mark.parametrize("name", sorted(NOT_I))
@pytest.mark.parametrize("n", [0, 1, 4])
def test_without_a_reusable_induction_variable_the_made_one_keeps_behaviour(name, n):
    lines = _variant(*NOT_I[name])
    found = find_counted_loops(lines)
    assert all(lp.i_depth is None for lp in found)  # i is not trusted as the counter
    new, _ = rewrite_loops(lines, found)
    text = "\n".join(new) + "\n"
    before, _ = behaviour("\n".join(lines) + "\n", 1000, 77, n)
    assert behaviour(text, 1000, 77, n)[0] == before


def test_a_loop_entered_by_fall_through_is_refused():
    text = MEMSET.replace("    pop 4\n    return\n", "    pop 4\n", 1)
    assert find_counted_loops(text.splitlines()) == []


def test_a_loop_another_function_calls_is_left_alone():
    found = find_counted_loops(MEMSET.splitlines())
    other = ["__fill:", "    push 0", "    dup 1", "    call __loop__2", "    return"]
    assert exclusive_loops(found, [other]) == []
    assert exclusive_loops(found, [["__g:", "    call __memset", "    return"]]) == found


@pytest.mark.parametrize(
    "i_depth, n_depth", [(1, 2), (2, 1), (1, 9), (7, 3), (None, 1), (None, 12)]
)
def test_layout_programs_put_i_at_st5_and_n_at_st6_and_undo_exactly(i_depth, n_depth):
    loop = loops.CountedLoop("L", 0, 1, (), i_depth, n_depth, (0,))
    r, n, a, u = loops._layouts(loop)
    i_r, n_r = (0, n_depth) if i_depth is None else (i_depth - 1, n_depth - 1)
    assert n[loops.I_SLOT] is r[i_r] and n[loops.N_SLOT] is r[n_r]
    for prog, start, end in ((a, r, n), (u, n, r)):
        stack = list(start)
        for ins in prog:
            op, k = ins.split()
            loops._apply(stack, op, int(k))
        assert all(x is y for x, y in zip(stack, end, strict=True))
    assert len(a) <= loops.LAYOUT_MOVES


def test_permutation_programs_are_short_and_exact():
    r = [object() for _ in range(7)]
    n = [r[2], r[3], r[4], r[5], r[6], r[0], r[1]]
    assert permutation_program(r, n) == ["place 6", "place 6"]
    assert permutation_program(n, r) == ["pick 6", "pick 6"]
    assert permutation_program(r, r) == []
    shuffled = [r[k] for k in (3, 0, 6, 1, 5, 2, 4)]
    prog = permutation_program(r, shuffled)
    stack = list(r)
    for ins in prog:
        op, k = ins.split()
        loops._apply(stack, op, int(k))
    assert all(a is b for a, b in zip(stack, shuffled, strict=True))
    with pytest.raises(ValueError):
        permutation_program(r, r[:-1])


def _copy_module():
    ops = compile_modules(ROOT / "corpus" / "array" / "copy.tri", [ROOT / "corpus"])[-1].ops
    return ops


def test_the_optimizer_rewrites_memset_and_the_result_keeps_behaviour():
    r = compile_tir(_copy_module(), options=CompileOptions(sources=("rules", "search")))
    memset = next(f for f in r.functions if f.name == "memset")
    assert any("recurse_or_return" in n for n in memset.notes), memset.notes
    assert "recurse_or_return" in "\n".join(memset.tasm)
    assert memset.cycles < memset.baseline_cycles
    no_loops = compile_tir(
        _copy_module(), options=CompileOptions(sources=("rules", "search"), inline=False)
    )
    assert "recurse_or_return" not in no_loops.tasm


def test_a_wrong_layout_is_caught_by_the_function_check(monkeypatch):
    """If the rewrite compared i with another element than n (st6 holding the value to
    write, say), the loop would run until i reached that value: the witnesses must reject
    it and the function keep its code. (Swapping i and n would be no test: the comparison
    is symmetric.)"""
    real = loops._layouts

    def swapped(loop):
        r, n, _, _ = real(loop)
        n = list(n)
        n[0], n[loops.N_SLOT] = n[loops.N_SLOT], n[0]
        return r, n, permutation_program(r, n), permutation_program(n, r)

    monkeypatch.setattr(loops, "_layouts", swapped)
    r = compile_tir(_copy_module(), options=CompileOptions(sources=("rules", "search")))
    memset = next(f for f in r.functions if f.name == "memset")
    assert "recurse_or_return" not in "\n".join(memset.tasm)
    assert any("not verified" in n for n in memset.notes), memset.notes


@pytest.mark.parametrize(
    ("prefix", "trips"),
    [
        ("    dup 0\n", lambda n: n),  # c = n: i = 0, pushed
        ("    dup 0\n    addi 1\n", lambda n: n + 1),  # c = n + 1: not from zero
        ("    dup 1\n", lambda n: None),  # c = acc, not the kept n: not from zero
    ],
)
@pytest.mark.parametrize("n", [0, 1, 4])
def test_a_made_induction_variable_starts_from_zero_only_when_the_counter_is_n(prefix, trips, n):
    """The constant start is used only where every call site proves c = n; the other
    counters keep the computed i = n - c, and every variant keeps its behaviour."""
    text = ADD3.replace("    dup 0\n    call __loop__1", prefix + "    call __loop__1")
    lines = text.splitlines()
    (loop,) = find_counted_loops(lines)
    assert loop.i_depth is None
    assert loop.from_zero == (prefix == "    dup 0\n")
    new, _ = rewrite_loops(lines, [loop])
    site = "\n".join(new[: new.index("    call __loop__1")])
    assert ("push -1" not in site) == loop.from_zero
    new_text = "\n".join(new) + "\n"
    acc = 5 if trips(n) is not None else 2
    want = _call(text, "__add3", acc, n)
    assert _call(new_text, "__add3", acc, n) == want
    if trips(n) is not None:
        assert want[0] == [acc + 3 * trips(n)]


@pytest.mark.parametrize(
    ("edit", "value", "rewritten"),
    [
        # the client writes v + 1 where our lowering of the same TIR writes v
        ("    dup 4\n    addi 1\n    swap 1\n    write_mem 1", 8, False),
        # the client's text differs from ours but means the same (a no-op pair in the body)
        ("    dup 4\n    push 0\n    pop 1\n    swap 1\n    write_mem 1", 7, True),
    ],
)
def test_a_client_baseline_that_differs_from_our_lowering_is_what_the_rewrite_must_match(
    edit, value, rewritten
):
    """The loops pass rewrites our lowering, but what comes back is checked against the
    client's program: with a client that means something else the function falls back to
    the client's text (never our v); with a textually different but equivalent client the
    loop is rewritten and still behaves like the client's."""
    ops = _copy_module()
    ours = compile_tir(ops, options=CompileOptions(sources=())).baseline_tasm
    body = "    dup 4\n    swap 1\n    write_mem 1"
    assert ours.count(body) == 1
    client = ours.replace(body, edit)
    r = compile_tir(ops, client, options=CompileOptions(sources=("rules", "search")))
    memset = next(f for f in r.functions if f.name == "memset")
    got = "\n".join(memset.tasm) + "\n"
    assert ("recurse_or_return" in got) == rewritten, memset.notes
    for n in (0, 1, 5):
        (want, _), _ = behaviour(client, 100, 7, n)
        (out, _), _ = behaviour(got, 100, 7, n)
        assert out == want
        assert out.count(value) == min(n, 6)  # the client's value, in every written cell


@pytest.mark.parametrize(
    ("prefix", "from_zero"),
    [
        # c = n + (acc - acc): the same polynomial as n, so i starts at 0
        ("    dup 0\n    dup 2\n    dup 3\n    push -1\n    mul\n    add\n    add\n", True),
        # c = n * n: a high-degree term, equal to n only for n in {0, 1}
        ("    dup 0\n    dup 0\n    mul\n", False),
        # c = n + acc * acc: equal to n only when acc = 0 (a rare input)
        ("    dup 0\n    dup 2\n    dup 3\n    mul\n    add\n", False),
    ],
)
@pytest.mark.parametrize(("acc", "n"), [(0, 0), (0, 1), (0, 3), (5, 1), (1, 2)])
def test_from_zero_needs_the_identity_not_agreement_on_some_inputs(prefix, from_zero, acc, n):
    text = ADD3.replace("    dup 0\n    call __loop__1", prefix + "    call __loop__1")
    lines = text.splitlines()
    (loop,) = find_counted_loops(lines)
    assert loop.from_zero == from_zero
    new, _ = rewrite_loops(lines, [loop])
    assert _call("\n".join(new) + "\n", "__add3", acc, n) == _call(text, "__add3", acc, n)


def test_a_loop_rewrite_that_lengthens_the_program_is_kept_when_cycles_drop():
    """sq_n (corpus field.pow): the made induction variable is set up at the call site, so
    the program grows by a few words while every iteration loses five cycles. Design §2's
    strict rule (no table taller) refused it for the program and hash tables; issue 11
    item 7 accepts it while no execution table and not the padded height grows. The
    result keeps its behaviour at trip counts 0, 1 and many."""
    mods = compile_modules(ROOT / "corpus" / "field" / "pow.tri", [ROOT / "corpus"])
    # at the default budget the new body's search finds a layout that no longer lengthens
    # the program (40 words either way); at a fifth of it the trade is still made
    opts = CompileOptions(
        sources=("rules", "search"), only=frozenset({"sq_n"}), search_budget_s=0.1
    )
    r = compile_tir(mods[-1].ops, options=opts)
    f = next(x for x in r.functions if x.name == "sq_n")
    assert "recurse_or_return" in "\n".join(f.tasm), f.notes
    assert f.cycles < f.baseline_cycles
    assert f.heights["program"] > f.baseline_heights["program"]  # the trade this allows
    assert f.padded_height <= f.baseline_padded_height
    for table in ("processor", "op_stack", "ram", "jump_stack", "u32"):
        assert f.heights.get(table, 0) <= f.baseline_heights.get(table, 0), table
    ours = "\n".join(f.tasm) + "\n"
    plain = compile_tir(
        mods[-1].ops, options=CompileOptions(sources=(), inline=False, only=opts.only)
    )
    base = "\n".join(next(x for x in plain.functions if x.name == "sq_n").tasm) + "\n"
    assert "recurse_or_return" not in base
    for n in (0, 1, 2, 7):
        got = _call(ours, "__sq_n", 3, n)
        assert got == _call(base, "__sq_n", 3, n)
        assert got[0] == [pow(3, 2**n, (1 << 64) - (1 << 32) + 1)]


#: sum(base, n) with the counter's decrement moved to the end of the body by the block
#: search (corpus array.reduce sum when its block gets the whole budget)
LATE_DECREMENT = """\
__sum:
    push 0
    push 0
    dup 2
    call __loop__1
    pop 1
    pop 1
    swap 2
    pop 2
    return

__loop__1:
    dup 0
    push 0
    eq
    skiz
    return
    dup 4
    dup 2
    add
    read_mem 1
    pop 1
    pick 3
    add
    pick 2
    addi 1
    pick 2
    STEP
    recurse
"""


def _sum(text: str, base: int, values: list[int]):
    main = "main:\n    read_io 2\n    call __sum\n    write_io 1\n    halt\n"
    ram = {base + i: v for i, v in enumerate(values)}
    r = run(
        parse(main + text),
        VmInput(public_input=(base, len(values)), ram=ram, initial_stack=[0] * 16),
    )
    assert r.error is None, r.error
    return list(r.public_output), list(r.stack)


@pytest.mark.parametrize("values", [[], [5], [1, 2], [9, 8, 7, 6, 5, 4, 3, 2, 1, P - 1]])
def test_a_decrement_the_search_moved_to_the_end_of_the_body_still_qualifies(values):
    """The head is followed by the body, whose last instructions step the counter: the loop
    is read as ``addi -1; addi 1; B'`` and rewritten, behaviour kept."""
    text = LATE_DECREMENT.replace("STEP", "addi -1")
    lines = text.splitlines()
    loops = find_counted_loops(lines)
    assert len(loops) == 1
    new, _ = rewrite_loops(lines, loops)
    got = _sum("\n".join(new) + "\n", 300, values)
    assert got == _sum(text, 300, values)
    assert got[0] == [sum(values) % P]


@pytest.mark.parametrize("step", ["addi -2", "addi 1", "push 0\n    add"])
def test_a_body_that_does_not_step_the_counter_by_one_is_left_alone(step):
    text = LATE_DECREMENT.replace("STEP", step)
    assert find_counted_loops(text.splitlines()) == []


#: acc += RAM[c] with the counter c as the address: the counter is read through RAM
COUNTER_ADDRESS = """\
__f:
    dup 0
    call __loop__1
    pop 1
    pop 1
    return

__loop__1:
    dup 0
    push 0
    eq
    skiz
    return
    addi -1
    dup ADDR
    read_mem 1
    pop 1
    pick 2
    add
    place 1
    recurse
"""


def test_a_body_that_reads_ram_at_the_counter_is_not_a_counted_loop():
    """The read value is a RAM variable keyed by its address: that it depends on the
    counter is only visible through the address (`ExprContext.depends_on`)."""
    assert find_counted_loops(COUNTER_ADDRESS.replace("ADDR", "0").splitlines()) == []
    assert loop_shapes(COUNTER_ADDRESS.replace("ADDR", "0").splitlines()) == []
    # the same body reading at the kept element n (st2) qualifies
    assert loop_shapes(COUNTER_ADDRESS.replace("ADDR", "2").splitlines())


#: squeeze_sum(acc, n): sponge_init; absorb ten ABSORB words; then n times acc += the first
#: squeezed word (the sponge state changes every iteration: it is carried, not recomputed).
#: ABSORBED: what the body absorbs before each squeeze ("" for nothing).
SQUEEZE = """\
__squeeze_sum:
    sponge_init
    push 0
    push 0
    push 0
    push 0
    push 0
    push 0
    push 0
    push 0
    push 0
    push 3
    sponge_absorb
    dup 0
    call __loop__1
    pop 1
    pop 1
    return

__loop__1:
    dup 0
    push 0
    eq
    skiz
    return
    addi -1
ABSORBED
    sponge_squeeze
    pick 12
    add
    place 11
    pop 5
    pop 4
    recurse
"""

#: absorbs ten words of which one is the counter (st0 at the body's entry)
ABSORB_COUNTER = "\n".join(["    dup 0"] + ["    push 5"] * 9 + ["    sponge_absorb"])
#: absorbs ten words that do not depend on it (the kept bound n, st1)
ABSORB_BOUND = "\n".join(["    dup 1"] + ["    push 5"] * 9 + ["    sponge_absorb"])


def _squeeze(absorbed: str) -> str:
    return SQUEEZE.replace("ABSORBED\n", absorbed + "\n" if absorbed else "")


@pytest.mark.parametrize("absorbed", ["", ABSORB_BOUND])
@pytest.mark.parametrize("n", [0, 1, 2, 7])
def test_a_body_that_uses_the_sponge_without_the_counter_keeps_behaviour(absorbed, n):
    """The sponge is part of the state the body carries from one iteration to the next:
    the rewrite is sound when what the body absorbs does not depend on the counter."""
    text = _squeeze(absorbed)
    (loop,) = find_counted_loops(text.splitlines())
    new, _ = rewrite_loops(text.splitlines(), [loop])
    out = "\n".join(new) + "\n"
    assert "recurse_or_return" in out
    before = _call(text, "__squeeze_sum", 5, n)
    assert _call(out, "__squeeze_sum", 5, n) == before
    if n:
        assert before[0] != [5]  # the squeezed words were really added


def test_a_body_that_absorbs_the_counter_is_not_a_counted_loop():
    """Absorbing ``c`` makes every later squeeze depend on how many trips are left: after
    the rewrite the counter is gone, so the same words cannot be absorbed."""
    assert loop_shapes(_squeeze(ABSORB_COUNTER).splitlines()) == []
    assert loop_shapes(_squeeze(ABSORB_BOUND).splitlines())
    assert loop_shapes(_squeeze("").splitlines())
    # a body that only resets the sponge qualifies too (its state never depends on c)
    reset = ("    swap 1\n    recurse", "    swap 1\n    sponge_init\n    recurse")
    assert find_counted_loops(_variant(*reset))
