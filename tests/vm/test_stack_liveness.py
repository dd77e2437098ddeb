"""Dead op-stack slots (`tasmopt.vm.stack_liveness`) and the verifier's use of them (design §2,
issue 11 item 6): a run may leave anything in a slot the program never reads again, and
nothing else. Adversarial: every way a value could still be read — a callee reaching below
its arguments, one branch of a ``skiz``, the next loop iteration, an external call, a
failure, a return — must keep its slot live, and the verifier must then reject a candidate
that changes it."""

from __future__ import annotations

import random

import pytest

from tasmopt.search.optimize import SearchConfig, optimize_block
from tasmopt.tasm.parser import parse, parse_instructions
from tasmopt.vm.equivalence import BlockCheck, check_aligned, check_block, check_function
from tasmopt.vm.scratch import items_of_program
from tasmopt.vm.simulator import run
from tasmopt.vm.stack_liveness import StackLiveness, of_program
from tasmopt.vm.witness import witness


def program(body: str):
    return parse("    call main\n    halt\n" + body)


def index_of(prog, text: str, nth: int = 0) -> int:
    hits = [k for k, it in enumerate(prog.items) if str(it).strip() == text]
    return hits[nth]


# -- the analysis ----------------------------------------------------------------------------

MAIN_POPS = """
main:
    push 1
    push 2
    dup 1
    call g
    pop 3
    return
g:
    dup 0
    write_io 1
    return
"""


def test_slots_only_popped_later_are_dead_and_a_callees_reach_is_live():
    prog = program(MAIN_POPS)
    live = of_program(prog)
    assert live.summary("g").reach == 1 and live.summary("g").delta == 0
    # before `call g`: g reads st0; st1 and st2 are popped after it unread
    assert live.dead_before(index_of(prog, "call g")) == {1, 2}
    assert live.dead_before(index_of(prog, "pop 3")) == {0, 1, 2}
    assert live.dead_before(index_of(prog, "return")) == frozenset()


def test_a_callee_reading_below_its_arguments_keeps_those_slots_live():
    prog = program(MAIN_POPS.replace("g:\n    dup 0", "g:\n    dup 2"))
    live = of_program(prog)
    assert live.summary("g").reach == 3
    assert live.dead_before(index_of(prog, "call g")) == frozenset()


def test_nested_callees_compose_their_reach_and_delta():
    prog = program("""
main:
    push 1
    push 2
    push 3
    call g
    pop 2
    return
g:
    call h
    pop 1
    return
h:
    dup 1
    write_io 1
    push 9
    return
""")
    live = of_program(prog)
    assert live.summary("h").reach == 2 and live.summary("h").delta == 1
    assert live.summary("g").reach == 2 and live.summary("g").delta == 0
    assert live.dead_before(index_of(prog, "call g")) == frozenset()  # st0, st1 reached
    assert live.dead_before(index_of(prog, "pop 2")) == {0, 1}


@pytest.mark.parametrize(
    "callee",
    [
        # an iteration that grows the stack (it returns at its entry length): no bound
        "g:\n    dup 0\n    skiz\n    return\n    push 1\n    recurse",
        "g:\n    call g\n    return",  # a call cycle
        "g:\n    push 1\n    skiz\n    push 2\n    return",  # paths of different lengths
        "g:\n    push 1",  # runs off the program
        "g:\n    call @other__f\n    return",  # an external call
    ],
)
def test_a_callee_without_a_proven_bound_keeps_everything_live(callee):
    prog = program(f"""
main:
    push 1
    push 2
    call g
    pop 2
    return
{callee}
""")
    live = of_program(prog)
    assert live.summary("g") is None
    assert live.dead_before(index_of(prog, "call g")) == frozenset()


def test_an_external_call_observes_the_whole_stack():
    prog = program("""
main:
    push 1
    push 2
    call @other__f
    pop 2
    return
""")
    assert of_program(prog).dead_before(index_of(prog, "call @other__f")) == frozenset()


def test_skiz_joins_both_paths():
    # st1 is read only when the skipped `dup 1; write_io 1` runs: live before the skiz
    prog = program("""
main:
    push 5
    push 6
    read_io 1
    skiz
    call show
    pop 2
    return
show:
    dup 1
    write_io 1
    return
""")
    live = of_program(prog)
    skiz = index_of(prog, "skiz")
    assert 1 + 1 not in live.dead_before(skiz)  # st1 after the pop of the condition
    assert live.dead_before(index_of(prog, "pop 2")) == {0, 1}


