"""Adversarial tests of the function-level passes' proof obligations, one check at a time
(issue 33 item 3): each test feeds a proof an input that only one of its checks rejects, so
that dropping that check (`tasmopt.mutants`, ``benchmarks/proof_mutants.py``) makes the test
fail. Where a pass proves a fixed template of its own (``T``, ``T^-1``, a new body), the
test hands the proof a broken template: a later edit that gets the template wrong must be
refused by the proof, not discovered by the witnesses."""

from __future__ import annotations

import pytest
from test_absorb import BODY as ABSORB_BODY
from test_absorb import _text as absorb_text
from test_dots import XX
from test_early_exit import _text as euclid_text
from test_loops import MEMSET
from test_reverse import _text as sum_text

import tasmopt.optimizer.absorb as absorb
import tasmopt.optimizer.dots as dots
from tasmopt.mutants import EQUIVALENT, OBLIGATIONS, mutants
from tasmopt.optimizer import loops
from tasmopt.optimizer.conjugate import call_sites, parsed
from tasmopt.optimizer.early_exit import find_guarded_loops
from tasmopt.optimizer.pointers import Change, prove_change
from tasmopt.optimizer.reverse import _dead_after, find_reversals
from tasmopt.vm.expr import ExprContext
from tasmopt.vm.symbolic import run_symbolic

# -- the registry ----------------------------------------------------------------------------


def test_every_obligation_exists_and_has_checks():
    found = mutants()
    by_fn = {m.id.split("#")[0] for m in found}
    for fns in OBLIGATIONS.values():
        for fn in fns:
            assert fn in by_fn, f"{fn}: no check found (renamed? update tasmopt.mutants)"


def test_every_equivalent_mutant_is_current():
    """An entry of `EQUIVALENT` names a mutant that exists and drops the check it says."""
    by_id = {m.id: m for m in mutants()}
    for mid, (check, why) in EQUIVALENT.items():
        assert mid in by_id, f"{mid} no longer exists"
        assert check in by_id[mid].what, f"{mid} is now {by_id[mid].what!r}, not {check!r}"
        assert len(why) > 20


# -- shared loop shapes (loops.entered_sections, no_fall_through; conjugate.call_sites) ------


def test_the_first_section_is_never_entered_by_call_only():
    lines = MEMSET.splitlines()
    assert not loops.no_fall_through(lines, loops._sections(lines), 0)


def test_two_labels_in_a_row_fall_through():
    lines = ["__f:", "    call __b", "    return", "__a:", "__b:", "    push 1", "    return"]
    sections = loops._sections(lines)
    assert not loops.no_fall_through(lines, sections, 2)  # __a is empty: __b is reached


def test_guarded_enter_ok_needs_the_condition_on_top_and_no_effect():
    from tasmopt.optimizer.conjugate import guarded_enter_ok

    assert guarded_enter_ok([], [], "release")
    from tasmopt.optimizer.pointers import change_code

    swap = Change(None, swap=2)  # st0 <-> st2, and its version under a condition
    assert guarded_enter_ok(change_code(swap)[0], change_code(swap, 1)[0], "release")
    assert not guarded_enter_ok(change_code(swap)[0], change_code(swap)[0], "release")
    # the condition dropped and a 0 pushed in its place: the rest agrees, the skiz would not
    assert not guarded_enter_ok([], ["pop 1", "push 0"], "release")
    out = ["push 0", "write_io 1"]
    assert not guarded_enter_ok(out, out, "release"), "T writes output"
    fails = ["dup 1", "assert"]
    assert not guarded_enter_ok(["dup 0", "assert"], fails, "release"), "T may fail"


def test_call_sites_refuse_a_skiz_after_a_label_or_a_second_skiz():
    body = ["__l:", "    push 1", "    recurse_or_return"]
    for before in (["__f:", "    skiz"], ["__f:", "    push 1", "    skiz", "    skiz"]):
        lines = [*before, "    call __l", "    return", *body]
        assert call_sites(lines, "__l") == (), before


# -- loops -----------------------------------------------------------------------------------


