"""The function-level ``unroll`` pass (`tasmopt.optimizer.unroll`): counted loops with a
short constant trip count become copies of their body. Behaviour is preserved at trip
counts 0, 1 and many, with a branch in the body; adversarial: a counter that is not a
constant on every input, a body that touches the counter, a call a ``skiz`` may skip, a loop
another function calls, a loop entered by fall-through, and trip counts past the cost model
are all left alone, and a wrong unrolling is caught by the function check. Also: a rare
guard, a high-degree body and aliased RAM accesses keep their outcome in the copies; a sponge
the counter never reaches is unrolled and keeps its outcome, one that absorbs the counter and
a label inside the body are left alone; a client baseline that differs from our lowering is
what the result matches."""

from __future__ import annotations

from pathlib import Path

import pytest

from tasmopt.frontend import compile_modules
from tasmopt.isa import P
from tasmopt.optimizer import compile as compile_tir
from tasmopt.optimizer.unroll import MAX_TRIPS, find_unrollings, unroll
from tasmopt.report import CompileOptions
from tasmopt.tasm.parser import parse
from tasmopt.vm.simulator import run
from tasmopt.vm.witness import VmInput

ROOT = Path(__file__).resolve().parents[1]

#: triple(acc, x): K times { if acc == 7 { acc += 100 }; acc = acc * x + 1 }, K pushed
#: before the call (the lowering's `for _ in 0..K`)
TRIPLE = """\
__triple:
    push K
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
    dup 2
    push 7
    eq
    skiz
    call __then__1
    swap 2
    dup 1
    mul
    addi 1
    swap 2
    recurse

__then__1:
    swap 2
    addi 100
    swap 2
    return
"""


def _text(k: int | str, base: str = TRIPLE) -> str:
    return base.replace("push K", f"push {k}")


def _call(text: str, acc: int, x: int):
    """Outputs, final stack and cycles of ``triple(acc, x)`` printing its result."""
    main = "main:\n    read_io 1\n    read_io 1\n    call __triple\n    write_io 1\n    halt\n"
    r = run(parse(main + text), VmInput(public_input=(acc, x), initial_stack=[0] * 16))
    assert r.error is None, r.error
    return list(r.public_output), list(r.stack), r.cycles


def _expected(acc: int, x: int, k: int) -> int:
    for _ in range(k):
        if acc == 7:
            acc += 100
        acc = (acc * x + 1) % P
    return acc


@pytest.mark.parametrize("k", [0, 1, 2, 5])
@pytest.mark.parametrize("acc, x", [(7, 3), (2, 3), (0, 1)])  # (7, ...): the branch taken
def test_unrolled_loops_keep_behaviour_at_trip_counts_zero_one_and_many(k, acc, x):
    lines = _text(k).splitlines()
    (u,) = find_unrollings(lines, [])
    assert u.trips == {2: k} and u.whole
    new, spans = unroll(lines, [u])
    text = "\n".join(new) + "\n"
    assert "__loop__1" not in text and "recurse" not in text  # the dead section is gone
    assert "call __then__1" in text or k == 0  # the branch is copied, its section kept
    before, after = _call(_text(k), acc, x), _call(text, acc, x)
    assert after[:2] == before[:2]
    assert before[0] == [_expected(acc, x, k)]
    assert after[2] < before[2]  # the loop control is gone
    assert spans  # the copies are handed to the block sources


#: a second call site whose counter is read from input: that site keeps the loop
TWO_SITES = TRIPLE.replace(
    "    pop 1\n    pop 1\n    return\n",
    "    pop 1\n    read_io 1\n    call __loop__1\n    pop 1\n    pop 1\n    return\n",
    1,
)