def test_skiz_keeps_a_slot_live_when_only_the_skipping_path_reads_it():
    # not skipped: `pop 1` drops the 6 unread; skipped: `write_io 1` writes it
    base = """
main:
    push 5
    push 6
    read_io 1
    skiz
    pop 1
    write_io 1
    return
"""
    prog = program(base)
    assert 1 not in of_program(prog).dead_before(index_of(prog, "skiz"))
    assert not _aligned(base, base.replace("push 6", "push 7"))


def test_loop_iterations_keep_everything_the_next_test_reads_live():
    prog = program("""
main:
    push 3
    call loop
    pop 1
    return
loop:
    dup 0
    push 0
    eq
    skiz
    return
    push -1
    add
    recurse
after:
    pop 2
    push 0
    push 0
    return
""")
    live = of_program(prog)
    assert live.summary("loop").delta == 0
    # the section after the loop pops two slots unread; `recurse` never falls into it
    assert live.dead_before(index_of(prog, "after:")) == {0, 1}
    assert live.dead_before(index_of(prog, "recurse")) == frozenset()  # the next test reads
    # the loop's return: its only caller pops the counter unread; main's return: the harness
    # halts, so everything is observable
    assert live.dead_before(index_of(prog, "return", 1)) == {0}
    assert live.dead_before(index_of(prog, "return", 0)) == frozenset()


def test_a_return_sees_what_every_call_site_leaves_dead():
    text = """
main:
    push 1
    call g
    pop 1
    push 2
    call g
    {after}
    return
g:
    push 5
    push 6
    add
    return
"""
    one = program(text.format(after="pop 1"))
    live = of_program(one)
    assert live.dead_before(index_of(one, "return", 1)) == {0}  # both sites pop the sum
    both = program(text.format(after="write_io 1"))
    live = of_program(both)
    assert live.dead_before(index_of(both, "return", 1)) == frozenset()  # one site prints it
    assert not _aligned(
        text.format(after="write_io 1"), text.format(after="write_io 1").replace("push 6", "push 7")
    )
    assert _aligned(
        text.format(after="pop 1"), text.format(after="pop 1").replace("push 6", "push 7")
    )


def test_reads_that_can_fail_or_have_effects_are_uses_even_when_the_result_is_dead():
    # `assert` and `write_io` observe their operands; `split` is pure: a dead result frees it
    for op, dead_source in (("assert", False), ("write_io 1", False), ("split\n    pop 2", True)):
        prog = program(f"""
main:
    push 7
    push 8
    dup 1
    {op}
    pop 2
    return
""")
        live = of_program(prog)
        before_dup = live.dead_before(index_of(prog, "dup 1"))
        assert (1 in before_dup) is dead_source, op


def test_dead_sets_are_sound_on_random_programs():
    """Random programs with calls (a random callee, its reach summarised) and skiz-guarded
    calls: change the values in the slots claimed dead before the body; the run's
    observables (final stack, output, failure) never change."""
    rng = random.Random(5)
    ops = [
        "dup 0",
        "dup 1",
        "dup 3",
        "swap 1",
        "swap 2",
        "pick 2",
        "place 2",
        "pop 1",
        "pop 2",
        "add",
        "mul",
        "split",
        "write_io 1",
        "assert",
        "push 1",
        "eq",
        "lt",
        "pow",
    ]
    checked = 0
    for _ in range(400):
        body = [
            rng.choice(ops + ["call g", "read_io 1\n    skiz\n    call g"])
            for _ in range(rng.randint(2, 10))
        ]
        pre = ["push 3", "push 9", "push 0", "push 1", "push 4", "push 2"]
        callee = "".join(f"    {rng.choice(ops)}\n" for _ in range(rng.randint(1, 4)))
        tail = f"    pop {rng.randint(1, 5)}\n    return\ng:\n{callee}    return"
        text = "main:\n" + "".join(f"    {i}\n" for i in pre + body) + tail
        prog = program(text)
        live = of_program(prog)
        items = items_of_program(prog)
        first = index_of(prog, "main:") + 1 + len(pre)
        dead = live.dead_before(first)
        if not dead:
            continue
        w = witness(0, 1, depth=24)
        base = run(prog, w.vm_input())
        # rebuild: the same program with the dead slots overwritten before the body
        poke = "".join(f"    push 77\n    swap {k + 1}\n    pop 1\n" for k in sorted(dead))
        text2 = "main:\n" + "".join(f"    {i}\n" for i in pre) + poke
        text2 += "".join(f"    {i}\n" for i in body) + tail
        other = run(program(text2), w.vm_input())
        assert (base.error is None) == (other.error is None), text
        if base.error is None:
            assert base.stack == other.stack and base.public_output == other.public_output, text
        checked += 1
        assert items  # the analysis ran on the parsed items
    assert checked > 30


