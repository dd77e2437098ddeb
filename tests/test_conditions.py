"""The function-level ``conditions`` pass (`tasmopt.optimizer.conditions`) and the fact
decider under it (`tasmopt.vm.facts`): a ``skiz`` that the branches and guards before it
decide on every path is folded, and the sections nothing reaches any more go.

Behaviour is compared by running the original and the folded function in the simulator on
inputs that take every branch (the decided value, its neighbours, p - 1). Adversarially: a
chain whose tests differ, a value changed between two tests (p - 1 + 1 == 0), a ``skiz``
that the one before it can skip, a test decided only on one of two paths, loops, calls out
of the function and sections other functions call are left alone; a test decided only by a
guard through z3, and a value overwritten in one branch (decided on both paths, differently
derived) are folded, and still behave."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tasmopt.isa import P
from tasmopt.optimizer import compile as compile_tir
from tasmopt.optimizer.conditions import fold_branches, known_branches
from tasmopt.report import CompileOptions
from tasmopt.tasm.parser import parse
from tasmopt.vm.expr import ExprContext
from tasmopt.vm.facts import decide
from tasmopt.vm.simulator import run
from tasmopt.vm.state import VmInput

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "trident-std"


def chain(tests: tuple[int, int, int]) -> str:
    """An ``if i == a {11} else if i == b {33} else if i == c {55} else {7}`` chain as the
    upstream compiler lowers it (nested else sections, the if/else flag idiom):
    _ i -> _ i r."""
    a, b, c = tests
    return f"""\
__k:
    dup 0
    push {a}
    eq
    push 1
    swap 1
    skiz
    call __t1
    skiz
    call __e2
    return

__t1:
    pop 1
    push 11
    push 0
    return

__e2:
    dup 0
    push {b}
    eq
    push 1
    swap 1
    skiz
    call __t3
    skiz
    call __e4
    return

__t3:
    pop 1
    push 33
    push 0
    return

__e4:
    dup 0
    push {c}
    eq
    push 1
    swap 1
    skiz
    call __t5
    skiz
    push 7
    return

__t5:
    pop 1
    push 55
    push 0
    return
"""


def main(out: int) -> str:
    return f"main:\n    read_io 1\n    call __k\n    write_io {out}\n    halt\n"


def outcome(text: str, x: int, out: int = 2) -> tuple[str | None, list[int], int]:
    r = run(parse(main(out) + text), VmInput(public_input=(x,)), measure=False, start="main")
    return (type(r.error).__name__ if r.error else None, list(r.public_output), r.cycles)


def same_behaviour(text: str, new_text: str, xs: list[int], out: int = 2) -> int:
    """Assert equal outcomes on every ``x``; the cycles the new text saves in total."""
    saved = 0
    for x in xs:
        before, after = outcome(text, x, out), outcome(new_text, x, out)
        assert after[:2] == before[:2], x
        saved += before[2] - after[2]
    return saved


XS = [0, 1, 2, 3, 5, P - 1, 12345]


def test_a_chain_that_tests_the_same_value_again_is_folded_and_behaves():
    text = chain((0, 0, 0))  # what upstream emits for sha256.k (every test is i == 0)
    new, at = fold_branches(text.splitlines())
    new_text = "\n".join(new) + "\n"
    assert at  # the inner tests are decided
    for label in ("__t3:", "__t5:"):  # then-branches no path reaches
        assert label not in new_text
    assert same_behaviour(text, new_text, XS) >= 0


def test_the_folded_inner_tests_are_the_decided_ones():
    lines = chain((0, 0, 0)).splitlines()
    decided = known_branches(lines)
    assert decided is not None
    by_line = {lines[i].strip() + f"@{i}": v for i, v in decided.items()}
    # the first test is open; in __e2 and __e4 the test is never taken and the flag always
    skizes = [i for i, ln in enumerate(lines) if ln.strip() == "skiz"]
    assert skizes[0] not in decided and skizes[1] not in decided  # both ways at the top
    assert [decided.get(i) for i in skizes[2:]] == [False, True, False, True], by_line


@pytest.mark.parametrize("tests", [(0, 1, 2), (5, 0, 5 + 1), (1, 2, 3)])
def test_a_chain_of_different_tests_is_left_alone(tests):
    # i == 0, else i == 1, ...: no test decides a later one (p - 1 + 1 wraps to 0)
    assert fold_branches(chain(tests).splitlines()) is None


def test_a_value_changed_between_two_tests_is_not_decided():
    # the second test is i + 1 == 0: open even when i != 0 (i = p - 1)
    text = chain((0, 0, 0)).replace(
        "__e2:\n    dup 0\n    push 0\n", "__e2:\n    dup 0\n    addi 1\n    push 0\n"
    )
    lines = text.splitlines()
    decided = known_branches(lines)
    assert decided is not None
    e2_first = [i for i, ln in enumerate(lines) if ln.strip() == "skiz"][2]
    assert e2_first not in decided
    found = fold_branches(lines)
    new_text = text if found is None else "\n".join(found[0]) + "\n"
    assert "__t3:" in new_text
    same_behaviour(text, new_text, XS)
    assert outcome(new_text, P - 1)[1] == [33, P - 1]  # the i + 1 == 0 branch still runs


def test_a_guard_decides_a_later_test_through_the_solver():
    # assert x == 5 first; then x*x - 25 is zero on every path that gets past it
    text = f"""\