def _memset(old: str, new: str) -> list[str]:
    text = MEMSET.replace(old, new, 1)
    assert text != MEMSET
    return text.splitlines()


@pytest.mark.parametrize(
    "old, new, why",
    [
        ("__loop__2:\n    dup 0\n", "__loop__2:\n    dup 1\n", "the test reads st1"),
        (
            "    push 0\n    eq\n    skiz\n    return",
            "    push 1\n    eq\n    skiz\n    return",
            "the loop stops at 1",
        ),
        ("    eq\n    skiz\n    return", "    lt\n    skiz\n    return", "the test is lt"),
        (
            "    skiz\n    return\n    addi -1",
            "    pop 1\n    return\n    addi -1",
            "it always returns",
        ),
        ("    skiz\n    return\n    addi -1", "    skiz\n    nop\n    addi -1", "no return"),
        ("    swap 1\n    recurse\n", "    swap 1\n    return\n", "it ends in return"),
        (
            "    swap 1\n    recurse\n",
            "    swap 1\n    push 7\n    recurse\n",
            "the body pushes a value",
        ),
    ],
)
def test_sections_that_are_not_the_counted_loop_shape_are_left_alone(old, new, why):
    assert loops.loop_shapes(_memset(old, new)) == [], why


def test_a_loop_nobody_calls_is_left_alone():
    lines = _memset("    call __loop__2\n", "    pop 1\n    push 0\n")
    assert loops.loop_shapes(lines) == []


HELPER = "\n__h:\n    push 9\n    pop 1\n    return\n"
H3 = "\n__h3:\n    push 8\n    swap 1\n    return\n"
TWO = "\n__h2:\n    push 8\n    push 9\n    return\n"


@pytest.mark.parametrize(
    "body, extra, why",
    [
        ("    push 1\n    skiz\n    push 2\n    pop 1\n", "", "skiz skips no call"),
        ("    push 1\n    skiz\n    call __x\n", "", "skiz calls no helper"),
        ("    push 1\n    call __h\n    call __h\n    pop 1\n", HELPER, "a call is no skiz"),
        ("    push 1\n    call __h\n    call __h\n", HELPER, "a call is no skiz (balanced)"),
        ("    push 0\n    skiz\n", "", "the skiz skips the recurse"),
        ("    push 1\n    skiz\n    call __h3\n", H3, "one path pushes below the counter"),
        ("    dup 0\n    skiz\n    call __h2\n    pop 1\n", TWO, "one path pushes a value"),
    ],
)
def test_loop_bodies_with_control_flow_the_proof_does_not_cover_are_left_alone(body, extra, why):
    lines = _memset("    swap 1\n    recurse\n", f"    swap 1\n{body}    recurse\n")
    lines += extra.splitlines()
    assert loops.loop_shapes(lines) == [], why


def test_more_branches_than_the_limit_are_left_alone():
    branch = "    push 1\n    skiz\n    call __h\n"
    n = loops.MAX_BRANCHES + 1
    lines = _memset("    swap 1\n    recurse\n", f"    swap 1\n{branch * n}    recurse\n")
    assert loops.loop_shapes([*lines, *HELPER.splitlines()]) == []
    ok = _memset("    swap 1\n    recurse\n", f"    swap 1\n{branch}    recurse\n")
    assert len(loops.loop_shapes([*ok, *HELPER.splitlines()])) == 1  # one branch is fine


def test_a_call_right_after_the_label_has_no_known_counter():
    from tasmopt.optimizer.unroll import find_unrollings

    lines = _memset("__memset:\n    push 0\n    dup 1\n", "__memset:\n")
    assert len(loops.loop_shapes(lines)) == 1
    assert find_unrollings(lines, []) == []


