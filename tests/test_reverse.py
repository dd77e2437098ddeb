"""The function-level ``reverse`` pass (`tasmopt.optimizer.reverse`): a reduction loop walks
its array down. Behaviour is kept at trip counts 0, 1 and many, for sums and products;
a second array walked beside the first (a walker) too; adversarial: a Horner step (order
matters), a RAM write, an output, a second element that changes by no constant step, a
walker read after the loop,
a term that reads the bound or a RAM cell at an address built from it or from the
accumulator (corpus array.matrix trace once got that far: the function check caught it), a
failure guard, a caller that reads the pointer after the loop,
a loop another function calls or reached by fall-through are all left alone, and a wrong
reversal is caught by the function check."""

from __future__ import annotations

from pathlib import Path

import pytest

from tasmopt.frontend import compile_modules
from tasmopt.isa import P
from tasmopt.optimizer import compile as compile_tir
from tasmopt.optimizer.reverse import find_reversals, reverse
from tasmopt.report import CompileOptions
from tasmopt.tasm.parser import parse
from tasmopt.vm.simulator import run
from tasmopt.vm.state import VmInput

ROOT = Path(__file__).resolve().parents[1]

#: sum(base, n) as the loops and pointers passes leave corpus array.reduce's sum: the
#: pointer at st5 walks up (read_mem 1 leaves it one below, addi 2 moves it past)
SUM = """\
__sum:
    dup 0
    dup 2
    add
    pick 2
    pick 5
    pick 5
    pick 5
    dup 3
    push 0
    pick 7
    skiz
    call __loop__1
    swap 1
    pick 5
    pick 6
    pop 3
    return

__loop__1:
    pick 5
    read_mem 1
    addi 2
    place 6
    BODY
    recurse_or_return
"""


def _text(body: str = "add", base: str = SUM) -> str:
    return base.replace("BODY", body)


def _outcome(text: str, base: int, values: list[int]):
    """(ok, outputs, final stack) of ``sum(base, len(values))`` with the values in RAM."""
    main = "main:\n    read_io 2\n    call __sum\n    write_io 1\n    halt\n"
    ram = {base + i: v for i, v in enumerate(values)}
    r = run(
        parse(main + text),
        VmInput(public_input=(base, len(values)), ram=ram, initial_stack=[0] * 16),
    )
    ok = r.error is None
    return ok, list(r.public_output), list(r.stack) if ok else None, r.cycles


def _reversed(text: str) -> str:
    lines = text.splitlines()
    found = find_reversals(lines)
    assert len(found) == 1, "expected the loop to qualify"
    return "\n".join(reverse(lines, found[0])[0]) + "\n"


CASES = [
    (100, []),
    (100, [7]),
    (100, [3, 4]),
    (5000, [P - 1, 2, 2**40, 9, 0, 11, 13]),
    (0, list(range(1, 30))),
]


@pytest.mark.parametrize("base, values", CASES)
@pytest.mark.parametrize(
    "body, fold",
    [
        ("add", lambda vs: sum(vs) % P),
        ("mul", None),  # the product starts at 0 here: checked against the original only
        ("dup 0\n    mul\n    add", lambda vs: sum(v * v for v in vs) % P),
    ],
    ids=["sum", "product", "sum-of-squares"],
)
def test_reversed_reductions_keep_behaviour_at_trip_counts_zero_one_and_many(
    base, values, body, fold
):
    old = _text(body)
    new = _reversed(old)
    a, b = _outcome(old, base, values), _outcome(new, base, values)
    assert a[:3] == b[:3]
    if fold is not None:
        assert a[1] == [fold(values)]


def test_a_product_from_one_is_the_product():
    """mul with the accumulator started at 1 (``push 0`` -> ``push 1`` at the call site)."""
    text = _text("mul").replace("    dup 3\n    push 0\n", "    dup 3\n    push 1\n")
    new = _reversed(text)
    vals = [3, 5, 7, 2**33 + 1]
    want = 1
    for v in vals:
        want = want * v % P
    assert _outcome(new, 40, vals)[1] == _outcome(text, 40, vals)[1] == [want]