# -- the verifier ----------------------------------------------------------------------------


def test_check_block_leaves_out_dead_slots_but_not_the_stack_length():
    base = ("push 1", "push 2", "push 3")
    assert not check_block(BlockCheck(base, ("push 1", "push 5", "push 3"))).equivalent
    assert check_block(BlockCheck(base, ("push 1", "push 5", "push 3"), dead_slots=(1,))).equivalent
    short = ("push 1", "push 3")
    assert not check_block(BlockCheck(base, short, dead_slots=(1, 2))).equivalent
    other = ("push 1", "push 2", "push 4")
    assert not check_block(BlockCheck(base, other, dead_slots=(1, 2))).equivalent


def test_check_block_still_compares_outputs_and_failures_with_dead_slots():
    base = ("dup 0", "write_io 1", "push 2")
    assert not check_block(
        BlockCheck(base, ("push 9", "write_io 1", "push 2"), dead_slots=(1,))
    ).equivalent
    guarded = ("dup 0", "assert", "push 2")
    assert not check_block(BlockCheck(guarded, ("push 2",), dead_slots=(0, 1))).equivalent


def _aligned(base_text: str, cand_text: str) -> bool:
    return check_aligned(program(base_text), program(cand_text)).equivalent


def test_check_aligned_accepts_junk_in_slots_dead_on_every_path():
    cand = MAIN_POPS.replace(
        "    push 1\n    push 2\n    dup 1\n", "    push 0\n    push 0\n    push 1\n"
    )
    assert _aligned(MAIN_POPS, cand)
    v = check_function(program(MAIN_POPS), program(cand))
    assert v.equivalent  # and the runs agree


def test_check_aligned_rejects_a_change_to_a_slot_a_callee_reads_below_its_arguments():
    base = MAIN_POPS.replace("g:\n    dup 0", "g:\n    dup 2")
    cand = base.replace(
        "    push 1\n    push 2\n    dup 1\n", "    push 0\n    push 2\n    dup 1\n"
    )
    assert not _aligned(base, cand)
    assert not check_function(program(base), program(cand)).equivalent  # it really differs


def test_check_aligned_rejects_a_change_to_a_slot_read_on_one_branch():
    base = """
main:
    push 5
    push 6
    read_io 1
    skiz
    call show
    pop 2
    return
show:
    dup 1
    write_io 1
    return
"""
    cand = base.replace("    push 5\n", "    push 4\n")
    assert not _aligned(base, cand)


def test_check_aligned_rejects_a_change_to_a_slot_the_next_iteration_reads():
    base = """
main:
    push 3
    push 10
    call loop
    pop 2
    return
loop:
    dup 1
    push 0
    eq
    skiz
    return
    dup 0
    write_io 1
    swap 1
    push -1
    add
    swap 1
    recurse
"""
    cand = base.replace("    push 10\n", "    push 11\n")
    assert not _aligned(base, cand)


def test_check_aligned_rejects_a_change_before_an_external_call():
    base = "main:\n    push 1\n    push 2\n    call @other__f\n    pop 2\n    return\n"
    cand = base.replace("push 1", "push 0")
    assert not _aligned(base, cand)


# -- the search uses them --------------------------------------------------------------------