# -- early_exit ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "old, new, why",
    [
        ("    addi -1\n", "    addi -2\n", "the counter steps by 2"),
        (
            "    skiz\n    call __then__1\n    recurse",
            "    pop 1\n    call __then__1\n    recurse",
            "the branch is unconditional",
        ),
        ("    skiz\n    call __then__1\n    recurse", "    skiz\n    nop\n    recurse", "no call"),
        ("    call __then__1\n    recurse\n", "    call __then__1\n    return\n", "no recurse"),
    ],
)
def test_loops_not_in_the_guarded_shape_are_left_alone(old, new, why):
    text = euclid_text()
    assert len(find_guarded_loops(text.splitlines())) == 1
    changed = text.replace(old, new, 1)
    assert changed != text
    assert find_guarded_loops(changed.splitlines()) == [], why


def test_a_short_section_with_the_guarded_head_is_left_alone():
    text = euclid_text().replace(
        "__then__1:\n",
        "__short:\n    dup 0\n    push 0\n    eq\n    skiz\n    return\n"
        "    addi -1\n    recurse\n\n__then__1:\n",
    )
    assert all(g.label != "__short" for g in find_guarded_loops(text.splitlines()))


# -- reverse ---------------------------------------------------------------------------------


def test_ends_left_on_the_stack_at_return_are_observed():
    """The code after the call must consume st5 and st6: left in place, the function
    returns them, and the reversed loop leaves other values there."""
    text = sum_text()
    lines = text.splitlines()
    site = next(i for i, ln in enumerate(lines) if "call __loop__1" in ln)
    assert _dead_after(lines, site, "release")
    short = text.replace("    swap 1\n    pick 5\n    pick 6\n    pop 3\n    return", "    return")
    assert find_reversals(short.splitlines()) == []


def test_a_failure_guard_on_the_ends_after_the_loop_keeps_the_loop():
    """``split`` fails on no input, but a guard kind the check cannot read (``false``) on
    code after the call keeps the loop."""
    text = sum_text().replace(
        "    swap 1\n    pick 5\n    pick 6\n    pop 3\n    return",
        "    swap 1\n    pick 5\n    pick 6\n    pop 3\n    push 0\n    assert\n    return",
    )
    assert find_reversals(text.splitlines()) == []


# -- pointers --------------------------------------------------------------------------------


def test_prove_change_refuses_a_change_that_does_not_restore_or_has_an_effect(monkeypatch):
    """``st0 <-> st14`` has no version under a condition (it would reach st15), so the
    checks of ``T`` itself stand alone here."""
    import tasmopt.optimizer.pointers as pointers

    good = Change(None, swap=14)
    assert prove_change(good) is None
    real = pointers.change_code
    for fwd_extra, why in [
        (["push 0"], "T pushes a value T^-1 does not pop"),
        (["push 0", "write_io 1"], "T writes output"),
        (["dup 0", "assert"], "T may fail"),
        (["push 0", "push 0", "write_mem 1", "pop 1"], "T writes RAM"),
        (["read_io 1", "pop 1"], "T consumes input"),
        (["sponge_init"], "T resets the sponge"),
        (["push 1", "add"], "T adds to st0"),
    ]:

        def code(change, offset=0, fwd_extra=fwd_extra):
            fwd, back = real(change, offset)
            return [*fwd, *fwd_extra], back

        monkeypatch.setattr(pointers, "change_code", code)
        assert prove_change(good) is not None, why
    monkeypatch.setattr(pointers, "change_code", real)


def test_prove_change_refuses_a_guarded_t_that_is_not_t(monkeypatch):
    import tasmopt.optimizer.pointers as pointers

    real = pointers.change_code
    change = Change(None, swap=2)
    assert prove_change(change) is None
    monkeypatch.setattr(pointers, "change_code", lambda c, offset=0: real(c, 0))
    assert prove_change(change) == "T under a skiz condition is not T"


def test_prove_change_refuses_a_test_scaled_by_zero():
    """A retarget by a pointer that steps by 0 makes st5 == st6 on every state."""
    assert prove_change(Change(None, scale=0)) is not None
    assert prove_change(Change(None, retarget=(2, 0))) is not None
    assert prove_change(Change(None, retarget=(2, 3))) is None


# -- dots: the plan's T, T^-1 and new body -----------------------------------------------


