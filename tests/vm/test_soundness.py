"""The verifier never accepts a non-equivalent program: one test per class of hole found
(issue: soundness), each with the input that exposes the wrong program, plus the machinery
that closes them (guard solving, degree bound, alignment, block boundaries).

Every "rejected" case is checked to really differ (the exposing input is run), so a test
cannot pass because the verifier rejects everything; every "accepted" twin shows the
verifier still accepts the correct rewrite of the same code.
"""

from __future__ import annotations

import random

import pytest

from tasmopt.isa import P
from tasmopt.optimizer import entry_hazard
from tasmopt.tasm.parser import parse, parse_instructions
from tasmopt.tasm.program import Instr, Program
from tasmopt.vm.equivalence import (
    BlockCheck,
    check_aligned,
    check_block,
    check_function,
    degree_ok,
    harness,
    rejection_class,
)
from tasmopt.vm.evaluate import Assignment, Evaluator
from tasmopt.vm.expr import ExprContext
from tasmopt.vm.guards import solve, violated
from tasmopt.vm.simulator import VmInput, run
from tasmopt.vm.symbolic import run_symbolic


def block(text: str) -> tuple[str, ...]:
    return tuple(s.strip() for s in text.split(";") if s.strip())


def run_block(
    lines: tuple[str, ...], stack_top: list[int], *, public=(), secret=(), ram=None, sponge=None
):
    """Run a block on an entry stack whose top is ``stack_top[0]``."""
    prog = Program.from_items(list(parse_instructions("\n".join(lines))) + [Instr("halt")])
    stack = [0] * 16 + list(reversed(stack_top))
    return run(
        prog,
        VmInput(
            public_input=public,
            secret_input=secret,
            ram=ram or {},
            initial_stack=stack,
            sponge=sponge,
        ),
    )


def outcome(r) -> tuple:
    return (
        ("error",)
        if r.error
        else (tuple(r.stack), tuple(r.public_output), tuple(sorted(r.ram.items())), r.sponge)
    )


# -- class 1: every random witness fails a guard ------------------------------------------

GUARDED = [
    # assert against a constant, then code after it
    (
        block("dup 0; push 12345; eq; assert; push 1; add"),
        block("dup 0; push 12345; eq; assert; addi 2"),
        block("dup 0; push 12345; eq; assert; addi 1"),
        [12345],
    ),
    # a preimage-style guard: st0 must equal st1 squared plus 7
    (
        block("dup 1; dup 0; mul; addi 7; dup 1; eq; assert; push 3; add"),
        block("dup 1; dup 0; mul; addi 7; dup 1; eq; assert; addi 4"),
        block("dup 1; dup 0; mul; addi 7; dup 1; eq; assert; addi 3"),
        [56, 7],
    ),
    # u32 guard on a field element (random field elements fail it), then code after it
    (
        block("dup 0; dup 1; lt; pop 1; push 10; add"),
        block("dup 0; dup 1; lt; pop 1; addi 11"),
        block("dup 0; dup 1; lt; pop 1; addi 10"),
        [5],
    ),
    # split-based range check used as an assert: hi must be zero
    (
        block("dup 0; split; pop 1; push 0; eq; assert; push 2; mul"),
        block("dup 0; split; pop 1; push 0; eq; assert; dup 0; add; addi 1"),
        block("dup 0; split; pop 1; push 0; eq; assert; push 2; mul"),
        [9],
    ),
]


@pytest.mark.parametrize("base,wrong,right,exposing", GUARDED)
def test_guarded_code_is_checked_on_witnesses_that_pass_the_guard(base, wrong, right, exposing):
    # the wrong candidate really differs on the input that passes the guard
    assert outcome(run_block(base, exposing)) != outcome(run_block(wrong, exposing))
    assert run_block(base, exposing).error is None
    v = check_block(BlockCheck(base, wrong))
    assert not v.equivalent
    assert rejection_class(v.reason) == "different"
    assert check_block(BlockCheck(base, right)).equivalent