def test_a_site_whose_counter_is_not_constant_keeps_the_loop():
    lines = _text(3, TWO_SITES).splitlines()
    (u,) = find_unrollings(lines, [])
    assert list(u.trips.values()) == [3] and not u.whole
    new, _ = unroll(lines, [u])
    text = "\n".join(new) + "\n"
    assert "__loop__1:" in text and "call __loop__1" in text  # the other site still calls it
    main = "main:\n    read_io 1\n    read_io 1\n    call __triple\n    write_io 1\n    halt\n"
    for acc, x, n in [(2, 3, 0), (7, 2, 1), (1, 5, 4)]:
        inp = VmInput(public_input=(acc, x, n), initial_stack=[0] * 16)
        a = run(parse(main + _text(3, TWO_SITES)), inp)
        b = run(parse(main + text), inp)
        assert a.error is None and b.error is None
        assert list(a.public_output) == list(b.public_output)
        assert list(a.stack) == list(b.stack)


LEFT_ALONE = {
    # the counter depends on the input: no constant trip count
    "counter-from-input": ("    push K\n    call __loop__1", "    read_io 1\n    call __loop__1"),
    # the counter is a copy of x: a constant trip count only on the inputs where x is one
    "counter-is-x": ("    push K\n    call __loop__1", "    dup 0\n    call __loop__1"),
    # the body decrements the counter a second time: the trip count is not K
    "body-moves-counter": ("    swap 2\n    recurse", "    swap 2\n    addi -1\n    recurse"),
    # the body reads the counter into the result
    "body-reads-counter": ("    addi 1\n    swap 2", "    dup 2\n    add\n    swap 2"),
    # a skiz before the call would skip only the first copy
    "skippable-call": (
        "    push K\n    call __loop__1",
        "    push K\n    skiz\n    call __loop__1",
    ),
    # past the cost model
    "too-many-trips": ("    push K", f"    push {MAX_TRIPS + 1}"),
    # a counter of p - 1 is no short loop (the field wraps: not a small trip count)
    "negative-counter": ("    push K", "    push -1"),
}


@pytest.mark.parametrize("name", sorted(LEFT_ALONE))
def test_loops_the_proof_does_not_cover_are_left_alone(name):
    old, new = LEFT_ALONE[name]
    text = _text(4).replace(old.replace("push K", "push 4"), new.replace("push K", "push 4"), 1)
    assert text != _text(4), name
    assert find_unrollings(text.splitlines(), []) == []


def test_a_counter_made_constant_by_algebra_is_proven_constant():
    text = _text(4).replace(
        "    push 4\n", "    dup 0\n    push -1\n    mul\n    dup 1\n    add\n    addi 3\n"
    )
    (u,) = find_unrollings(text.splitlines(), [])
    assert list(u.trips.values()) == [3]


def test_a_loop_another_function_calls_or_reached_by_fall_through_is_left_alone():
    lines = _text(3).splitlines()
    other = ["__other:", "    push 9", "    call __loop__1", "    return"]
    assert find_unrollings(lines, [other]) == []
    falls = _text(3).replace("    pop 1\n    return\n\n__loop__1:", "    pop 1\n\n__loop__1:", 1)
    assert falls != _text(3)
    assert find_unrollings(falls.splitlines(), []) == []


def test_a_wrong_unrolling_is_caught_by_the_function_check(monkeypatch):
    """If the pass copied the body one time too few, the function check must reject the
    result and the function keep its loop."""
    import tasmopt.optimizer.unroll as mod

    real = mod.unroll

    def short(lines, unrollings):
        cut = [
            mod.Unrolling(u.shape, {s: max(0, k - 1) for s, k in u.trips.items()})
            for u in unrollings
        ]
        return real(lines, cut)

    monkeypatch.setattr(mod, "unroll", short)
    r = _compile_fixed("horner4")
    assert "unroll" not in " ".join(n for n in r.notes if "cycles" in n)
    assert any("unroll" in n and "not verified" in n for n in r.notes), r.notes


def _compile_fixed(name: str):
    mods = compile_modules(ROOT / "corpus" / "array" / "fixed.tri", [ROOT / "corpus"])
    opts = CompileOptions(sources=("rules", "search"), only=frozenset({name}))
    r = compile_tir(mods[-1].ops, options=opts)
    return next(f for f in r.functions if f.name == name)