def _dot_plan():
    body = parsed([ln.strip() for ln in XX.splitlines()], "release")
    plan = dots._plan(body, "release")
    assert plan is not None
    run = run_symbolic(body, ExprContext(), "release")
    depth = max(run.base, dots.N_SLOT + 1)
    assert dots._proven(body, plan, depth, "release")
    return body, plan, depth


def test_dots_proof_refuses_a_broken_plan():
    body, (step, (enter, under), leave, new_body), depth = _dot_plan()
    broken = {
        "the new body writes output": (
            step,
            (enter, under),
            leave,
            (*new_body, "push 0", "write_io 1"),
        ),
        "T does not restore the loop's test": (
            step,
            (("pick 5", "addi 1", "place 5", *enter), under),
            ("pick 7", "addi -1", "place 7", *leave) if False else leave,
            new_body,
        ),
        "T^-1 leaves a value": (step, (enter, under), (*leave, "push 0"), new_body),
        "T^-1 may fail": (step, (enter, under), (*leave, "dup 0", "assert"), new_body),
        "the guarded T leaves another value on top": (
            step,
            (enter, (*under, "swap 1")),
            leave,
            new_body,
        ),
        "the guarded T swaps the pointers below the condition": (
            step,
            (enter, (*under, "pick 2", "place 1")),
            leave,
            new_body,
        ),
        "the guarded T writes output": (
            step,
            (enter, (*under, "push 0", "write_io 1")),
            leave,
            new_body,
        ),
        "T moves the loop's pointer st5 (T^-1 moves it back)": (
            step,
            ((*enter, "pick 5", "addi 1", "place 5"), (*under, "pick 6", "addi 1", "place 6")),
            ("pick 5", "addi -1", "place 5", *leave),
            new_body,
        ),
        "T moves the loop's bound st6 (T^-1 moves it back)": (
            step,
            ((*enter, "pick 6", "addi 1", "place 6"), (*under, "pick 7", "addi 1", "place 7")),
            ("pick 6", "addi -1", "place 6", *leave),
            new_body,
        ),
        "T^-1 swaps two elements": (step, (enter, under), (*leave, "swap 1"), new_body),
        "the guarded T is another T": (
            step,
            (enter, (*under, "pick 3", "addi 1", "place 3")),
            leave,
            new_body,
        ),
    }
    for why, plan in broken.items():
        assert not dots._proven(body, plan, depth, "release"), why
    cut = [*body, *parsed(["skiz"], "release")]  # the symbolic runs stop at the skiz
    assert dots._plan(cut, "release") is None
    assert not dots._proven(cut, (step, (enter, under), leave, new_body), depth, "release")
    noisy = [*body, *parsed(["push 0", "write_io 1"], "release")]
    plan = (step, (enter, under), leave, new_body)
    assert not dots._proven(noisy, plan, depth, "release"), "the old body writes output"


# -- absorb: the templates ------------------------------------------------------------------


def test_absorb_proof_refuses_broken_templates(monkeypatch):
    assert absorb._new_body_ok.__wrapped__("release")
    real_new, real_enter, real_leave = absorb.new_body, absorb.enter, absorb.leave
    cases = {
        "the new body writes output": ("new_body", lambda: [*real_new(), "push 0", "write_io 1"]),
        "the new body writes RAM": (
            "new_body",
            lambda: [*real_new(), "push 0", "push 0", "write_mem 1", "pop 1"],
        ),
        "the new body leaves a value": ("new_body", lambda: [*real_new(), "push 0"]),
        "the new body moves the pointer by 9": (
            "new_body",
            lambda: [*real_new()[:2], "addi 9", *real_new()[3:]],
        ),
        "the new body moves st0 and st5 by a scratch element": (
            "new_body",
            lambda: ["pick 5", "dup 2", "add", "place 5", "dup 1", "add", *real_new()],
        ),
        "the new body changes st6": (
            "new_body",
            lambda: [*real_new(), "pick 6", "addi 1", "place 6"],
        ),
        "T^-1 leaves a value": ("leave", lambda: [*real_leave(), "push 0"]),
        "T^-1 may fail": ("leave", lambda: [*real_leave(), "dup 0", "assert"]),
        "T; T^-1 is not the identity": ("leave", lambda: [*real_leave(), "swap 1"]),
    }
    for why, (name, fn) in cases.items():
        monkeypatch.setattr(absorb, name, fn)
        assert not absorb._new_body_ok.__wrapped__("release"), why
        monkeypatch.setattr(
            absorb, name, {"new_body": real_new, "enter": real_enter, "leave": real_leave}[name]
        )