def test_the_search_drops_work_that_only_fills_dead_slots_and_the_verifier_agrees():
    block = parse_instructions("dup 3\ndup 3\nadd\ndup 2\nmul\nswap 5\npop 1\npush 4")
    base = tuple(str(i) for i in block)
    assert optimize_block(block, SearchConfig(seed=1)) == []  # nothing shorter without them
    found = optimize_block(block, SearchConfig(seed=1, dead_slots=frozenset({5})))
    assert found and len(found[0]) < len(block)
    for cand in found:
        text = tuple(str(i) for i in cand)
        assert check_block(BlockCheck(base, text, dead_slots=(5,))).equivalent
        assert not check_block(BlockCheck(base, text)).equivalent  # it relies on the dead slot


def test_stack_liveness_accepts_item_lists():
    prog = program(MAIN_POPS)
    assert StackLiveness(items_of_program(prog)).dead_before(len(prog.items)) == frozenset()


def _random_program(rng: random.Random) -> str:
    ops = [
        "dup 0",
        "dup 1",
        "dup 2",
        "swap 1",
        "swap 2",
        "pop 1",
        "add",
        "mul",
        "split",
        "write_io 1",
        "push 1",
        "push 0",
        "eq",
        "pick 2",
        "place 2",
    ]

    def body(n: int) -> str:
        return "".join(f"    {rng.choice(ops)}\n" for _ in range(n))

    main = body(rng.randint(0, 4)) + "    call g\n" + body(rng.randint(0, 3))
    main += "    push 3\n    call loop\n" + body(rng.randint(0, 3))
    main += "    read_io 1\n    skiz\n    call g\n" + body(rng.randint(0, 3))
    loop_body = "".join(
        rng.choice(
            [
                "    dup 1\n    write_io 1\n",
                "    swap 1\n    swap 1\n",
                "    push 4\n    pop 1\n",
                "    dup 2\n    pop 1\n",
            ]
        )
        for _ in range(rng.randint(0, 2))
    )
    return (
        "main:\n"
        + "".join(f"    push {rng.randint(0, 9)}\n" for _ in range(6))
        + main
        + f"    pop {rng.randint(1, 3)}\n    return\n"
        + "g:\n"
        + body(rng.randint(1, 4))
        + "    return\n"
        + "loop:\n    dup 0\n    push 0\n    eq\n    skiz\n    return\n"
        + loop_body
        + "    push -1\n    add\n    recurse\n"
    )


def test_poking_dead_slots_anywhere_never_changes_a_run():
    """Random programs with a callee called from two sites (one skippable), a counted loop
    and a read branch: before a random instruction, overwrite every slot claimed dead there;
    on several inputs the run's observables (final stack, output, input consumed, failure)
    stay the same. Covers returns that see their call sites, loop iterations and skiz."""
    from tasmopt.vm.equivalence import observe

    rng = random.Random(11)
    poked = 0
    for _ in range(800):
        text = _random_program(rng)
        prog = program(text)
        live = of_program(prog)
        lines = ["    call main", "    halt", *text.strip("\n").split("\n")]
        assert len(lines) == len(prog.items)
        k = rng.randrange(2, len(lines))
        if str(prog.items[k - 1]).strip() == "skiz":
            continue
        slots = sorted(j for j in live.dead_before(k) if j <= 14)
        if not slots:
            continue
        poke = [f"    push {77 + j}\n    swap {j + 1}\n    pop 1" for j in slots]
        other = parse("\n".join(lines[:k] + poke + lines[k:]))
        for i in range(4):
            w = witness(i, 3, depth=24, inputs=4)
            a, b = run(prog, w.vm_input()), run(other, w.vm_input())
            assert observe(a) == observe(b), (text, k, slots)
        poked += 1
    assert poked > 100


def test_recurse_or_return_reads_st5_and_st6():
    prog = program("""
main:
    push 1
    push 1
    push 0
    push 0
    push 0
    push 0
    push 0
    call loop
    pop 5
    pop 2
    return
loop:
    recurse_or_return
""")
    live = of_program(prog)
    rr = live.dead_before(index_of(prog, "recurse_or_return"))
    assert rr.isdisjoint({5, 6})  # everything after the loop is popped, but the test reads
    assert live.summary("loop").reach == 7


# -- adversarial: every way a value may still be observed keeps it live ----------------------


def _rejects_change(base: str, old: str, new: str) -> None:
    assert old in base
    assert not _aligned(base, base.replace(old, new, 1))