__k:
    dup 0
    push 5
    eq
    assert
    dup 0
    dup 0
    mul
    push {P - 25}
    add
    skiz
    call __t
    push 1
    return

__t:
    push 99
    write_io 1
    return
"""
    ctx = ExprContext()
    x = ctx.var("s", 0)
    fact = (ctx.sub(ctx.op("iszero", ctx.canonical_sign(ctx.sub(x, ctx.const(5)))), ctx.one), True)
    cond = ctx.sub(ctx.mul(x, x), ctx.const(25))
    assert decide(ctx, [fact], cond) is False  # z3: no x passes the assert with x*x != 25
    assert decide(ctx, [], cond) is None
    new, at = fold_branches(text.splitlines())
    new_text = "\n".join(new) + "\n"
    assert "__t:" not in new_text and len(at) == 1
    same_behaviour(text, new_text, [5, 4, 0, P - 5])
    assert outcome(text, 4)[0] is not None  # the guard really fails off 5


def test_an_undecidable_condition_with_an_opaque_operation_forks():
    # a hash is opaque to the solver: it must never be concretized into a proof
    ctx = ExprContext()
    x = ctx.var("s", 0)
    h = ctx.op("tip5", x)
    assert decide(ctx, [(ctx.sub(x, ctx.const(3)), True)], h) is None
    assert decide(ctx, [(h, True)], h) is False  # the fact itself decides it


def test_a_skiz_that_the_one_before_can_skip_keeps_what_it_would_skip():
    # skiz2 always pops 0, but when skiz1 skips skiz2, the call below runs
    text = """\
__k:
    push 0
    swap 1
    skiz
    skiz
    call __t
    push 4
    return

__t:
    push 99
    write_io 1
    return
"""
    found = fold_branches(text.splitlines())
    new_text = text if found is None else "\n".join(found[0]) + "\n"
    assert "call __t" in new_text
    for x in (0, 1, 2):
        assert outcome(new_text, x, 1)[:2] == outcome(text, x, 1)[:2]
    assert outcome(text, 0, 1)[1] == [99, 4]  # the skipped-skiz path calls __t


def test_a_value_overwritten_in_one_branch_is_decided_on_both_paths():
    # x != 0 -> __t sets it to 0; x == 0 stays 0: the second test is never taken
    text = """\
__k:
    dup 0
    skiz
    call __t
    dup 0
    skiz
    call __u
    push 3
    return

__t:
    pop 1
    push 0
    return

__u:
    push 99
    write_io 1
    return
"""
    new, _ = fold_branches(text.splitlines())
    new_text = "\n".join(new) + "\n"
    assert "__u:" not in new_text and "__t:" in new_text
    same_behaviour(text, new_text, XS)


def test_a_test_decided_on_one_path_only_stays():
    # __t adds 1 instead: x = p - 1 makes it 0, x = 1 makes it 2 (open after the branch)
    text = """\
__k:
    dup 0
    skiz
    call __t
    dup 0
    skiz
    call __u
    push 3
    return