def test_find_absorptions_needs_the_templates_proven(monkeypatch):
    lines = absorb_text().splitlines()
    assert absorb.find_absorptions(lines)
    real_new = absorb.new_body
    # reads a scratch element: right on the first iteration (T zeroes them), wrong after it
    monkeypatch.setattr(
        absorb,
        "new_body",
        lambda: ["pick 5", "dup 2", "add", "place 5", "dup 1", "add", *real_new()],
    )
    absorb._new_body_ok.cache_clear()
    try:
        assert absorb.find_absorptions(lines) == []
    finally:
        monkeypatch.undo()
        absorb._new_body_ok.cache_clear()


def test_absorb_body_ok_refuses_bodies_one_check_rejects():
    body = parsed([ln.strip() for ln in ABSORB_BODY.splitlines() if ln.strip()], "release")
    offset = next(c for c in absorb.OFFSETS if absorb._body_ok(body, c, "release"))
    for extra, why in [
        (["push 0"], "the body leaves a value"),
        (["dup 0", "assert"], "the body may fail"),
        (["push 0", "write_io 1"], "the body writes output"),
        (["read_io 1", "pop 1"], "the body consumes input"),
        (["push 0", "push 0", "write_mem 1", "pop 1"], "the body writes RAM"),
        (["pick 6", "addi 1", "place 6"], "the body changes st6"),
    ]:
        assert not absorb._body_ok([*body, *parsed(extra, "release")], offset, "release"), why
    assert not absorb._body_ok([*body, *parsed(["skiz"], "release")], offset, "release"), (
        "a skiz at the end of the body (the symbolic run stops there)"
    )
    real_enter = absorb.enter
    try:
        absorb.enter = lambda off, under=0: [
            *real_enter(off, under),
            *(["pick 2", "place 1"] * under),
        ]
        assert not absorb._body_ok(body, offset, "release"), "the guarded T differs"
        absorb.enter = lambda off, under=0: [
            *real_enter(off, under),
            f"pick {12 + under}",
            "addi 1",
            f"place {12 + under}",
        ]
        assert not absorb._body_ok(body, offset, "release"), "T changes st12, T^-1 does not undo"
        absorb.enter = lambda off, under=0: real_enter(off + 1, under)
        assert not absorb._body_ok(body, offset, "release"), "T reads the words one off"
    finally:
        absorb.enter = real_enter
    no_sponge = parsed(["pick 5", "addi 10", "place 5"], "release")
    assert not absorb._body_ok(no_sponge, offset, "release"), "no sponge"


def test_the_absorb_fixture_qualifies():
    assert absorb.find_absorptions(absorb_text().splitlines())


# -- reverse (more) ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, why",
    [
        ("read_io 1\n    mul\n    add", "each term reads the next input: the order matters"),
        ("add\n    sponge_init", "the body resets the sponge"),
        ("add\n    pick 6\n    addi 1\n    place 6", "the body moves the bound st6"),
        ("add\n    pick 5\n    addi 10\n    place 5", "the pointer steps by 11"),
        ("add\n    push 0\n    write_io 1", "the body writes output"),
    ],
)
def test_more_reduction_bodies_the_proof_does_not_cover_are_left_alone(body, why):
    assert find_reversals(sum_text("add").splitlines()), "the plain sum qualifies"
    assert find_reversals(sum_text(body).splitlines()) == [], why


def test_a_comment_after_the_call_is_no_code():
    text = sum_text().replace("    call __loop__1\n", "    call __loop__1\n    // summed\n")
    assert len(find_reversals(text.splitlines())) == 1