def test_unsatisfiable_guards_reject_instead_of_accepting_vacuously():
    base = block("push 0; assert; push 1; add")  # always fails
    v = check_block(BlockCheck(base, block("push 0; assert; addi 5")))
    assert not v.equivalent and rejection_class(v.reason) == "guards"
    # even a textually identical twin is not "proven" on zero passing witnesses
    assert not check_block(BlockCheck(base, base)).equivalent


def test_guard_solver_finds_inputs_random_values_miss():
    ctx = ExprContext()
    r = run_symbolic(
        parse_instructions(
            "read_io 1\ndup 0\npush 12345\neq\nassert\n"
            "divine 1\ndup 0\nmul\npush -49\nadd\npush 0\neq\n"
            "assert\nsplit\npop 1\npush 0\neq\nassert"
        ),
        ctx,
    )
    base = Assignment(
        stack={k: random.Random(k).randrange(P) for k in range(20)}, public={0: 5}, secret={0: 6}
    )
    assert violated(ctx, r.guards, base)
    a = solve(ctx, r.guards, base, random.Random(1))
    assert a is not None and not violated(ctx, r.guards, a)
    assert a.public[0] == 12345 and a.secret[0] in (7, P - 7)


def _pinning_case() -> tuple[ExprContext, set, Assignment]:
    """Guards that only a query keeping a concretized read's address can solve: ``y`` is a
    u32 (``split``: no linear repair) and ``x*z + y == RAM[x]^2`` (``x`` is the address of a
    read the encoding concretizes, and a factor of the guard too). A model that moves ``x``
    reads another cell, whose square the query never saw."""
    ctx = ExprContext()
    r = run_symbolic(
        parse_instructions(
            "dup 1\nsplit\npop 1\npush 0\neq\nassert\n"
            "dup 0\nread_mem 1\npop 1\ndup 0\nmul\ndup 1\ndup 4\nmul\ndup 3\nadd\neq\nassert"
        ),
        ctx,
    )
    return ctx, r.guards, Assignment()


@pytest.mark.parametrize("seed", range(8))
def test_the_solver_keeps_the_inputs_of_what_it_concretizes(seed):
    """Before the pinning, z3 moved ``x`` in 0 of 20 seeds' models the evaluation accepted
    (it solved for the old cell's value at a new address); pinned, every seed is solved."""
    ctx, guards, _ = _pinning_case()
    base = Assignment(
        stack={k: random.Random(100 * seed + k).randrange(P) for k in range(20)},
        fill=lambda addr: pow(addr + 3, 5, P),  # every cell different
    )
    assert violated(ctx, guards, base)
    a = solve(ctx, guards, base, random.Random(seed))
    assert a is not None and not violated(ctx, guards, a)
    assert a.stack[0] == base.stack[0]  # the address read: pinned, not moved
    assert a.stack[1] < 2**32


def test_a_pinned_query_has_no_model_that_moves_the_pinned_input():
    """Adversarial, one SMT query: at ``x = 0`` the guard is ``y == RAM[0]^2``, far above
    2^32, so the query has no model unless it moves ``x`` (which it did before the pinning:
    a model the evaluation then rejected). Pinned, the query itself is unsatisfiable."""
    import time

    from tasmopt.vm import guards as g

    ctx, guards, _ = _pinning_case()
    base = Assignment(stack={0: 0, 1: 5, 2: 7}, fill=lambda addr: 2**40 + addr)
    assert g._smt(ctx, sorted(guards), base, random.Random(0), time.perf_counter() + 2) is None
    solvable = Assignment(stack={0: 3, 1: 5, 2: 7}, fill=lambda addr: 2**40 + addr)
    a = g._smt(ctx, sorted(guards), solvable, random.Random(0), time.perf_counter() + 2)
    assert a is not None and a.stack[0] == 3 and not violated(ctx, guards, a)


