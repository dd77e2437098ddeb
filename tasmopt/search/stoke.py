"""Stochastic superoptimization (STOKE-style MCMC) over straight-line instruction sequences.

The chain moves through programs by deleting, inserting, replacing or swapping
instructions, or changing an argument. The cost of a program is its length plus a penalty
for every observable it gets wrong on a few concrete test inputs (op stack slots, outputs,
input consumption, failure); the test inputs pass the baseline's guards (guard-directed where
random values do not). Proposals are accepted by the Metropolis rule at inverse temperature
``beta``. A program that matches every test input and is shorter than the best so far is kept
only if the full verifier accepts it (`tasmopt.vm.equivalence.check_block`); the optimizer
then verifies it once more like any other candidate.

Deterministic for a seed and an iteration count.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from tasmopt.deadline import Deadline
from tasmopt.isa import IsaVariant, instruction_set, names_where
from tasmopt.tasm.program import Instr, Program
from tasmopt.vm.equivalence import BlockCheck, check_block, compare_symbolic
from tasmopt.vm.expr import ExprContext
from tasmopt.vm.guards import passing_witness
from tasmopt.vm.symbolic import run_symbolic
from tasmopt.vm.witness import Witness, witness

__all__ = ["stoke"]

#: Shuffles with a small index argument (ISA table: stack shuffles without a field argument).
_INDEXED_SHUFFLES = names_where(lambda i: i.is_stack_shuffle and not i.has_field_argument)
_WRONG = 4  # penalty per wrong observable
_FAIL = 16  # penalty when failing differs


def _pool(baseline: Sequence[Instr], depth: int) -> list[Instr]:
    """Instructions the chain may insert: the baseline's own non-shuffle instructions and
    constants, and every shuffle within reach."""
    reach = min(15, max(depth, 1))
    pool = {i for i in baseline if i.name not in _INDEXED_SHUFFLES}
    pool |= {Instr("dup", k) for k in range(reach + 1)}
    pool |= {Instr("swap", k) for k in range(1, reach + 1)}
    pool |= {Instr("pick", k) for k in range(2, reach + 1)}
    pool |= {Instr("place", k) for k in range(2, reach + 1)}
    pool |= {Instr("pop", k) for k in range(1, 6)}
    return sorted(pool, key=str)


def _observe(
    instrs: Sequence[Instr], tests: list, isa: IsaVariant, dead_slots: frozenset[int] = frozenset()
) -> list[tuple]:
    prog = _program(instrs, isa)
    return [_observe_one(prog, len(instrs), w, dead_slots) for w in tests]


def _program(instrs: Sequence[Instr], isa: IsaVariant) -> Program:
    return Program.from_items(list(instrs) + [Instr("halt")], isa)


def _observe_one(prog: Program, n: int, w: Witness, dead_slots: frozenset[int]) -> tuple:
    """What one test input shows of a candidate of ``n`` instructions (``prog``: it and
    ``halt``): the op stack (dead slots blanked), output, input consumed and RAM, or an
    error."""
    from tasmopt.vm.simulator import run

    r = run(prog, w.vm_input(), step_limit=n + 2, measure=False)
    if r.error is not None:
        return ("error",)
    top = len(r.stack) - 1
    return (
        tuple(None if top - j in dead_slots else v for j, v in enumerate(r.stack)),
        tuple(r.public_output),
        r.public_input_consumed,
        r.secret_input_consumed,
        tuple(sorted(r.ram.items())),
    )


def _penalty(got: list[tuple], want: list[tuple]) -> int:
    cost = 0
    for g, w in zip(got, want):
        if (g[0] == "error") != (w[0] == "error"):
            cost += _FAIL
            continue
        if g[0] == "error":
            continue
        gs, ws = g[0], w[0]
        cost += _WRONG * abs(len(gs) - len(ws))
        cost += _WRONG * sum(1 for a, b in zip(reversed(gs), reversed(ws)) if a != b)
        cost += sum(_WRONG for a, b in zip(g[1:], w[1:]) if a != b)
    return cost


def _mutate(prog: list[Instr], pool: list[Instr], rng: random.Random) -> list[Instr]:
    out = list(prog)
    move = rng.randrange(5)
    if move == 0 and out:  # delete
        del out[rng.randrange(len(out))]
    elif move == 1:  # insert
        out.insert(rng.randrange(len(out) + 1), rng.choice(pool))
    elif move == 2 and out:  # replace
        out[rng.randrange(len(out))] = rng.choice(pool)
    elif move == 3 and len(out) > 1:  # swap neighbours
        i = rng.randrange(len(out) - 1)
        out[i], out[i + 1] = out[i + 1], out[i]
    elif out:  # change an argument
        i = rng.randrange(len(out))
        ins = out[i]
        if ins.name in _INDEXED_SHUFFLES:
            legal = instruction_set()[ins.name].arg_range()
            assert legal is not None
            lo = max(legal.start, 1 if ins.name == "swap" else 0)  # swap 0 is a nop
            hi = legal.stop - 1
            arg = ins.arg if isinstance(ins.arg, int) else lo  # shuffles carry an index
            out[i] = Instr(ins.name, max(lo, min(hi, arg + rng.choice((-1, 1)))))
    return out


def stoke(
    baseline: Sequence[Instr],
    start: Sequence[Instr],
    *,
    iterations: int,
    seed: int,
    isa: IsaVariant = "release",
    beta: float = 1.0,
    tests: int = 4,
    deadline: Deadline | None = None,
    dead_slots: frozenset[int] = frozenset(),
) -> list[Instr] | None:
    """Run the chain from ``start``; the shortest program shorter than ``start`` that matched
    every test and passed the symbolic check, or None.

    Args:
        baseline: the reference block.
        start: where the chain starts (e.g. the best schedule found).
        iterations: proposals to make.
        seed: chain and test-input seed.
        tests: concrete test inputs for the cost function.
        deadline: stop proposing when it expires (looked at every iteration: one proposal
            runs the simulator on every test input, which is long for a long block).
        dead_slots: op-stack slots dead after the block: not compared.
    """
    rng = random.Random(seed)
    sym_base = run_symbolic(baseline, ctx := ExprContext(), isa)
    if sym_base.unsupported:
        return None
    depth = 16 + max(sym_base.base, -sym_base.low_water) + 2
    inputs = max(sym_base.consumed["public"], sym_base.consumed["secret"]) + 2
    cases = _cases(
        ctx,
        sym_base.guards,
        tests,
        seed,
        depth=depth,
        inputs=inputs,
        digests=sym_base.consumed["digests"] + 1,
    )
    if not cases:
        return None  # no input gets through the baseline's guards: nothing to steer by
    want = _observe(baseline, cases, isa, dead_slots)
    base_lines = tuple(str(i) for i in baseline)
    pool = _pool(baseline, sym_base.base)
    cur = list(start)
    cur_cost = len(cur) + _penalty(_observe(cur, cases, isa, dead_slots), want)
    best: list[Instr] | None = None
    best_len = len(start)
    for _ in range(iterations):
        if deadline is not None and deadline.expired:
            break
        cand = _mutate(cur, pool, rng)
        cost = _metropolis(cand, cases, want, cur_cost, beta, rng, isa, dead_slots)
        if cost is not None:
            cur, cur_cost = cand, cost
            if cost == len(cand) and len(cand) < best_len:
                run_c = run_symbolic(cand, ctx, isa)
                status = compare_symbolic(ctx, sym_base, run_c, dead_slots=dead_slots).status
                if status not in ("proven", "testable"):
                    continue
                # the chain's own tests are few: only the full verifier decides
                check = BlockCheck(
                    base_lines,
                    tuple(str(i) for i in cand),
                    isa,
                    seed=seed,
                    dead_slots=tuple(sorted(dead_slots)),
                )
                if check_block(check).equivalent:
                    best, best_len = list(cand), len(cand)
    return best


def _metropolis(
    cand: list[Instr],
    cases: list,
    want: list[tuple],
    cur_cost: int,
    beta: float,
    rng: random.Random,
    isa: IsaVariant,
    dead_slots: frozenset[int],
) -> int | None:
    """The Metropolis step for ``cand``: its cost if accepted, None if rejected.

    Accepts when the cost (length plus penalty) is at most ``cur_cost``, else with
    probability ``exp(-beta * (cost - cur_cost))``. The test inputs are run one at a time:
    the penalty only grows with each, so once the uniform draw rejects the cost so far, the
    rest are not run (most proposals on a long block break it on the first input). The draw
    is taken exactly when the full evaluation would take it (the cost exceeds ``cur_cost``)
    and decides exactly as it would: the chain is the one the full evaluation gives, step
    for step, at a fraction of the simulator runs."""
    prog = _program(cand, isa)
    cost = len(cand)
    u: float | None = None
    for w, wanted in zip(cases, want, strict=True):
        cost += _penalty([_observe_one(prog, len(cand), w, dead_slots)], [wanted])
        if cost > cur_cost:
            if u is None:
                u = rng.random()
            if u >= math.exp(-beta * (cost - cur_cost)):
                return None  # rejected whatever the remaining inputs add
    return cost


def _cases(ctx: ExprContext, guards: set[tuple], count: int, seed: int, **shape) -> list:
    """``count`` test inputs that pass the baseline's guards (guard-directed where random
    values fail them; `tasmopt.vm.guards`). A chain steered by inputs that all crash the
    baseline drifts toward short crashing programs."""
    rng = random.Random(seed + 7919)
    out: list[Witness] = []
    for i in range(3, 3 + 4 * count):
        if len(out) == count:
            break
        w = passing_witness(ctx, guards, witness(i, seed + 7919, **shape), rng, time_budget_s=0.1)
        if w is not None:
            out.append(w)
    return out