def test_a_second_skiz_before_a_guarded_reduction_keeps_the_loop():
    text = sum_text().replace(
        "    skiz\n    call __loop__1", "    skiz\n    skiz\n    call __loop__1"
    )
    assert find_reversals(text.splitlines()) == []


def test_reverse_proofs_refuse_broken_templates(monkeypatch):
    import tasmopt.optimizer.reverse as rev

    real_swap, real_walk = rev.swap_ends, rev.walk_ends
    assert rev._swap_ends_ok(1, 0, "release") and rev._swap_ends_ok(-2, 1, "release")
    assert rev._walk_ends_ok(1, [(2, 1)], 0, "release")
    for bad, why in [(["dup 0", "assert"], "may fail"), (["swap 1"], "moves st0")]:
        monkeypatch.setattr(
            rev, "swap_ends", lambda step, under=0, bad=bad: [*real_swap(step, under), *bad]
        )
        assert not rev._swap_ends_ok(1, 0, "release"), why
        monkeypatch.setattr(
            rev,
            "walk_ends",
            lambda step, walkers, under=0, bad=bad: [*real_walk(step, walkers, under), *bad],
        )
        assert not rev._walk_ends_ok(1, [(2, 1)], 0, "release"), why
        monkeypatch.setattr(rev, "swap_ends", real_swap)
        monkeypatch.setattr(rev, "walk_ends", real_walk)


# -- branches --------------------------------------------------------------------------------


def test_a_then_body_that_leaves_no_zero_is_no_if_else():
    """``push 1 swap 1 skiz call T skiz call E`` runs E unless T leaves 0 on top: a T that
    leaves a copy of an input (zero only sometimes) is not the if/else idiom."""
    from test_branches import IF_ELSE, lines

    from tasmopt.optimizer.branches import find_branches

    assert len(find_branches(lines(IF_ELSE))) == 1
    for then in ("pop 1\n    dup 2", "pop 1\n    pop 1"):  # a copy of an input; nothing
        other = IF_ELSE.replace("    pop 1\n    push 0\n    return", f"    {then}\n    return")
        assert find_branches(lines(other)) == [], then


# -- conditions ------------------------------------------------------------------------------


def test_known_branches_gives_up_where_code_runs_off_a_section():
    from tasmopt.optimizer.conditions import known_branches

    assert known_branches(["__f:", "    push 1", "    pop 1"]) is None  # no return
    skiz_last = ["__f:", "    push 0", "    skiz", "__g:", "    push 1", "    return"]
    assert known_branches(skiz_last) is None  # what the skiz skips lies in __g


def test_known_branches_needs_a_labelled_function():
    from tasmopt.optimizer.conditions import known_branches

    assert known_branches(["    push 1", "    skiz", "    push 2", "    return"]) is None


def test_reachable_sections_of_a_cycle_are_found_once():
    from tasmopt.optimizer.conditions import _reachable

    text = [
        "__f:",
        "    call __a",
        "    return",
        "__a:",
        "    call __b",
        "    return",
        "__b:",
        "    call __a",
        "    return",
    ]
    assert _reachable(text, loops._sections(text)) == {0, 1, 2}


# -- shortcuts, checks -----------------------------------------------------------------------


def test_shortcuts_and_checks_take_sections_and_functions_that_are_odd_shapes():
    from tasmopt.optimizer.checks import zero_checks
    from tasmopt.optimizer.shortcuts import shortcut_calls

    empty = ["__f:", "    call __a", "    return", "__e:", "__a:", "    push 1", "    return"]
    got = shortcut_calls(empty)
    assert got is not None and "    push 1" in got[0]  # __a shortcut, the empty __e ignored
    assert zero_checks([]) is None
    assert zero_checks(["    push 0", "    eq", "    assert", "    return"]) is None  # no label


def test_a_counted_loop_with_an_empty_body_is_left_alone():
    lines = _memset(
        "    addi -1\n" + MEMSET.split("    addi -1\n", 1)[1], "    addi -1\n    recurse\n"
    )
    assert loops.loop_shapes(lines) == []