def test_a_query_out_of_solver_resources_finds_nothing_whatever_the_clock_says():
    """The solver's work is bounded by z3's resource limit, not only by the wall clock: the
    same query with one unit finds no model however much time is left, and unbounded it
    finds one (the solvable pinned case above)."""
    import time

    from tasmopt.vm import guards as g

    ctx, guards, _ = _pinning_case()
    a = Assignment(stack={0: 3, 1: 5, 2: 7}, fill=lambda addr: 2**40 + addr)
    far = time.perf_counter() + 60
    assert g._smt(ctx, sorted(guards), a, random.Random(0), far, rlimit=1) is None
    assert g._smt(ctx, sorted(guards), a, random.Random(0), far, rlimit=0) is not None


def test_solve_splits_its_budget_into_resource_limits_per_attempt(monkeypatch):
    from tasmopt.vm import guards as g

    seen = []
    real = g._smt

    def spy(ctx, guards, a, rng, deadline, rlimit=0, zctx=None):
        seen.append(rlimit)
        return real(ctx, guards, a, rng, deadline, rlimit, zctx)

    monkeypatch.setattr(g, "_smt", spy)
    ctx, guards, _ = _pinning_case()
    base = Assignment(stack={0: 0, 1: 5, 2: 7}, fill=lambda addr: 2**40 + addr)
    g.solve(ctx, guards, base, random.Random(0), attempts=4, time_budget_s=0.5)
    assert seen and set(seen) == {int(0.5 * g.RLIMIT_PER_S / 4)}


def test_stoke_never_keeps_a_program_that_only_matches_crashing_inputs():
    from tasmopt.search.stoke import stoke

    base = [
        Instr("dup", 0),
        Instr("dup", 0),
        Instr("add"),
        Instr("dup", 0),
        Instr("dup", 2),
        Instr("eq"),
        Instr("assert"),
        Instr("pop", 1),
        Instr("push", 3),
        Instr("add"),
    ]
    found = stoke(base, base, iterations=3000, seed=3)
    if found is not None:
        check = BlockCheck(tuple(map(str, base)), tuple(map(str, found)))
        assert check_block(check).equivalent


# -- class 2: the sponge --------------------------------------------------------------------


def test_absorbed_values_are_compared_with_a_live_sponge():
    base = block(
        "push 1; push 2; push 3; push 4; push 5; push 6; push 7; push 8; push 9; "
        "push 12345; sponge_absorb; sponge_squeeze"
    )
    wrong = block(
        "push 1; push 2; push 3; push 4; push 5; push 6; push 7; push 8; push 9; "
        "push 1234; sponge_absorb; sponge_squeeze"
    )
    sponge = tuple(range(100, 116))
    assert outcome(run_block(base, [], sponge=sponge)) != outcome(
        run_block(wrong, [], sponge=sponge)
    )
    assert not check_block(BlockCheck(base, wrong)).equivalent
    assert check_block(BlockCheck(base, base)).equivalent  # witnesses do run it


def test_sponge_state_after_squeeze_is_observable():
    base = block("sponge_squeeze; pop 5; pop 5")
    wrong = block("sponge_squeeze; pop 5; pop 5; sponge_squeeze; pop 5; pop 5")
    assert not check_block(BlockCheck(base, wrong)).equivalent


# -- class 3: degree bound -------------------------------------------------------------------

FERMAT = "addi 7; push 4294967295; swap 1; pow; " + "; ".join(["dup 0; mul"] * 32)


def test_fermat_power_is_not_accepted_as_the_constant_one():
    base = block(FERMAT)
    wrong = block("pop 1; push 1")
    assert run_block(base, [5]).stack[-1] == 1
    assert run_block(base, [P - 7]).stack[-1] == 0  # the one input where they differ
    v = check_block(BlockCheck(base, wrong))
    assert not v.equivalent and rejection_class(v.reason) in ("degree", "different")