@pytest.mark.parametrize(
    "body, why",
    [
        ("swap 1\n    push 2\n    mul\n    add", "a Horner step: the order of the cells matters"),
        ("add\n    dup 0\n    push 9000\n    write_mem 1\n    pop 1", "a RAM write"),
        ("add\n    dup 0\n    write_io 1", "an output"),
        ("add\n    swap 1\n    dup 0\n    mul\n    swap 1", "a second element is squared"),
        ("add\n    swap 1\n    dup 2\n    add\n    swap 1", "a second element adds the sum"),
        ("add\n    dup 6\n    add", "the term reads the bound"),
        ("dup 0\n    pop_count\n    pop 1\n    add", "a failure guard"),
        ("add\n    dup 0\n    mul", "the accumulator squared"),
        ("add\n    dup 6\n    read_mem 1\n    pop 1\n    add", "a cell at the bound's address"),
        ("add\n    dup 0\n    read_mem 1\n    pop 1\n    add", "a cell at the sum's address"),
    ],
)
def test_bodies_the_proof_does_not_cover_are_left_alone(body, why):
    assert find_reversals(_text(body).splitlines()) == [], why


def test_a_caller_that_reads_the_pointer_after_the_loop_keeps_it():
    text = _text().replace(
        "    call __loop__1\n    swap 1",
        "    call __loop__1\n    dup 5\n    write_io 1\n    swap 1",
    )
    assert find_reversals(text.splitlines()) == []


def test_a_loop_another_function_calls_or_reached_by_fall_through_is_left_alone():
    assert find_reversals(_text().splitlines(), others_call=frozenset({"__loop__1"})) == []
    fall = _text().replace("    pop 3\n    return\n\n__loop__1:", "    pop 3\n\n__loop__1:")
    assert find_reversals(fall.splitlines()) == []


def _compile_reduce(name: str):
    mods = compile_modules(
        ROOT / "corpus" / "array" / "reduce.tri", [ROOT / "corpus"], spill="next-use"
    )
    opts = CompileOptions(sources=("rules", "search"), only=frozenset({name}))
    r = compile_tir(mods[-1].ops, options=opts)
    return next(f for f in r.functions if f.name == name)


def test_the_optimizer_walks_sum_down_and_keeps_behaviour():
    """corpus array.reduce sum: fewer cycles, no execution table taller, the padded height
    no larger, the sum of RAM[base .. base+n-1] for n = 0, 1 and many."""
    f = _compile_reduce("sum")
    assert any(n.startswith("reverse") and "cycles" in n for n in f.notes), f.notes
    assert f.cycles < f.baseline_cycles
    assert f.padded_height <= f.baseline_padded_height
    for table in ("processor", "op_stack", "ram", "jump_stack", "u32"):
        assert f.heights.get(table, 0) <= f.baseline_heights.get(table, 0), table
    text = "\n".join(f.tasm) + "\n"
    for base, values in CASES:
        assert _outcome(text, base, values)[1] == [sum(values) % P]


def test_a_wrong_reversal_is_caught_by_the_function_check(monkeypatch):
    """If the call site started the walk one cell too high (``e`` instead of ``e - d``),
    the function check must refuse it and sum keep its loop."""
    import tasmopt.optimizer.reverse as mod

    def off_by_one(step: int, under: int = 0) -> list[str]:
        a, b = 5 + under, 6 + under
        return [f"pick {b}", f"pick {b}", f"addi {-step}", f"place {b}", f"place {a}"]

    monkeypatch.setattr(mod, "swap_ends", off_by_one)
    monkeypatch.setattr(mod, "_swap_ends_ok", lambda *a: True)
    f = _compile_reduce("sum")
    assert not any(n.startswith("reverse") and "->" in n for n in f.notes), f.notes
    assert any(n.startswith("reverse") for n in f.notes), f.notes


# -- more ways to make a reversal accept a different program ---------------------------------


def test_a_sponge_in_the_body_is_left_alone():
    body = "add\n    sponge_squeeze\n    pop 5\n    pop 5"
    assert find_reversals(_text(body).splitlines()) == []


@pytest.mark.parametrize("base, values", CASES)
def test_a_high_degree_term_keeps_behaviour(base, values):
    """acc += x^8: the same sum of terms, walked down."""
    body = "dup 0\n    mul\n    dup 0\n    mul\n    dup 0\n    mul\n    add"
    old = _text(body)
    got = _outcome(_reversed(old), base, values)
    assert got[:3] == _outcome(old, base, values)[:3]
    assert got[1] == [sum(pow(v, 8, P) for v in values) % P]