def test_a_slot_the_sponge_absorbs_later_is_live():
    base = "main:\n    sponge_init\n" + "".join(f"    push {k}\n" for k in range(1, 11))
    base += "    call id\n    sponge_absorb\n    return\nid:\n    return\n"
    prog = program(base)
    assert of_program(prog).dead_before(index_of(prog, "call id")) == frozenset()
    _rejects_change(base, "    push 7\n", "    push 70\n")


def test_a_slot_only_a_rare_guard_reads_is_live():
    # the assert runs only when the input is 12345: random inputs never take that path
    base = """
main:
    push 9
    read_io 1
    push 12345
    eq
    skiz
    call check
    pop 1
    return
check:
    dup 0
    push 9
    eq
    assert
    return
"""
    prog = program(base)
    assert 1 not in of_program(prog).dead_before(index_of(prog, "skiz"))
    _rejects_change(base, "    push 9\n    read_io", "    push 8\n    read_io")


def test_a_slot_used_as_a_ram_address_is_live():
    base = """
main:
    push 5
    push 100
    call id
    write_mem 1
    pop 1
    return
id:
    return
"""
    prog = program(base)
    assert of_program(prog).dead_before(index_of(prog, "call id")) == frozenset()
    _rejects_change(base, "push 100", "push 101")  # another (aliased or not) cell


def test_a_high_degree_difference_in_a_live_slot_is_rejected_and_in_a_dead_one_accepted():
    block = "    push 1\n    push 2\n    dup 1\n"  # st0 = 1 (g reads it), st1, st2 dead
    power = "    dup 0\n    mul\n" * 6  # squares six times: 2^64
    live = "    push 1\n    push 2\n    push 2\n" + power  # st0 = 2^64
    dead = "    push 2\n" + power + "    push 7\n    push 1\n"  # st2 = 2^64, st1 = 7
    assert not _aligned(MAIN_POPS, MAIN_POPS.replace(block, live))
    assert _aligned(MAIN_POPS, MAIN_POPS.replace(block, dead))


def test_a_label_entered_by_fall_through_and_by_call_counts_both_ways():
    # `shared` is reached by falling through from main and called from main: its read of
    # st1 keeps the slot live at the end of the run before it
    base = """
main:
    push 4
    push 6
    call shared
shared:
    dup 1
    write_io 1
    return
"""
    prog = program(base)
    assert 1 not in of_program(prog).dead_before(index_of(prog, "shared:"))
    _rejects_change(base, "push 4", "push 3")


def test_a_slot_dead_in_our_text_but_read_in_the_clients_is_not_dead():
    from tasmopt.module import ModuleText
    from tasmopt.optimizer.prepare import _StackView

    ours_text = (
        "__f:\n    push 1\n    push 2\n    call __g\n    pop 2\n    return\n__g:\n    return\n"
    )
    client_text = ours_text.replace("    pop 2\n", "    write_io 1\n    write_io 1\n")
    labels = {"f": "__f", "g": "__g"}
    ours, client = (
        ModuleText.from_text(ours_text, labels),
        ModuleText.from_text(client_text, labels),
    )
    call = ours.lines.index("    call __g")
    alone = _StackView(ours, ours.harness("f", "release"), None, None, "f")
    assert alone.dead(call) == (0, 1)
    both = _StackView(
        ours, ours.harness("f", "release"), client, client.harness("f", "release"), "f"
    )
    assert both.dead(call) == ()


# -- the worklist reaches the same fixpoint as whole sweeps ----------------------------------