def test_degree_bound():
    assert degree_ok(1, 16) and degree_ok(2**19, 16) and not degree_ok(2**21, 16)
    assert not degree_ok(P - 1, 16) and not degree_ok(None, 16)
    ctx = ExprContext()
    x = ctx.var("s", 0)
    assert ctx.degree(ctx.mul(x, x)) == 2
    assert ctx.degree(ctx.pow_const(ctx.add(x, ctx.const(7)), P - 1)) is None or not degree_ok(
        ctx.degree(ctx.pow_const(ctx.add(x, ctx.const(7)), P - 1)), 16
    )
    assert ctx.degree(ctx.op("tip5", x, 0, algebraic=True)) is None


# -- class 4: RAM at non-algebraic addresses ------------------------------------------------


def test_read_at_a_comparison_address_is_not_a_free_variable():
    base = block("eq; read_mem 1; pop 1")  # reads RAM[st0 == st1]
    wrong = block("pop 2; push 0; read_mem 1; pop 1")  # reads RAM[0]
    ram = {0: 11, 1: 22}
    assert outcome(run_block(base, [4, 4], ram=ram)) != outcome(run_block(wrong, [4, 4], ram=ram))
    assert not check_block(BlockCheck(base, wrong)).equivalent
    ctx = ExprContext()
    addr = ctx.op("iszero", ctx.var("s", 0))
    assert not ctx.is_algebraic([ctx.var("mem0", addr.id)])
    assert ctx.is_algebraic([ctx.var("mem0", ctx.var("s", 1).id)])


def test_reordering_possibly_aliasing_accesses_is_rejected():
    base = block("push 5; dup 1; write_mem 1; pop 1; push 6; dup 2; write_mem 1; pop 1")
    wrong = block("push 6; dup 2; write_mem 1; pop 1; push 5; dup 1; write_mem 1; pop 1")
    # st0 == st1 makes the two addresses alias: the last write wins
    assert outcome(run_block(base, [3, 3])) != outcome(run_block(wrong, [3, 3]))
    assert not check_block(BlockCheck(base, wrong)).equivalent


# -- class 6: low-degree-looking reads at high-degree addresses (issue 33) ------------------
# A flag f = (y + c)^(p-1) is 1 everywhere but at y = -c. Added into a RAM address, it makes a
# candidate read the baseline's cell on every random witness and another cell at one point.
# Both accepted mutants of the independent mutation test were of this shape.

FLAG = "push 4294967295; dup 3; addi 7; pow; push 65536; swap 1; pow; push 65536; swap 1; pow"
FLAG_DUPS = "push 4294967295; dup 3; addi 7; pow; push 65536; swap 1; pow; " + "; ".join(
    ["dup 0; mul"] * 16
)  # the same (y+7)^(p-1), the last 2^16 through dup'ed squarings
READ_AT = "read_mem 1; pop 1; swap 2; pop 2"  # entry: st0 = address, st1 = x, st2 = y
SHIFTED = "addi -1; dup 2; mul; add; " + READ_AT  # address + x * (f - 1)


@pytest.mark.parametrize("flag", [FLAG, FLAG_DUPS], ids=["pow_chain", "dup_squarings"])
def test_a_read_at_an_address_that_differs_at_one_root_is_rejected(flag):
    base, wrong = block(READ_AT), block(flag + "; " + SHIFTED)
    ram = {100: 11, 97: 22}
    assert outcome(run_block(base, [100, 3, 5], ram=ram)) == outcome(
        run_block(wrong, [100, 3, 5], ram=ram)
    )  # agree on an ordinary input ...
    assert outcome(run_block(base, [100, 3, P - 7], ram=ram)) != outcome(
        run_block(wrong, [100, 3, P - 7], ram=ram)
    )  # ... and read another cell at y = -7
    v = check_block(BlockCheck(base, wrong))
    assert not v.equivalent and "RAM addresses read differ" in (v.reason or "")