@pytest.mark.parametrize("values", [[1, 2, 3, 4], [7, 0, 7, 0, 7]])
def test_aliased_reads_of_the_same_cell_keep_behaviour(values):
    """The body reads the current cell twice (once through a copy of the pointer at the
    same address): acc += x * x, the two reads aliased."""
    body = "dup 6\n    addi -1\n    read_mem 1\n    pop 1\n    mul\n    add"
    old = _text(body)
    assert _outcome(_reversed(old), 900, values)[:3] == _outcome(old, 900, values)[:3]


def test_a_label_inside_the_body_is_left_alone():
    mid = _text().replace("    place 6\n    add", "    place 6\n__mid:\n    add")
    assert find_reversals(mid.splitlines()) == []


#: dot(a, b, n) as the loops and pointers passes leave corpus array.reduce's dot: the pointer
#: into b at st5 carries the test, the pointer into a (st2) walks beside it
DOT = """\
__dot:
    dup 0
    dup 2
    add
    pick 2
    pick 5
    pick 5
    pick 5
    dup 3
    push 0
    pick 7
    skiz
    call __loop__4
    pick 4
    pick 4
    pick 2
    pick 3
    pick 4
    pick 5
    pick 6
    pop 4
    POST
    return

__loop__4:
    pick 2
    read_mem 1
    addi 2
    place 3
    pick 6
    read_mem 1
    addi 2
    place 7
    mul
    add
    recurse_or_return
"""


def _dot(text: str, a: int, b: int, xs: list[int], ys: list[int]):
    main = "main:\n    read_io 3\n    call __dot\n    write_io 1\n    halt\n"
    ram = {a + i: v for i, v in enumerate(xs)} | {b + i: v for i, v in enumerate(ys)}
    r = run(
        parse(main + text.replace("    POST\n", "")),
        VmInput(public_input=(a, b, len(xs)), ram=ram, initial_stack=[0] * 16),
    )
    return r.error is None, list(r.public_output), r.cycles


@pytest.mark.parametrize(
    "xs, ys",
    [([], []), ([3], [5]), ([1, 2, 3], [4, 5, 6]), ([P - 1, 2**40, 7, 0, 9], [5, 3, P - 2, 1, 8])],
)
def test_a_second_array_walked_beside_the_first_is_walked_down_too(xs, ys):
    lines = DOT.replace("    POST\n", "").splitlines()
    (rev,) = find_reversals(lines)
    assert rev.walkers == ((2, 1),)  # the pointer into a, one cell per iteration
    new = "\n".join(reverse(lines, rev)[0]) + "\n"
    for a, b in [(100, 200), (200, 100), (0, 3)]:
        old_out, new_out = _dot(DOT, a, b, xs, ys), _dot(new, a, b, xs, ys)
        assert old_out[:2] == new_out[:2]
        if a + len(xs) <= b or b + len(ys) <= a:  # the arrays do not overlap
            assert old_out[1] == [sum(x * y for x, y in zip(xs, ys, strict=True)) % P]


def test_a_walker_read_after_the_loop_keeps_the_loop():
    """The walker ends elsewhere in the reversed loop: read after the call, it is observed."""
    after = DOT.replace(
        "    pick 4\n    pick 4\n    pick 2\n",
        "    dup 2\n    write_io 1\n    pick 4\n    pick 4\n    pick 2\n",
        1,
    )
    assert find_reversals(after.replace("    POST\n", "").splitlines()) == []
    assert find_reversals(DOT.replace("    POST\n", "").splitlines())


@pytest.mark.parametrize("n", [0, 1, 2, 7])
def test_walk_ends_moves_each_walker_to_its_last_value(n):
    from tasmopt.optimizer.reverse import walk_ends

    for step, dw in [(1, 1), (1, 3), (2, -1), (-1, 2)]:
        p, e = 1000, 1000 + n * step
        stack = [0] * 16
        stack[-1 - 5], stack[-1 - 6], stack[-1 - 2] = p, e, 70  # st5, st6, a walker at st2
        code = "main:\n" + "".join(f"    {x}\n" for x in walk_ends(step, [(2, dw)])) + "    halt\n"
        r = run(parse(code), VmInput(initial_stack=stack))
        assert r.error is None
        assert r.stack[-1 - 2] == (70 + (n - 1) * dw) % P, (step, dw, n)
        assert r.stack[-1 - 5] == p and r.stack[-1 - 6] == e
