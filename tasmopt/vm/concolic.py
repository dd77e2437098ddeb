"""Concolic runs of whole programs: guard-directed witnesses for functions (design §2).

A function with calls, branches and loops cannot be run symbolically as one straight line,
but one *path* can: `run_path` executes a program on a concrete witness while tracking every
op stack element, RAM cell and sponge word as a symbolic expression (the straight-line rules
of `tasmopt.vm.symbolic`), taking each ``skiz``/``recurse_or_return`` decision from the
concrete values. It records every guard met on the path (asserts, u32 checks, inverses,
sponge use); on a concrete failure it stops there.

`directed_witness` repeats: run the path; if the baseline fails, add the path's guards to
the accumulated set and solve them all (`tasmopt.vm.guards.solve`) for a new witness; until
a run gets through or the attempts run out. Each step of this is only a witness generator:
the verifier then runs baseline and candidate on the witness in the real simulator, so a
concolic inaccuracy can only cost a witness, never admit a wrong program.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

from tasmopt.isa import instruction_set, names_where
from tasmopt.tasm.program import Program
from tasmopt.vm.evaluate import Assignment, Evaluator, Unevaluable
from tasmopt.vm.expr import ExprContext, Guard, Poly
from tasmopt.vm.guards import _holds, solve
from tasmopt.vm.symbolic import CONTROL_FLOW, SymbolicRun, _step
from tasmopt.vm.witness import Witness

#: ``return``, ``recurse``, ``recurse_or_return`` (ISA table ``reads_jump_stack``).
_JUMP_STACK_READERS = names_where(lambda i: i.reads_jump_stack)

__all__ = ["PathResult", "run_path", "directed_witness"]


@dataclass
class PathResult:
    """One concolic run.

    Attributes:
        halted: the path reached ``halt`` with every guard on it satisfied.
        guards: the guards met on the path (the failing one included).
        steps: instructions executed.
        reason: why the run stopped early (failure, step limit, unsupported), else None.
        events: in path order, ``("guard", g)`` for each guard and ``("branch", taken,
            flipped)`` for each ``skiz``/``recurse_or_return`` decision, as guards that hold
            for the direction taken and for the other one.
        consumed: input tokens read per stream (``public``, ``secret``, ``digests``).
    """

    halted: bool
    guards: set[Guard]
    steps: int
    reason: str | None = None
    events: list[tuple[Any, ...]] = field(default_factory=list)
    consumed: dict[str, int] = field(default_factory=dict)
    assignment: Assignment | None = None


def run_path(
    program: Program,
    w: Witness,
    ctx: ExprContext,
    *,
    step_limit: int = 20_000,
    deadline: float | None = None,
) -> PathResult:
    """Run ``program`` from instruction 0 on ``w``, concretely and symbolically at once."""
    instrs = program.instructions
    labels = program.labels
    table = instruction_set(program.isa)
    a = w.assignment()
    ev = Evaluator(ctx, a)
    run = SymbolicRun(ctx)
    if w.sponge is not None:
        run.sponge_initialized = True  # the entry sponge is live: sponge0 variables
    js: list[tuple[int, int]] = []
    seen: set[tuple[Any, ...]] = set()
    ip, steps = 0, 0

    events: list[tuple[Any, ...]] = []

    def result(halted: bool, reason: str | None = None) -> PathResult:
        return PathResult(halted, set(seen), steps, reason, events, dict(run.consumed), a)

    def branch(cond: Poly) -> None:
        if cond.is_const:
            return
        c = ctx.canonical_sign(cond).id
        taken = ("nonzero", c) if ev.value(cond) else ("zero", c)
        flipped = ("zero", c) if taken[0] == "nonzero" else ("nonzero", c)
        events.append(("branch", taken, flipped))

    def check_new() -> str | None:
        for g in sorted(run.guards - seen):
            seen.add(g)
            events.append(("guard", g))
            try:
                ok = _holds(ctx, ev, g)
            except Unevaluable:
                ok = False
            if not ok:
                return f"guard {g[0]} fails at instruction {ip}"
        return None

    while True:
        if steps >= step_limit or (
            deadline is not None and steps % 256 == 0 and time.perf_counter() > deadline
        ):
            return result(False, "step limit")
        if ip >= len(instrs):
            return result(False, "ran off the end")
        ins = instrs[ip]
        steps += 1
        name = ins.name
        if name == "halt":
            return result(True)
        if name == "call":
            target = labels.get(str(ins.arg))
            if target is None:  # external: recorded by the simulator, no effect here
                ip += 1
                continue
            js.append((ip + 1, target))
            ip = target
            continue
        if name in _JUMP_STACK_READERS:
            if not js:
                return result(False, "jump stack empty")
            if name == "return":
                ip = js.pop()[0]
            elif name == "recurse":
                ip = js[-1][1]
            else:
                try:
                    diff = ctx.sub(run.peek(5), run.peek(6))
                    done = ev.value(diff) == 0
                    branch(diff)
                except Unevaluable:
                    return result(False, "undefined condition")
                ip = js.pop()[0] if done else js[-1][1]
            continue
        if name == "skiz":
            try:
                sym = run.pop()
                cond = ev.value(sym)
                branch(sym)
            except Unevaluable:
                return result(False, "undefined condition")
            if cond:
                ip += 1
            else:
                ip += 2
            continue
        if name in CONTROL_FLOW or name not in table:
            return result(False, f"unsupported {name}")
        _step(run, ins)
        if run.unsupported:
            return result(False, f"unsupported {name}")
        bad = check_new()
        if bad:
            return result(False, bad)
        ip += 1


def directed_witness(
    program: Program,
    base: Witness,
    ctx: ExprContext,
    guards: set[Guard],
    rng: random.Random,
    *,
    attempts: int = 24,
    step_limit: int = 20_000,
    deadline: float | None = None,
) -> Witness | None:
    """A witness derived from ``base`` on which ``program`` halts without failing, or None.

    Each failing run adds its path's guards to ``guards`` (shared across calls for one
    program, so later witnesses start from what earlier ones learned) and solves them; when
    that is impossible (a constant failure such as ``push 0; assert`` on this path, or a
    guard that contradicts the path), the last branch decisions are flipped in turn
    (depth-first, newest first): the guards and decisions before the branch, plus the other
    direction of it, are solved for a witness that takes the other way. A run that reaches
    the step limit (a loop counted by a witness value) takes one of its earliest branches
    the other way instead, at most `SHORTEN_TRIES` times, each later run stopped at
    `SHORTENED_STEPS`.
    """
    w = base
    stalled = 0  # runs of this call that reached the step limit
    if guards:
        solved = solve(ctx, guards, base.assignment(), rng, time_budget_s=0.2)
        if solved is not None:
            w = base.with_assignment(solved)
    for _ in range(attempts):
        if deadline is not None and time.perf_counter() > deadline:
            return None
        limit = step_limit if not stalled else min(step_limit, SHORTENED_STEPS)
        res = run_path(program, w, ctx, step_limit=limit, deadline=deadline)
        if res.halted:
            return _padded(w, res, rng)
        if res.reason == "step limit":
            # a loop whose trip count came from the witness (a random field element counts
            # down for ever): take an early branch the other way, so the loop ends after a
            # few trips (os.neptune.recursive: 18 of 166 random bases halted). A flip that
            # still runs to the limit took a branch that does not end the loop: after
            # SHORTEN_TRIES of them this witness is a miss (std.private.poly: 24 runs to the
            # limit per witness, 5 s of a 5.5 s compile, with the tries unbounded)
            stalled += 1
            if stalled > SHORTEN_TRIES:
                return None
            solved = _take_other_way(ctx, res.events, base, rng, deadline, shorten=True)
            if solved is None:
                return None
            w = base.with_assignment(solved)
            continue
        if res.reason in ("ran off the end", "jump stack empty") or (res.reason or "").startswith(
            "unsupported"
        ):
            return None  # not a guard: solving cannot help
        taken = {e[1] for e in res.events if e[0] == "branch"}
        solved = None
        # stay on this path (its branch decisions) and pass its guards; then relax
        for extra, keep in ((guards | taken, True), (taken, False), (set(), False)):
            solved = solve(ctx, extra | res.guards, base.assignment(), rng, time_budget_s=0.2)
            if solved is not None:
                if not keep:
                    guards.clear()
                guards |= res.guards
                break
        if solved is None:
            solved = _take_other_way(ctx, res.events, base, rng, deadline)
            if solved is None:
                return None
            guards.clear()
        w = base.with_assignment(solved)
    return None


#: Earliest branch decisions a run past the step limit tries to take the other way (in a
#: random order), and newest ones a failing run tries (newest first).
SHORTEN_BRANCHES = 8
FLIP_BRANCHES = 8

#: Runs to the step limit one `directed_witness` call shortens before it gives up.
SHORTEN_TRIES = 2

#: Step limit of the runs after a shortening: a flip that ends the loop gives a short run;
#: one that does not should not cost a whole step limit again (a symbolic run of
#: std.fhe.lwe's functions to 20,000 steps takes 0.4 s).
SHORTENED_STEPS = 4_000


def _take_other_way(
    ctx: ExprContext,
    events: list[tuple[Any, ...]],
    base: Witness,
    rng: random.Random,
    deadline: float | None,
    *,
    shorten: bool = False,
) -> Assignment | None:
    """Solve for the other direction of a branch decision of a run, together with every
    guard and decision before it: of the `FLIP_BRANCHES` newest, newest first (a run that
    failed: a way round its failure); with ``shorten``, of the `SHORTEN_BRANCHES` earliest,
    in a random order so that witnesses end their loops after different trip counts, one
    solver attempt each (a run past the step limit: a loop exit is a plain (dis)equality
    on its counter, solved at once or not at all; std.fhe.lwe spent 0.2 s of failed retries
    per branch). None if none can be solved."""
    branches = [k for k, e in enumerate(events) if e[0] == "branch"]
    if shorten:
        order = branches[:SHORTEN_BRANCHES]
        rng.shuffle(order)
        attempts, budget = 1, 0.1
    else:
        order, attempts, budget = branches[::-1][:FLIP_BRANCHES], 6, 0.2
    for k in order:
        if deadline is not None and time.perf_counter() > deadline:
            return None
        prefix = {e[1] for e in events[:k]}
        solved = solve(
            ctx,
            prefix | {events[k][2]},
            base.assignment(),
            rng,
            attempts=attempts,
            time_budget_s=budget,
        )
        if solved is not None:
            return solved
    return None


def _padded(w: Witness, res: PathResult, rng: random.Random) -> Witness:
    """``w`` with input streams long enough for what the path read (random tokens)."""
    from dataclasses import replace

    from tasmopt.isa import P

    a = res.assignment or w.assignment()
    pub, sec = list(w.public_input), list(w.secret_input)
    digs = list(w.secret_digests)
    # tokens the path evaluated keep the value it used; the others are free
    pub += [
        a.public.get(k, rng.randrange(P)) for k in range(len(pub), res.consumed.get("public", 0))
    ]
    sec += [
        a.secret.get(k, rng.randrange(P)) for k in range(len(sec), res.consumed.get("secret", 0))
    ]
    for k in range(len(digs), res.consumed.get("digests", 0)):
        d = a.digests.get(k) or [rng.randrange(P) for _ in range(5)]
        digs.append((d[0], d[1], d[2], d[3], d[4]))
    return replace(w, public_input=tuple(pub), secret_input=tuple(sec), secret_digests=tuple(digs))
