"""The verifier: positives it must prove, and negatives it must reject (design §2)."""

from __future__ import annotations

import pytest

from tasmopt.vm.equivalence import (
    BlockCheck,
    Verdict,
    check_block,
    check_function,
    harness,
    no_taller,
    no_taller_at_runtime,
)


def check(baseline: str, candidate: str, **kw) -> Verdict:
    return check_block(BlockCheck(tuple(baseline.split(";")), tuple(candidate.split(";")), **kw))


# -- blocks: proven ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "baseline,candidate",
    [
        # spec/tir.md §2.1 example A and its hand version
        ("dup 1;dup 1;add;dup 0;dup 3;mul;swap 3;pop 3", "dup 1;add;mul"),
        ("swap 1;add", "add"),  # commutativity
        ("push 3;add", "addi 3"),
        ("push 5;split;pop 1", "push 0"),  # constant folding of u32 split
        ("push 2;push 3;mul", "push 6"),
        ("dup 0;pop 1", "nop"),
        ("swap 2;swap 2;dup 0", "dup 0"),
        ("pop 1;pop 2", "pop 3"),
        ("dup 2;dup 2;mul;dup 1;mul", "dup 2;dup 2;mul;dup 1;mul"),
        ("dup 1;dup 1;add;dup 2;dup 2;add;mul", "dup 1;dup 1;add;dup 0;mul"),  # (a+b)^2
        ("push 2;mul", "dup 0;add"),
        ("dup 0;push -1;mul;add", "push 0;swap 1;pop 1"),  # x - x = 0
        ("read_io 2;add", "read_io 2;swap 1;add"),
        ("divine 1;dup 0;mul", "divine 1;dup 0;mul"),
        ("push 5;push 7;write_mem 1;pop 1", "push 5;push 7;write_mem 1;pop 1"),
        ("xx_add", "pick 5;pick 5;pick 5;xx_add"),
        ("hash", "hash"),
        ("sponge_init;sponge_absorb", "sponge_init;sponge_absorb"),
    ],
)
def test_block_positives_are_proven(baseline: str, candidate: str) -> None:
    v = check(baseline, candidate)
    assert v.equivalent, v.reason
    assert v.method in ("symbolic", "differential")
    assert v.cycles == len(candidate.split(";"))
    assert v.heights["processor"] == v.cycles + 1  # plus the harness's halt


def test_xx_mul_commutes_symbolically() -> None:
    # (A*B) vs (B*A): both 3-element XFEs on the stack, swapped with a pick-based shuffle
    v = check("xx_mul", "pick 5;pick 5;pick 5;xx_mul")
    assert v.equivalent and v.method == "symbolic"


def test_identity_of_inverses_is_accepted_by_testing_not_proof() -> None:
    # x * x^-1 = 1 for x != 0, and both fail on x = 0: true, but not visible to the normal
    # form (inv(x) is an opaque algebraic atom), so the differential layer decides.
    v = check("dup 0;invert;mul", "dup 0;invert;mul;push 0;mul;push 1;add")
    assert v.equivalent and v.method == "differential"


# -- blocks: rejected --------------------------------------------------------------------


@pytest.mark.parametrize(
    "baseline,candidate,why",
    [
        ("dup 1;dup 1", "dup 1", "net stack"),  # drops a value
        ("dup 1;dup 1;add", "dup 1", "st0"),  # drops an operand
        ("push 1;push 2", "push 2;push 1", "st0"),  # reorders
        ("dup 0;dup 2", "dup 2;dup 0", "st"),  # reorders entry values
        ("push 3;add", "addi 4", "st0"),  # corrupts
        ("dup 0;mul", "dup 0;add", "st0"),  # wrong op, same shape
        ("assert", "pop 1", "failure conditions"),  # skips an assert
        ("dup 0;assert", "dup 0;pop 1", "failure conditions"),
        ("assert_vector;pop 5", "pop 5;pop 5", "failure conditions"),  # skips a vector assert
        ("lt", "pop 1", "failure conditions"),  # drops a u32 check
        ("invert", "nop", "failure conditions"),
        ("push 5;push 7;write_mem 1;pop 1", "push 5;push 8;write_mem 1;pop 1", "RAM"),
        ("push 5;push 7;write_mem 1;pop 1", "nop", "RAM"),  # drops a RAM write
        ("read_io 1", "divine 1", "input"),  # reads the wrong stream
        ("read_io 2;pop 1", "read_io 1", "input"),  # reads less input
        ("write_io 1", "pop 1", "output"),
        ("dup 0;write_io 1;write_io 1", "dup 0;pop 1;write_io 1;push 0;write_io 1", "output"),
        ("sponge_init", "nop", "sponge"),
        ("swap 1;pop 1", "pop 1", "st0"),
        ("pop 1", "pop 2;push 0", "pops"),  # digs deeper than the baseline
        ("eq", "push 0;swap 2;pop 2", "st0"),  # eq is not "usually 0"
        ("lt", "push 1;swap 2;pop 2", "failure"),  # nor lt "usually 1"
        ("dup 0;dup 0;recurse", "dup 0;dup 0", "control flow"),
    ],
)
def test_block_negatives_are_rejected(baseline: str, candidate: str, why: str) -> None:
    v = check(baseline, candidate)
    assert not v.equivalent
    assert v.method == "rejected"
    assert why.split()[0].lower() in (v.reason or "").lower(), v.reason