def test_the_optimizer_unrolls_horner4_and_keeps_behaviour():
    """horner4 (corpus array.fixed): ``for i in 0..4`` unrolled; fewer cycles, the program
    longer, no execution table taller, the padded height no larger."""
    f = _compile_fixed("horner4")
    assert any(n.startswith("unroll") and "cycles" in n for n in f.notes), f.notes
    assert "recurse" not in "\n".join(f.tasm)
    assert f.cycles < f.baseline_cycles
    assert f.padded_height <= f.baseline_padded_height
    for table in ("processor", "op_stack", "ram", "jump_stack", "u32"):
        assert f.heights.get(table, 0) <= f.baseline_heights.get(table, 0), table


def test_a_longer_rewrite_never_raises_the_padded_height_of_what_it_replaces():
    """Fewer cycles are no gain when the proof gets taller: a rewrite that lengthens the
    program is refused when its padded height exceeds the current version's, even where
    the baseline's is taller still (digit_sum once went 512 -> 1024 that way)."""
    from tasmopt.optimizer.state import refusal
    from tasmopt.vm.equivalence import FunctionVerdict

    base = {"processor": 300, "u32": 600, "program": 60}
    cand = {"processor": 60, "u32": 600, "program": 300, "hash": 520}
    v = FunctionVerdict(True, cycles=60, heights=cand, baseline_heights=base)
    assert refusal(v, 110, longer=True) is None  # within the baseline's 1024
    why = refusal(v, 110, longer=True, current_padded=512)
    assert why is not None and "padded height 1024" in why
    assert refusal(v, 110) is not None  # design §2's strict rule: the program grew


# -- adversarial: what could make an unrolled loop accept a different program --------------


#: the body's extra lines are inserted before ``swap 2`` (acc at st2, x at st1, c on top)
def _with_body(extra: str, k: int = 3) -> str:
    return _text(k).replace(
        "    swap 2\n    dup 1\n    mul", extra + "    swap 2\n    dup 1\n    mul", 1
    )


def _outcome(text: str, inputs: tuple[int, ...], main: str | None = None):
    main = (
        main or "main:\n    read_io 1\n    read_io 1\n    call __triple\n    write_io 1\n    halt\n"
    )
    r = run(parse(main + text), VmInput(public_input=inputs, initial_stack=[0] * 16))
    return (r.error is None, list(r.public_output), list(r.stack) if r.error is None else None)


def _unrolled(text: str) -> str:
    found = find_unrollings(text.splitlines(), [])
    assert found, "expected the loop to qualify"
    return "\n".join(unroll(text.splitlines(), found)[0]) + "\n"


def test_a_rare_guard_in_the_body_fails_in_the_copies_exactly_when_in_the_loop():
    # assert x != 12345 in every iteration: random inputs never fail it
    guarded = _with_body("    dup 1\n    push 12345\n    eq\n    push 0\n    eq\n    assert\n")
    copies = _unrolled(guarded)
    for inputs in [(2, 3), (7, 5), (2, 12345)]:
        assert _outcome(copies, inputs) == _outcome(guarded, inputs), inputs
    assert _outcome(guarded, (2, 12345))[0] is False  # the guard really fails there


def test_a_high_degree_body_keeps_its_values():
    # acc := acc^8 * x + 1 per iteration: degree 8^k, far past any witness-count bound
    high = _with_body(
        "    swap 2\n    dup 0\n    mul\n    dup 0\n    mul\n    dup 0\n    mul\n    swap 2\n", 5
    )
    copies = _unrolled(high)
    for inputs in [(2, 3), (P - 1, 2), (0, 0), (123456789, 987654321)]:
        assert _outcome(copies, inputs) == _outcome(high, inputs), inputs


def test_aliased_ram_accesses_in_the_body_keep_their_order():
    # every iteration writes acc at address x and reads address 77 into acc's place: when
    # x == 77 the read sees the write (aliased), otherwise an older value
    ram = _with_body(
        "    dup 2\n    dup 2\n    write_mem 1\n    pop 1\n"
        "    push 77\n    read_mem 1\n    pop 1\n    swap 3\n    pop 1\n"
    )
    copies = _unrolled(ram)
    for inputs in [(5, 77), (5, 76), (9, 0)]:
        assert _outcome(copies, inputs) == _outcome(ram, inputs), inputs
    assert _outcome(ram, (5, 77)) != _outcome(ram, (5, 76))  # aliasing changes the result