def test_a_write_at_an_address_that_differs_at_one_root_is_rejected():
    write_at = "dup 1; swap 1; write_mem 1; pop 1; pop 2"  # RAM[st0] = st1
    base = block(write_at)
    wrong = block(FLAG + "; addi -1; dup 2; mul; add; " + write_at)
    assert outcome(run_block(base, [100, 3, P - 7])) != outcome(run_block(wrong, [100, 3, P - 7]))
    assert not check_block(BlockCheck(base, wrong)).equivalent


def test_a_value_that_differs_at_one_root_is_rejected():
    base = block("pop 3; push 0")
    wrong = block(FLAG + "; addi -1; swap 3; pop 3")  # f - 1: 0 except at y = -7
    assert outcome(run_block(base, [1, 2, P - 7])) != outcome(run_block(wrong, [1, 2, P - 7]))
    v = check_block(BlockCheck(base, wrong))
    assert not v.equivalent and rejection_class(v.reason) in ("degree", "different")


def test_alias_degree_follows_pow_chains_and_dups():
    ctx = ExprContext()
    y, a = ctx.var("s", 2), ctx.var("s", 0)
    f = ctx.pow_const(ctx.pow_const(ctx.add(y, ctx.const(7)), 2**32 - 1), 2**32)
    assert ctx.degree(f) == P - 1  # (2^32 - 1) * 2^32
    sq = ctx.pow_const(ctx.add(y, ctx.const(7)), 2**32 - 1)
    for _ in range(32):
        sq = ctx.mul(sq, sq)  # dup 0; mul
    assert sq is f and ctx.degree(sq) == P - 1
    assert ctx.alias_degree([a, ctx.add(a, ctx.const(1))]) == 0  # never coincide
    assert 1 <= ctx.alias_degree([a, ctx.var("s", 1)]) <= 2  # an upper bound
    far = ctx.add(a, ctx.mul(ctx.var("s", 1), ctx.sub(f, ctx.one)))
    assert not degree_ok(ctx.alias_degree([a, far]), 16)
    assert ctx.alias_degree([a, ctx.op("powv", y, a, algebraic=False)]) is None


def test_singular_witnesses_catch_the_flag_without_the_degree_bound(monkeypatch):
    """Defence in depth: with the degree bound switched off, the singular-point witness
    (the power's base solved to zero) still exposes the shifted read."""
    import tasmopt.vm.equivalence as eq

    monkeypatch.setattr(eq, "degree_ok", lambda degree, witnesses: True)
    eq.clear_block_verdicts()
    try:
        v = check_block(BlockCheck(block(READ_AT), block(FLAG + "; " + SHIFTED), seed=3))
    finally:
        eq.clear_block_verdicts()
    assert not v.equivalent and "singular point" in (v.reason or "")


def test_singular_points_name_the_roots_that_matter():
    from tasmopt.vm.guards import singular_points

    ctx = ExprContext()
    x, y = ctx.var("s", 0), ctx.var("s", 1)
    big = ctx.pow_const(ctx.add(y, ctx.const(7)), P - 1)
    inv = ctx.op("inv", ctx.sub(x, y), algebraic=True)
    cell_a, cell_b = ctx.var("mem0", x.id), ctx.var("mem0", ctx.add(x, y).id)
    pts = singular_points(ctx, [ctx.add(big, inv), ctx.add(cell_a, cell_b)])
    roots = [ctx.canonical_sign(p) for p in (ctx.add(y, ctx.const(7)), ctx.sub(x, y), y)]
    assert pts[0] is roots[0]  # the power's base first
    assert roots[1] in pts  # the inverse's operand
    assert roots[2] in pts  # the two read addresses x and x + y coincide at y = 0
    assert all(not p.is_const for p in pts)