def test_unparsable_candidate_is_rejected_with_position() -> None:
    v = check("add", "ad")
    assert not v.equivalent and "1:1" in (v.reason or "")


def test_aliasing_ram_is_not_accepted_by_testing() -> None:
    # write to [st1], then read [st0]: reading before the write is different exactly when
    # the addresses alias, which random witnesses almost never hit
    base = "dup 1;dup 1;write_mem 1;pop 1;dup 0;read_mem 1;pop 1"
    cand = "dup 0;read_mem 1;pop 1;dup 2;dup 2;write_mem 1;pop 1"
    assert not check(base, cand).equivalent


def test_symbolic_and_differential_agree_on_a_polynomial_identity() -> None:
    # (a + b)(a - b) = a^2 - b^2
    base = "dup 1;dup 1;add;dup 2;dup 2;push -1;mul;add;mul"
    cand = "dup 1;dup 2;mul;dup 1;dup 2;mul;push -1;mul;add"
    v = check(base, cand)
    assert v.equivalent and v.method == "symbolic"


# -- whole functions -----------------------------------------------------------------------

FN_LOOP = """
__f:
    dup 0
    call __loop
    pop 1
    return
__loop:
    dup 0
    push 0
    eq
    skiz
    return
    push -1
    add
    dup 1
    write_io 1
    recurse
"""

FN_LOOP_FEWER = FN_LOOP.replace("    dup 1\n    write_io 1\n", "    dup 1\n    pop 1\n")
FN_FOREVER = FN_LOOP.replace("    push -1\n    add\n", "")


def test_function_with_loop_equivalent_to_itself_and_measured() -> None:
    p = harness(FN_LOOP, "__f")
    v = check_function(p, p)
    assert v.equivalent, v.reason
    assert v.cycles == v.baseline_cycles > 0
    assert v.conclusive >= 16


def test_function_with_loop_changed_output_is_rejected() -> None:
    v = check_function(harness(FN_LOOP, "__f"), harness(FN_LOOP_FEWER, "__f"))
    assert not v.equivalent and "output" in (v.reason or "")


def test_candidate_that_loops_forever_is_rejected() -> None:
    v = check_function(harness(FN_LOOP, "__f"), harness(FN_FOREVER, "__f"))
    assert not v.equivalent
    assert "fails" in (v.reason or "")  # step limit = a failure where the baseline halts


FN_BRANCH = """
__g:
    dup 0
    skiz
    call __then
    return
__then:
    push 7
    write_io 1
    return
"""


def test_branch_taken_on_some_witnesses_only_is_still_checked() -> None:
    bad = FN_BRANCH.replace("push 7", "push 8")
    v = check_function(harness(FN_BRANCH, "__g"), harness(bad, "__g"))
    assert not v.equivalent


def test_external_calls_must_see_the_same_stack() -> None:
    base = "__h:\n    dup 0\n    call @other__fn\n    pop 1\n    return\n"
    cand = "__h:\n    call @other__fn\n    return\n"
    v = check_function(harness(base, "__h"), harness(cand, "__h"))
    assert not v.equivalent and "external" in (v.reason or "")