def _before_by_sets(live: StackLiveness, k: int, dead: list[frozenset[int]]) -> frozenset[int]:
    """The transfer function written out on sets of slots, slot by slot (the analysis keeps
    bit masks; this is the definition they must agree with)."""
    from tasmopt.tasm.program import EXTERNAL_PREFIX
    from tasmopt.vm.stack_liveness import MAX_DEPTH

    def cap(slots) -> frozenset[int]:
        return frozenset(j for j in slots if 0 <= j < MAX_DEPTH)

    def exit_(returns: bool) -> frozenset[int]:
        frames = live._frame_of.get(k)
        if not frames:
            return frozenset()
        out = None
        for label in frames:
            if returns:
                for c in live._sites[label]:
                    out = dead[c + 1] if out is None else out & dead[c + 1]
            else:
                start = dead[live.labels[label]]
                out = start if out is None else out & start
        return out or frozenset()

    name, arg = live.items[k]
    after = dead[k + 1]
    if name == "label":
        return after
    if name not in live.table or live.table[name].halts:
        return frozenset()
    spec = live.table[name]
    if spec.ends_section:
        left = None
        if spec.may_return:
            left = exit_(True)
        if spec.may_recurse:
            again = exit_(False)
            left = again if left is None else left & again
        return (left or frozenset()) - set(live._flow(name, None).reads)
    if name == "call":
        if not isinstance(arg, str) or arg.startswith(EXTERNAL_PREFIX):
            return frozenset()
        callee = live.summary(arg)
        if callee is None:
            return frozenset()
        return cap(j - callee.delta for j in after if j - callee.delta >= callee.reach)
    flow = live._flow(name, arg)
    if spec.may_skip_next:
        nxt = live.items[k + 1][0] if k + 1 < len(live.items) else "label"
        after = after & dead[k + 2] if nxt != "label" else frozenset()
    observing = not spec.is_stack_shuffle and (
        spec.has_side_effect or spec.can_fail or spec.is_control_flow
    )
    fresh_live = any(s < 0 and i not in after for i, s in enumerate(flow.src))
    reads_used = observing or fresh_live
    live_moved = {s for i, s in enumerate(flow.src) if s >= 0 and i not in after}
    out: set[int] = set()
    for j in range(flow.consumed):
        if not (j in live_moved or (reads_used and j in flow.reads)):
            out.add(j)
    for i in after:
        j = i - flow.delta
        if j >= flow.consumed and j not in live_moved and not (reads_used and j in flow.reads):
            out.add(j)
    return cap(out)


def _swept(live: StackLiveness) -> list[frozenset[int]]:
    """The analysis by the definition: backward sweeps of the set-based transfer function
    over every item until none changes."""
    from tasmopt.vm.stack_liveness import MAX_DEPTH

    n = len(live.items)
    dead = [frozenset(range(MAX_DEPTH))] * n + [frozenset()]
    changed = True
    while changed:
        changed = False
        for k in range(n - 1, -1, -1):
            new = _before_by_sets(live, k, dead)
            if new != dead[k]:
                dead[k], changed = new, True
    return dead


@pytest.mark.parametrize(
    "module",
    [
        "std_crypto_keccak256",
        "std_fhe_lwe",
        "coin",
        "std_trinity_inference",
        "std_crypto_poseidon",
        "std_crypto_ed25519",
        "std_fhe_pbs",
    ],
)
def test_worklist_equals_sweeps_on_real_programs(trident_std, module: str) -> None:
    """Loops, calls into shared helpers, ``recurse_or_return`` and ``skiz`` on the upstream
    compiler's TASM: the worklist over bit masks reaches the dead sets of whole sweeps of the
    set-based definition at every item."""
    import re

    from tasmopt.vm.equivalence import harness

    text = trident_std[module]["compiler_tasm"]
    labels = re.findall(r"^\s*([A-Za-z_][\w.]*):\s*$", text, re.M)
    checked = 0
    for label in labels[:8]:
        live = StackLiveness(items_of_program(harness(text, label)))
        want = _swept(live)
        assert [live.dead_before(k) for k in range(len(want))] == want, label
        checked += 1
    assert checked >= 3


@pytest.mark.parametrize(
    "module,label", [("std_crypto_keccak256", "__keccak_round"), ("coin", "__pay")]
)
def test_on_demand_solves_a_functions_own_items_and_agrees_in_any_order(
    trident_std, module: str, label: str
) -> None:
    """A point in the function's own body is solved without its callees' bodies (a call
    reads the callee's summary), and every point, asked in a random order so that the solved
    region grows piece by piece, has the dead set of whole sweeps of the definition."""
    from tasmopt.vm.equivalence import harness

    prog = harness(trident_std[module]["compiler_tasm"], label)
    items = items_of_program(prog)
    want = _swept(StackLiveness(items))
    live = StackLiveness(items)
    start = items.index(("label", label))
    first_return = next(k for k, it in enumerate(items) if k > start and it[0] == "return")
    assert live.dead_before(first_return - 1) == want[first_return - 1]
    assert len(live._solved) < len(items) / 2  # the callees' bodies were not solved
    order = list(range(len(items) + 1))
    random.Random(7).shuffle(order)
    assert {k: live.dead_before(k) for k in order} == dict(enumerate(want))