def test_a_correct_read_rewrite_is_still_accepted():
    """Twin: two reads of cells at distinct low-degree addresses, reordered, still pass."""
    base = block("dup 0; read_mem 1; pop 1; dup 2; read_mem 1; pop 1; mul; swap 2; pop 2")
    right = block("dup 1; read_mem 1; pop 1; dup 1; read_mem 1; pop 1; mul; swap 2; pop 2")
    assert check_block(BlockCheck(base, right)).equivalent


# -- class 5: blocks entered mid-way -----------------------------------------------------------


def test_block_after_a_skiz_is_not_rewritten_as_one_unit():
    lines = ["__f:", "    push 0", "    skiz", "    push 7", "    push 1", "    add", "    return"]
    assert entry_hazard(lines, 3, 6, "release") is not None
    assert "skip" in entry_hazard(lines, 3, 6, "release")
    assert entry_hazard(lines, 1, 2, "release") is None
    assert "label" in entry_hazard(["a:", "  push 1", "b:", "  push 2"], 1, 4, "release")
    assert "control flow" in entry_hazard(["  push 1", "  call x", "  push 2"], 0, 3, "release")


def test_alignment_treats_the_instruction_after_skiz_as_control():
    base = harness("f:\n    dup 0\n    skiz\n    push 7\n    push 1\n    add\n    return", "f")
    # merging the conditional `push 7` with the following code would be wrong
    wrong = harness("f:\n    dup 0\n    skiz\n    push 8\n    addi -1\n    return", "f")
    assert not check_aligned(base, wrong).equivalent
    same = harness("f:\n    dup 0\n    skiz\n    push 7\n    addi 1\n    return", "f")
    assert check_aligned(base, same).equivalent


# -- class 6: the client's baseline is the reference ---------------------------------------


def test_function_differential_agreement_is_not_a_proof():
    client = harness(
        "f:\n    read_io 1\n    dup 0\n    push 12345\n    eq\n    skiz\n"
        "    call g\n    write_io 1\n    return\ng:\n    push 12350\n    pop 1\n"
        "    addi 5\n    return",
        "f",
    )
    ours = harness(
        "f:\n    read_io 1\n    dup 0\n    push 12345\n    eq\n    skiz\n"
        "    call g\n    write_io 1\n    return\ng:\n    push 12350\n    pop 1\n"
        "    addi 6\n    return",
        "f",
    )
    # 12345 -> 12350 by the client, 12351 by ours
    outs = [run(p, VmInput(public_input=(12345,))).public_output for p in (client, ours)]
    assert outs == [[12350], [12351]]
    assert not check_aligned(client, ours).equivalent


def test_function_check_requires_witnesses_that_reach_the_return():
    base = harness(
        "f:\n    read_io 1\n    push 12345\n    eq\n    assert\n    push 1\n"
        "    write_io 1\n    return",
        "f",
    )
    wrong = harness(
        "f:\n    read_io 1\n    push 12345\n    eq\n    assert\n    push 2\n"
        "    write_io 1\n    return",
        "f",
    )
    v = check_function(base, wrong)
    assert not v.equivalent and v.witness >= 0  # a directed witness shows the difference
    same = check_function(base, base)
    assert same.equivalent and same.halted >= 16
    never = harness("f:\n    push 0\n    assert\n    return", "f")
    v = check_function(never, never)
    assert not v.equivalent and v.halted == 0


def test_function_check_flips_branches_to_avoid_a_panicking_path():
    # only x == 77 takes `addi 1`; every other path asserts on the constant 0
    prog = harness(
        "f:\n    read_io 1\n    push 77\n    eq\n    push 0\n    swap 1\n"
        "    skiz\n    addi 1\n    assert\n    return",
        "f",
    )
    v = check_function(prog, prog)
    assert v.equivalent and v.halted >= 16