def test_no_taller_ignores_cascade_but_not_padded_height() -> None:
    base = {"processor": 10, "op_stack": 5, "cascade": 100, "lookup": 256}
    assert no_taller({"processor": 9, "op_stack": 5, "cascade": 110, "lookup": 256}, base)
    assert not no_taller({"processor": 9, "op_stack": 6, "cascade": 100, "lookup": 256}, base)
    assert not no_taller({"processor": 9, "op_stack": 5, "cascade": 300, "lookup": 256}, base)


def test_a_longer_program_may_pass_at_runtime_but_never_a_taller_execution_table() -> None:
    """Issue 11 item 7: a function-level rewrite may lengthen the program (program table,
    the attestation rows of the hash table) while the padded height holds; never may it
    raise a table that grows with execution, nor the padded height."""
    base = {"processor": 900, "op_stack": 300, "program": 40, "hash": 60, "ram": 8}
    longer = {"processor": 500, "op_stack": 200, "program": 52, "hash": 72, "ram": 8}
    assert not no_taller(longer, base)  # design §2's strict rule
    assert no_taller_at_runtime(longer, base)
    for table in ("processor", "op_stack", "ram", "jump_stack", "u32", "lookup"):
        taller = {**longer, table: base.get(table, 0) + 1}
        assert not no_taller_at_runtime(taller, base), table
    # a program so long that its table sets a larger padded height
    assert not no_taller_at_runtime({**longer, "program": 1025}, base)


def test_evaluating_a_deeply_nested_expression_does_not_recurse():
    """A long chain of opaque operations (here 6,000 ``invert``, each an atom over the
    previous one; loops unrolled by the concolic runs nest like this) is evaluated without
    exhausting Python's recursion limit, and to the right value."""
    from tasmopt.isa import P
    from tasmopt.tasm.parser import parse_instructions
    from tasmopt.vm.evaluate import Assignment, Evaluator
    from tasmopt.vm.expr import ExprContext
    from tasmopt.vm.symbolic import run_symbolic

    ctx = ExprContext()
    n = 6_001
    sym = run_symbolic(parse_instructions("invert\n" * n), ctx)
    assert not sym.unsupported
    ev = Evaluator(ctx, Assignment(stack={0: 7}))
    assert ev.value(sym.stack[-1]) == pow(7, P - 2, P)  # an odd number of inversions