__t:
    addi 1
    return

__u:
    push 99
    write_io 1
    return
"""
    assert fold_branches(text.splitlines()) is None
    assert outcome(text, P - 1, 1)[1] == [3]
    assert outcome(text, 1, 1)[1] == [99, 3]


@pytest.mark.parametrize(
    ("text", "others"),
    [
        # a loop: its iterations are not followed
        (
            "__k:\n    dup 0\n    skiz\n    call __l\n    return\n\n__l:\n    addi -1\n    dup 0\n    skiz\n    recurse\n    return\n",
            frozenset(),
        ),
        # a call out of the function: its effect on the stack is unknown
        (
            "__k:\n    call __g\n    dup 0\n    skiz\n    call __t\n    dup 0\n    skiz\n    call __t\n    return\n\n__t:\n    pop 1\n    push 0\n    return\n",
            frozenset(),
        ),
        # a section another function calls: entered in states this function never makes
        (chain((0, 0, 0)), frozenset({"__e4"})),
    ],
    ids=["loop", "external-call", "called-by-others"],
)
def test_what_the_exploration_cannot_cover_is_left_alone(text, others):
    assert known_branches(text.splitlines(), others_call=others) is None
    assert fold_branches(text.splitlines(), others_call=others) is None


def test_a_failing_branch_still_fails_where_it_ran():
    # an invert of 0 in the first branch; the decided second test must not hide it
    text = chain((0, 0, 0)).replace(
        "__t1:\n    pop 1\n", "__t1:\n    pop 1\n    dup 0\n    invert\n    pop 1\n"
    )
    new, _ = fold_branches(text.splitlines())
    new_text = "\n".join(new) + "\n"
    assert outcome(new_text, 0)[0] is not None and outcome(text, 0)[0] is not None
    same_behaviour(text, new_text, XS)


@pytest.mark.slow
def test_the_optimizer_folds_sha256_k_from_the_real_data():
    data = json.loads((DATA / "std_crypto_sha256.json").read_text())
    r = compile_tir(data["tir"], data["compiler_tasm"], options=CompileOptions(sources=("rules",)))
    k = next(f for f in r.functions if f.name == "k")
    assert any(n.startswith("conditions:") for n in k.notes), k.notes
    assert k.cycles is not None and k.baseline_cycles is not None
    assert k.cycles * 10 < k.baseline_cycles
    harness = "main:\n    read_io 1\n    call __k\n    write_io 2\n    halt\n"
    theirs = data["compiler_tasm"]  # k and its branch sections (other functions do not assemble)
    theirs = theirs[theirs.index("__k:") : theirs.index("__round:")]
    for i in (0, 1, 2, 63, 64, P - 1):
        outs = []
        for text in (theirs, "\n".join(k.tasm) + "\n"):
            res = run(
                parse(harness + text), VmInput(public_input=(i,)), measure=False, start="main"
            )
            outs.append((res.error is None, list(res.public_output)))
        assert outs[0] == outs[1], i


def test_an_aliased_cell_read_again_after_a_write_is_not_the_same_condition():
    # RAM[x] tested, then RAM[5] := 0 (x may be 5), then RAM[x] tested again: open
    text = "__k:\n    dup 0\n    read_mem 1\n    pop 1\n    skiz\n    call __t\n    push 0\n    push 5\n    write_mem 1\n    pop 1\n    dup 0\n    read_mem 1\n    pop 1\n    skiz\n    call __t\n    return\n\n__t:\n    push 99\n    write_io 1\n    return\n"
    decided = known_branches(text.splitlines())
    assert decided is not None
    second = [i for i, ln in enumerate(text.splitlines()) if ln.strip() == "skiz"][1]
    assert second not in decided


def test_a_high_degree_condition_is_not_decided_by_a_truncated_encoding():
    # x != 0 known; x^64 - 1 may be zero or not: the solver must not claim either
    ctx = ExprContext()
    x = ctx.var("s", 0)
    x64 = x
    for _ in range(6):
        x64 = ctx.mul(x64, x64)
    assert decide(ctx, [(x, False)], ctx.sub(x64, ctx.one)) is None
    assert decide(ctx, [(x, True)], x64) in (None, False)  # never "nonzero" when x == 0