# -- one semantics: the symbolic rules agree with the simulator -----------------------------


def _random_instr(name: str, arg_kind: str | None, rng: random.Random) -> Instr:
    if arg_kind == "field_element":
        return Instr(name, rng.choice((0, 1, 7, P - 1, rng.randrange(P))))
    if arg_kind == "n_1_5":
        return Instr(name, rng.randrange(1, 6))
    if arg_kind == "stack_index":
        return Instr(name, rng.randrange(0, 16))
    return Instr(name)


@pytest.mark.parametrize("isa", ["release", "head"])
def test_symbolic_rules_match_the_simulator_on_every_instruction(isa):
    """Every non-control instruction, on random states (small, u32 and field values, so
    failure cases are hit too): the symbolic result evaluated at the state equals the
    simulator's, and the symbolic guards fail exactly when the simulator fails."""
    from tasmopt.isa import instruction_set

    table = instruction_set(isa)
    rng = random.Random(7)
    checked = failures = 0

    def fill(addr: int) -> int:  # initial RAM, the same for both semantics
        return (addr * 2654435761 + 17) % P

    class Fill(dict):
        def fill_value(self, addr):
            return fill(addr)

    for ins in table:
        if ins.is_control_flow:
            continue
        for trial in range(12):
            instr = _random_instr(ins.name, ins.arg_kind, rng)
            draw = [
                lambda: rng.randrange(4),
                lambda: rng.randrange(2**32),
                lambda: rng.randrange(P),
            ][trial % 3]
            top = [draw() for _ in range(22)]
            stack = {k: v for k, v in enumerate(top)}
            ram: dict[int, int] = {}
            sponge = [rng.randrange(P) for _ in range(16)]
            a = Assignment(
                stack=stack,
                public={k: draw() for k in range(6)},
                secret={k: draw() for k in range(6)},
                digests={0: [draw() for _ in range(5)]},
                sponge=sponge,
                ram=ram,
                fill=fill,
            )
            ctx = ExprContext()
            sym = run_symbolic([instr], ctx, isa)
            assert not sym.unsupported, instr
            ev = Evaluator(ctx, a)
            sym_fails = bool(violated(ctx, sym.guards, a))

            prog = Program.from_items([instr, Instr("halt")], isa)
            r = run(
                prog,
                VmInput(
                    public_input=[a.public[k] for k in range(6)],
                    secret_input=[a.secret[k] for k in range(6)],
                    secret_digests=[tuple(a.digests[0])],
                    ram=Fill(),
                    initial_stack=[0] * 16 + list(reversed(top)),
                    sponge=sponge,
                ),
                step_limit=5,
            )
            assert sym_fails == (r.error is not None), (str(instr), r.error, sym.guards)
            if r.error is not None:
                failures += 1
                continue
            depth = len(r.stack) - 16
            got = [ev.value(p) for p in sym.top_down(depth)]
            assert got == list(reversed(r.stack[16:])), str(instr)
            assert [ev.value(p) for p in sym.outputs] == list(r.public_output), str(instr)
            if sym.sponge is not None:
                assert [ev.value(p) for p in sym.sponge] == list(r.sponge), str(instr)
            writes = {}
            for addr, val in sym.ram:
                writes[ev.value(addr)] = ev.value(val)
            assert writes == dict(r.ram), str(instr)
            checked += 1
    assert checked > 300 and failures > 10


def test_parse_sanity():
    assert parse("    push 1\n    halt").instructions[0].arg == 1


def test_z3_contexts_are_served_from_the_heap_on_glibc():
    """A z3 context per solve is cheap only with glibc's mmap threshold above its size
    (`tasmopt.vm.guards._keep_contexts_on_the_heap`); elsewhere nothing is changed."""
    import platform

    from tasmopt.vm.guards import _keep_contexts_on_the_heap

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("mallopt is glibc's")
    assert _keep_contexts_on_the_heap() is True