def test_a_check_that_exhausts_the_recursion_limit_fails_closed(monkeypatch):
    """A resource limit is not a verdict: check_function and check_aligned return 'not
    equivalent' with the reason instead of raising into the request."""
    import tasmopt.vm.equivalence as E

    prog = E.harness("f:\n    push 1\n    pop 1\n    return", "f")

    def deep(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(E, "_baseline_runs", deep)
    v = E.check_function(prog, prog)
    assert not v.equivalent and v.reason == E.RECURSION_LIMIT
    monkeypatch.setattr(E, "_segments_at", deep)
    a = E.check_aligned(prog, prog)
    assert not a.equivalent and a.reason == E.RECURSION_LIMIT


# -- stalls: random runs that reach the step limit ---------------------------------------


def test_stall_cap_is_a_multiple_of_the_longest_halting_run_within_bounds() -> None:
    from tasmopt.vm.equivalence import STALL_FACTOR, STALL_FLOOR, stall_cap

    assert stall_cap(10, 50_000) == STALL_FLOOR
    assert stall_cap(1_000, 50_000) == STALL_FACTOR * 1_000
    assert stall_cap(10_000, 50_000) == 50_000  # never above the caller's limit
    assert stall_cap(10, 1_000) == 1_000


def _recorded_runs(monkeypatch) -> list[tuple[int, str, int, bool]]:
    """(step limit, outcome, cycles, directed) of every run of a function check, in order."""
    import tasmopt.vm.equivalence as eq

    seen: list[tuple[int, str, int, bool]] = []
    real = eq._run

    def run(program, w, step_limit, start=0):
        r = real(program, w, step_limit, start)
        if r.error is None:
            outcome = "halt"
        elif r.error.kind == "StepLimitExceeded":
            outcome = "stall"
        else:
            outcome = "fail"
        seen.append((step_limit, outcome, r.cycles, w.directed))
        return r

    monkeypatch.setattr(eq, "_run", run)
    return seen


def test_after_a_stall_random_runs_stop_at_the_cap_and_the_proof_still_needs_halting_runs(
    monkeypatch,
) -> None:
    """FN_LOOP counts down from its argument: small values halt in a few cycles, random field
    elements run to the step limit. Once one has stalled (and one has halted), later random
    runs stop at `stall_cap` of the longest halting run so far; the witnesses that count are
    still 16 complete runs, and a candidate that differs on them is still rejected."""
    from tasmopt.vm.equivalence import stall_cap

    p = harness(FN_LOOP, "__f")
    seen = _recorded_runs(monkeypatch)
    v = check_function(p, None, seed=11, step_limit=50_000)
    assert v.halted >= 16
    random_runs = [r for r in seen if not r[3]]
    stalls = [i for i, r in enumerate(random_runs) if r[1] == "stall"]
    assert stalls, "the test needs a witness that stalls"
    assert random_runs[stalls[0]][0] == 50_000  # the first stall pays the full limit
    capped = 0
    for i, (limit, _out, _cyc, _d) in enumerate(random_runs):
        before = random_runs[:i]
        halts = [c for _lim, out, c, _ in before if out == "halt"]
        if any(out == "stall" for _lim, out, _c, _ in before) and halts:
            assert limit == stall_cap(max(halts), 50_000)
            capped += 1
        else:
            assert limit == 50_000
    assert capped > 0
    bad = check_function(p, harness(FN_LOOP_FEWER, "__f"), seed=11, step_limit=50_000)
    assert not bad.equivalent and "output" in (bad.reason or "")


def test_after_a_stall_the_directed_phase_stops_its_runs_at_the_cap_too(monkeypatch) -> None:
    """Six random tries (one stalls) leave the rest to the directed phase: its runs stop at
    the same cap as the random ones after a stall (a run past it is inconclusive, and
    solving guards cannot shorten a loop whose count came from a random value), and the
    check still needs 16 runs that halt."""
    from tasmopt.vm.equivalence import stall_cap

    p = harness(FN_LOOP, "__f")
    seen = _recorded_runs(monkeypatch)
    v = check_function(p, None, seed=11, step_limit=50_000, max_tries=6)
    assert v.equivalent and v.halted >= 16
    first_stall = next(i for i, r in enumerate(seen) if r[1] == "stall")
    assert first_stall < 6 and len(seen) > 6
    for i in range(first_stall + 1, len(seen)):
        halts = [c for _lim, out, c, _ in seen[:i] if out == "halt"]
        assert seen[i][0] == stall_cap(max(halts), 50_000) < 50_000


FN_NEVER_HALTS_ON_RANDOM = """
__n:
    dup 0
    push 12345
    eq
    skiz
    return
    call __spin
    return
__spin:
    push 1
    write_io 1
    recurse
"""


def test_random_phase_gives_up_after_as_many_stalls_as_witnesses_and_fails_closed(
    monkeypatch,
) -> None:
    """A function that halts only on one input value: every random run stalls. The random
    phase stops after ``witnesses`` stalls (not ``6 * witnesses`` full-limit runs), and with
    no halting run the check is not a proof. Here the directed phase may not run at all."""
    p = harness(FN_NEVER_HALTS_ON_RANDOM, "__n")
    seen = _recorded_runs(monkeypatch)
    v = check_function(p, p, seed=3, step_limit=20_000, budget_s=0.0)
    assert not v.equivalent and "witnesses ran the baseline" in (v.reason or "")
    random_stalls = [r for r in seen if r[1] == "stall" and not r[3]]
    assert len(random_stalls) == 16  # not 6 * 16 runs to the step limit


def test_a_path_past_the_step_limit_is_shortened_by_solving_an_early_branch(monkeypatch) -> None:
    """The directed phase on the same function: a concolic run that reaches the step limit
    takes one of its earliest branches the other way (`tasmopt.vm.concolic._take_other_way`, ``shorten``), here
    ``st0 == 12345``, so witnesses run it to its return and the check is a proof; each of
    them is directed, has that value, and the rest of the stack still differs between them."""
    import tasmopt.vm.equivalence as eq

    p = harness(FN_NEVER_HALTS_ON_RANDOM, "__n")
    halting = []
    real = eq._run

    def run(program, w, step_limit, start=0):
        r = real(program, w, step_limit, start)
        if r.error is None:
            halting.append(w)
        return r

    monkeypatch.setattr(eq, "_run", run)
    v = check_function(p, p, seed=3, step_limit=20_000, budget_s=2.0)
    assert v.equivalent and v.halted >= 16, v.reason
    assert all(w.directed for w in halting)  # random values never get through
    # st0 is the argument (the harness's call does not move the stack): 12345 on every
    # halting run, and the elements below it differ from witness to witness
    assert {w.stack[-1] for w in halting} == {12345}
    distinct = {tuple(w.stack[-6:-1]) for w in halting}  # baseline and candidate ran each
    assert len(distinct) == v.halted


FN_HALTS_ON_ANOTHER_VALUE = FN_NEVER_HALTS_ON_RANDOM.replace("push 12345", "push 12346")
FN_HALTS_WITH_OUTPUT = (
    FN_NEVER_HALTS_ON_RANDOM.replace("    skiz\n    return\n", "    skiz\n    call __out\n")
    + "__out:\n    push 9\n    write_io 1\n    halt\n"
)


@pytest.mark.parametrize(
    "candidate", [FN_HALTS_ON_ANOTHER_VALUE, FN_HALTS_WITH_OUTPUT], ids=["12346", "output"]
)
def test_shortened_witnesses_still_reject_a_candidate_unlike_the_baseline_on_its_exit(
    candidate: str,
) -> None:
    """Adversarial for shortening: the witnesses solved for the baseline's exit (st0 = 12345)
    run a candidate that exits on 12346 into its endless loop, and one that writes an output
    on the way out to a different output: both rejected, never accepted on agreement."""
    base, cand = harness(FN_NEVER_HALTS_ON_RANDOM, "__n"), harness(candidate, "__n")
    v = check_function(base, cand, seed=3, step_limit=20_000, budget_s=2.0)
    assert not v.equivalent
    assert v.witness >= 0 and "directed" in (v.reason or ""), v.reason


FN_LOOP_WRONG_LATE = (
    FN_LOOP.replace(
        "    push -1\n    add\n",
        "    dup 0\n    push 300\n    eq\n    skiz\n    call __late\n    push -1\n    add\n",
    )
    + "__late:\n    push 0\n    assert\n    return\n"
)


def test_a_candidate_wrong_only_past_the_cap_is_not_accepted_as_a_whole() -> None:
    """Adversarial for `stall_cap`: a candidate that fails only once the counter reaches 300
    (a run of ~3,600 cycles, within the old 50,000 limit, near the 4,000-cycle cap). Capped
    witnesses may never get that far, so agreement on them is not a proof: the optimizer's
    acceptance needs the alignment proof too, and that refuses the extra guard."""
    from tasmopt.vm.equivalence import check_aligned

    base, cand = harness(FN_LOOP, "__f"), harness(FN_LOOP_WRONG_LATE, "__f")
    fv = check_function(base, cand, seed=5)
    av = check_aligned(base, cand, seed=5)
    assert not (fv.equivalent and av.equivalent), (fv.reason, av.reason)
    assert not av.equivalent


def test_preload_imports_what_the_checks_import_late() -> None:
    """A fresh process has not imported the lane simulator, NumPy, the concolic layer or z3
    after importing the verifier; `preload` (called at service start) imports them all."""
    import subprocess
    import sys

    code = (
        "import sys; import tasmopt.vm.equivalence as e; "
        "late = ('numpy', 'z3', 'tasmopt.vm.lanes', 'tasmopt.vm.concolic'); "
        "print(sum(m in sys.modules for m in late)); e.preload(); "
        "print(sum(m in sys.modules for m in late))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after = out.stdout.split()
    assert int(after) == 4 and int(before) < 4


def test_the_guard_directed_budget_counts_work_not_the_pause_between_callers() -> None:
    """The baseline runs of a function check are shared (and resumed) by every check of the
    same baseline; the guard-directed phase's budget is the time spent producing witnesses,
    so a caller resuming it after a pause longer than the budget still gets its witnesses.
    (With a deadline fixed when the first caller entered the phase, the second got none and
    its check failed: a rewrite proven in one compile was rejected in the next, depending on
    how long the machine took in between.)"""
    import time

    import tasmopt.vm.equivalence as E

    fn = "__f:\n    dup 0\n    push 12345\n    eq\n    assert\n    return\n"
    runs = E._BaselineRuns(harness(fn, "__f"), 48, 16, 0, 50_000, 32, 1.0)
    first = runs.runs()
    while True:  # the first caller stops at the first directed witness that halts
        _, w, rb = next(first)
        if w.directed and rb.error is None:
            break
    time.sleep(1.2)  # longer than the whole budget
    halting = [w for _, w, rb in runs.runs() if rb.error is None]
    assert len(halting) >= 16 and all(w.directed for w in halting)


# -- the baseline measured against itself, and witness sizes --------------------------------


@pytest.mark.parametrize(
    "block",
    [
        "push 5;split;pop 1",  # u32 table rows
        "dup 2;dup 2;mul;dup 1;mul",
        "read_io 2;add;write_io 1",
        "push 5;push 7;write_mem 1;pop 1",
        "sponge_init;sponge_absorb",
        "divine 1;dup 0;mul",
        "pop 5;pop 5;pop 5;dup 5",  # reaches st20: a witness deeper than 16
        "push 0;split;pop 1;dup 2;lt;assert",  # a guard the random witnesses mostly fail
    ],
)
def test_a_baseline_checked_against_itself_runs_it_once_with_the_same_verdict(block) -> None:
    """The self-check shortcut (each program run once) gives the verdict of the full check:
    the same candidate spelled with extra spaces parses to the same program but is not the
    same text, so it takes the path that runs both programs."""
    base = tuple(block.split(";"))
    spaced = tuple(f" {line} " for line in base)
    fast = check_block(BlockCheck(base, base))
    full = check_block(BlockCheck(base, spaced))
    assert (fast.equivalent, fast.method, fast.reason, fast.cycles, fast.heights) == (
        full.equivalent,
        full.method,
        full.reason,
        full.cycles,
        full.heights,
    )


def test_a_baseline_that_never_gets_past_its_guard_is_not_measured_against_itself() -> None:
    v = check("push 0;assert", "push 0;assert")  # fails on every witness
    assert not v.equivalent and "witnesses pass" in (v.reason or "")


@pytest.mark.parametrize(
    "baseline,candidate",
    [
        ("pop 5;pop 5;pop 5;dup 5", "pop 5;pop 5;pop 5;dup 6"),  # st20 against st21
        ("pop 5;pop 5;pop 5;pop 2;swap 1", "pop 5;pop 5;pop 5;pop 2;swap 2"),
        ("read_io 3;add;add", "read_io 3;add;pop 1"),
        ("divine 5;pop 4", "divine 5;pop 3;pop 1"),  # the same after all: must be accepted
        # a rare guard: passes only when st0 = 77 (solved, not drawn); the candidate leaves
        # the same stack on every passing run but never fails
        ("dup 0;push 77;eq;assert", "pop 1;push 77"),
        # aliasing writes under deep stacks: read before write differs only when the two
        # addresses from the stack are equal
        (
            "pop 5;pop 5;pop 5;dup 1;dup 1;write_mem 1;pop 1;dup 0;read_mem 1;pop 1",
            "pop 5;pop 5;pop 5;dup 0;read_mem 1;pop 1;dup 2;dup 2;write_mem 1;pop 1",
        ),
        # an address of high degree (x^4) that meets a constant one only at a root
        (
            "dup 0;dup 0;mul;dup 0;mul;push 9;swap 1;write_mem 1;pop 1;push 5;read_mem 1;pop 1",
            "push 5;read_mem 1;pop 1;dup 1;dup 0;mul;dup 0;mul;push 9;swap 1;write_mem 1;pop 1",
        ),
    ],
)
def test_witness_sizes_rounded_up_still_tell_neighbouring_slots_apart(baseline, candidate):
    """Witness stacks and input streams are drawn at sizes rounded up to a multiple of 8
    (shared between blocks); the values a program reaches stay distinct and random, so a
    candidate one slot off is still rejected and an equal one still accepted."""
    v = check(baseline, candidate)
    assert v.equivalent == (candidate == "divine 5;pop 3;pop 1"), v


FN_SPINS_WHATEVER_THE_BRANCH = """
__s:
    call __spin
    return
__spin:
    dup 0
    skiz
    nop
    recurse
"""


def test_shortening_a_loop_it_cannot_end_is_bounded(monkeypatch) -> None:
    """Adversarial for the cost of shortening: a loop that spins whichever way its branch goes
    (the flip is solvable, the loop never ends). One `directed_witness` call runs it to the
    step limit once, then at most `SHORTEN_TRIES` shortened runs, each stopped at
    `SHORTENED_STEPS`, and gives up: no witness, so no check can count it."""
    import random

    import tasmopt.vm.concolic as concolic
    from tasmopt.vm.expr import ExprContext
    from tasmopt.vm.witness import witness

    limits: list[int] = []
    real = concolic.run_path

    def run_path(program, w, ctx, *, step_limit=20_000, deadline=None):
        limits.append(step_limit)
        return real(program, w, ctx, step_limit=step_limit, deadline=deadline)

    monkeypatch.setattr(concolic, "run_path", run_path)
    p = harness(FN_SPINS_WHATEVER_THE_BRANCH, "__s")
    got = concolic.directed_witness(
        p, witness(0, 7, depth=32), ExprContext(), set(), random.Random(7), step_limit=20_000
    )
    assert got is None
    assert limits[0] == 20_000 and 1 < len(limits) <= 1 + concolic.SHORTEN_TRIES
    assert all(limit == concolic.SHORTENED_STEPS for limit in limits[1:])


def test_a_lookup_table_sbox_is_run_to_its_return_by_directed_witnesses(trident_std) -> None:
    """std.crypto.lut_sponge's ``sbox_layer`` reads a lookup table at addresses computed
    from values its guards constrain (``reduce_mod``'s ``divine``d quotient and remainder).
    Before the guard solver pinned the inputs of the reads it concretizes, none of its
    witnesses ran it to its return (47 cycles "measured" on failing runs, the function
    returned unmeasured); now the directed witnesses run it to its return, and it is measured
    on them (292 cycles for the client's program)."""
    from tasmopt.optimizer import compile as compile_tir
    from tasmopt.report import CompileOptions

    mod = trident_std["std_crypto_lut_sponge"]
    r = compile_tir(
        mod["tir"],
        mod["compiler_tasm"],
        options=CompileOptions(
            sources=("rules",), use_cache=False, only=frozenset({"sbox_layer"}), passes=()
        ),
    )
    f = {f.name: f for f in r.functions}["sbox_layer"]
    assert f.halted is not None and f.halted >= 16, f.reason
    assert f.baseline_cycles is not None and f.baseline_cycles > 200


@pytest.mark.parametrize(
    "mutation",
    [
        "the third lookup reads the neighbouring table cell",
        "the second lookup's argument is another state element",
        "the fifth lookup's table value is replaced by zero",
    ],
)
def test_directed_witnesses_through_the_sbox_reject_a_wrong_lookup(trident_std, mutation) -> None:
    """Adversarial for the witnesses the pinned solver now gets through lut_sponge's guards:
    a rewrite of ``sbox_layer`` that reads an aliased table address, passes another value
    to ``reduce_mod``, or drops a table read, must be told apart on them (the witnesses run
    it to its return, where before none did and the check failed closed on no evidence)."""
    from tasmopt.module import ModuleText
    from tasmopt.vm.equivalence import check_function

    mod = trident_std["std_crypto_lut_sponge"]
    labels = {"sbox_layer": "__sbox_layer", "reduce_mod": "__reduce_mod"}
    client = ModuleText.from_text(mod["compiler_tasm"], labels)
    lines = list(client.section_lines("sbox_layer"))
    reads = [k for k, ln in enumerate(lines) if ln.strip() == "read_mem 1"]
    calls = [k for k, ln in enumerate(lines) if ln.strip() == "call __reduce_mod"]
    if mutation.startswith("the third"):
        lines.insert(reads[2], "    addi 1")
    elif mutation.startswith("the second"):
        assert lines[calls[1] - 2].strip() == "dup 3"
        lines[calls[1] - 2] = "    dup 4"
    else:
        lines[reads[4] : reads[4] + 2] = ["    pop 1", "    push 0"]
    baseline = client.harness("sbox_layer", "release")
    wrong = client.harness("sbox_layer", "release", override={"sbox_layer": lines})
    v = check_function(baseline, wrong, seed=2)
    assert not v.equivalent
    assert v.witness >= 0, v.reason  # told apart on a witness, not failed closed