@pytest.mark.parametrize("k", [0, 1, 3])
def test_a_sponge_the_counter_never_reaches_is_unrolled_and_keeps_behaviour(k):
    # the sponge state is carried from one iteration to the next like the op stack: the
    # body facts cover it (what it absorbs must not depend on the counter)
    sponge = _with_body(
        "    sponge_squeeze\n    pop 5\n    pop 4\n    pick 3\n    add\n    place 2\n", k
    )
    (found,) = find_unrollings(sponge.splitlines(), [])
    copies = "\n".join(unroll(sponge.splitlines(), [found])[0]) + "\n"
    assert "recurse" not in copies
    main = "main:\n    sponge_init\n    read_io 1\n    read_io 1\n    call __triple\n"
    main += "    write_io 1\n    halt\n"
    for inputs in [(2, 3), (7, 5)]:
        before = _outcome(sponge, inputs, main)
        assert before[0] and _outcome(copies, inputs, main) == before, inputs


def test_a_sponge_that_absorbs_the_counter_is_left_alone():
    absorb = "    dup 0\n" + "    push 1\n" * 9 + "    sponge_absorb\n"
    sponge = _with_body(absorb + "    sponge_squeeze\n    pop 5\n    pop 5\n")
    assert find_unrollings(sponge.splitlines(), []) == []
    main = "main:\n    sponge_init\n    read_io 1\n    read_io 1\n    call __triple\n    halt\n"
    assert run(parse(main + sponge), VmInput(public_input=(2, 3))).error is None  # it runs


def test_a_label_inside_the_body_is_left_alone():
    # another entry into the middle of the loop body: the section is no counted loop
    mid = _text(3).replace(
        "    swap 2\n    dup 1\n    mul", "__loop__1_mid:\n    swap 2\n    dup 1\n    mul", 1
    )
    assert find_unrollings(mid.splitlines(), []) == []
    assert _outcome(mid, (2, 3))[0]  # the text assembles and runs


@pytest.mark.parametrize("rewrite_mismatched", [False, True])
def test_a_client_baseline_that_differs_from_our_lowering_is_what_the_result_must_match(
    rewrite_mismatched,
):
    """The client's horner4 runs its loop 3 times where our lowering runs it 4: whatever
    comes back (the client's text unchanged, or optimized on it with the client stage)
    behaves as the client's program, never as our lowering."""
    from tasmopt.lower.triton import lower
    from tasmopt.module import ModuleText
    from tasmopt.vm.equivalence import check_function

    mods = compile_modules(ROOT / "corpus" / "array" / "fixed.tri", [ROOT / "corpus"])
    ops = mods[-1].ops
    low = lower(ops)
    labels = {f.name: f.label for f in low.functions if f.name}
    ours = ModuleText.from_lowering(low)
    text = "\n".join(ours.lines) + "\n"
    h = ours.section_lines("horner4")
    site = next(i for i, ln in enumerate(h) if ln.strip().startswith("call ") and "loop" in ln)
    assert h[site - 1].strip() == "push 4", h[site - 3 : site + 1]
    client_lines = list(ours.lines)
    at = client_lines.index(h[0]) + site - 1
    client_lines[at] = "    push 3"
    client = "\n".join(client_lines) + "\n"
    opts = CompileOptions(
        sources=("rules", "search"),
        only=frozenset({"horner4"}),
        rewrite_mismatched=rewrite_mismatched,
    )
    r = compile_tir(ops, client, options=opts)
    out = ModuleText.from_text(r.tasm, labels)
    ref = ModuleText.from_text(client, labels)
    v = check_function(ref.harness("horner4", "release"), out.harness("horner4", "release"), seed=7)
    assert v.equivalent, v.reason
    mine = ModuleText.from_text(text, labels)
    w = check_function(
        mine.harness("horner4", "release"), out.harness("horner4", "release"), seed=7
    )
    assert not w.equivalent  # it is not our lowering's program
