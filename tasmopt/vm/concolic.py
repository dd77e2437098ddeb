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
from dataclasses import dataclass

from tasmopt.isa import instruction_set
from tasmopt.tasm.program import Program
from tasmopt.vm.evaluate import Evaluator, Unevaluable
from tasmopt.vm.expr import ExprContext
from tasmopt.vm.guards import solve
from tasmopt.vm.symbolic import CONTROL_FLOW, SymbolicRun, _step
from tasmopt.vm.witness import Witness

__all__ = ["PathResult", "run_path", "directed_witness"]


@dataclass
class PathResult:
    """One concolic run.

    Attributes:
        halted: the path reached ``halt`` with every guard on it satisfied.
        guards: the guards met on the path (the failing one included).
        steps: instructions executed.
        reason: why the run stopped early (failure, step limit, unsupported), else None.
    """

    halted: bool
    guards: set[tuple]
    steps: int
    reason: str | None = None


def run_path(program: Program, w: Witness, ctx: ExprContext, *, step_limit: int = 20_000,
             deadline: float | None = None) -> PathResult:
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
    seen: set[tuple] = set()
    ip, steps = 0, 0

    def check_new() -> str | None:
        for g in run.guards - seen:
            seen.add(g)
            try:
                ok = _holds(ctx, ev, g)
            except Unevaluable:
                ok = False
            if not ok:
                return f"guard {g[0]} fails at instruction {ip}"
        return None

    while True:
        if steps >= step_limit or (deadline is not None and steps % 256 == 0
                                   and time.perf_counter() > deadline):
            return PathResult(False, set(seen), steps, "step limit")
        if ip >= len(instrs):
            return PathResult(False, set(seen), steps, "ran off the end")
        ins = instrs[ip]
        steps += 1
        name = ins.name
        if name == "halt":
            return PathResult(True, set(seen), steps)
        if name == "call":
            target = labels.get(str(ins.arg))
            if target is None:  # external: recorded by the simulator, no effect here
                ip += 1
                continue
            js.append((ip + 1, target))
            ip = target
            continue
        if name in ("return", "recurse", "recurse_or_return"):
            if not js:
                return PathResult(False, set(seen), steps, "jump stack empty")
            if name == "return":
                ip = js.pop()[0]
            elif name == "recurse":
                ip = js[-1][1]
            else:
                try:
                    done = ev.value(run.peek(5)) == ev.value(run.peek(6))
                except Unevaluable:
                    return PathResult(False, set(seen), steps, "undefined condition")
                ip = js.pop()[0] if done else js[-1][1]
            continue
        if name == "skiz":
            try:
                cond = ev.value(run.pop())
            except Unevaluable:
                return PathResult(False, set(seen), steps, "undefined condition")
            if cond:
                ip += 1
            else:
                ip += 2
            continue
        if name in CONTROL_FLOW or name not in table:
            return PathResult(False, set(seen), steps, f"unsupported {name}")
        _step(run, ins)
        if run.unsupported:
            return PathResult(False, set(seen), steps, f"unsupported {name}")
        bad = check_new()
        if bad:
            return PathResult(False, set(seen), steps, bad)
        ip += 1


def _holds(ctx: ExprContext, ev: Evaluator, g: tuple) -> bool:
    from tasmopt.vm.guards import _holds as holds
    return holds(ctx, ev, g)


def directed_witness(program: Program, base: Witness, ctx: ExprContext, guards: set[tuple],
                     rng: random.Random, *, attempts: int = 6, step_limit: int = 20_000,
                     deadline: float | None = None) -> Witness | None:
    """A witness derived from ``base`` on which ``program`` halts without failing, or None.

    ``guards`` accumulates the guards of every path tried (shared across calls for one
    program, so later witnesses start from what earlier ones learned).
    """
    w = base
    if guards:
        solved = solve(ctx, guards, base.assignment(), rng, time_budget_s=0.2)
        if solved is not None:
            w = base.with_assignment(solved)
    for _ in range(attempts):
        if deadline is not None and time.perf_counter() > deadline:
            return None
        res = run_path(program, w, ctx, step_limit=step_limit, deadline=deadline)
        if res.halted:
            return w
        if res.reason in ("step limit", "ran off the end", "jump stack empty") or \
                (res.reason or "").startswith("unsupported"):
            return None  # not a guard: solving cannot help
        # every guard met so far; if they conflict (different paths), this path's alone
        solved = solve(ctx, guards | res.guards, base.assignment(), rng, time_budget_s=0.3)
        if solved is None:
            solved = solve(ctx, res.guards, base.assignment(), rng, time_budget_s=0.3)
            if solved is None:
                return None
            guards.clear()
        guards |= res.guards
        w = base.with_assignment(solved)
    return None
