"""`optimize_block`: the block superoptimizer's entry point (issue 4).

Pipeline for one straight-line block, all within one deterministic budget of search states:

1. dataflow extraction (`dataflow.extract`) and algebraic simplification (`algebra`);
2. exact breadth-first scheduling for small blocks (`schedule.exact`: optimal);
3. beam scheduling over operation orders (`schedule.beam`) for the rest;
4. a short STOKE chain (`stoke.stoke`) started from the best schedule.

Returns the distinct candidates shorter than the baseline, best first. Every one of them is
still checked by the verifier before the optimizer may use it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from tasmopt.deadline import Deadline
from tasmopt.isa import IsaVariant
from tasmopt.search.algebra import simplify
from tasmopt.search.dataflow import UnsupportedBlock, extract
from tasmopt.search.schedule import Budget, beam, exact
from tasmopt.search.select import selections
from tasmopt.search.stoke import stoke
from tasmopt.tasm.program import Instr

__all__ = ["SearchConfig", "optimize_block"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SearchConfig:
    """Budget and knobs of one block search.

    Attributes:
        states: search states to expand in total (the deterministic budget).
        seed: seed of the stochastic parts.
        isa: instruction-set variant.
        exact_max_length: blocks up to this many instructions get the exact search first.
        stoke_share: fraction of the budget given to the STOKE chain (one proposal evaluated
            on the test inputs costs about one schedule state: ~50 us here).
        deadline: the request's deadline: every loop stops when it expires.
        dead_cells: private scratch cells dead after the block (`BlockTask.dead_cells`):
            stores to them may be dropped (`tasmopt.search.dataflow.extract`).
        dead_slots: op-stack slots dead after the block (`BlockTask.dead_slots`): the
            schedule may leave anything there (`tasmopt.search.dataflow.ANY`).
    """

    states: int = 20_000
    seed: int = 0
    isa: IsaVariant = "release"
    exact_max_length: int = 14
    stoke_share: float = 0.2
    deadline: Deadline | None = field(default=None, compare=False, hash=False)
    dead_cells: frozenset[int] = frozenset()
    dead_slots: frozenset[int] = frozenset()


def optimize_block(
    instrs: Sequence[Instr], cfg: SearchConfig = SearchConfig()
) -> list[list[Instr]]:
    """Cheaper equivalent candidates for a straight-line block, best first (may be empty)."""
    instrs = list(instrs)
    if len(instrs) < 2:
        return []
    try:
        raw = extract(instrs, cfg.isa, cfg.dead_cells)
        loose = extract(instrs, cfg.isa, cfg.dead_cells, cfg.dead_slots) if cfg.dead_slots else None
    except UnsupportedBlock:
        return []
    # the exact final stack first (half and a quarter of the budget, as without dead slots),
    # then, with dead slots, the final stack with `ANY` in them (the last quarter): a wider
    # problem is a harder one, so it adds candidates instead of replacing the exact ones
    # one extension-field instruction in place of its arithmetic, where the block is that
    flows = [simplify(raw), *selections(instrs, cfg.isa), raw]
    flows += [simplify(loose)] if loose is not None else []
    found: list[list[Instr]] = []
    sched_states = int(cfg.states * (1 - cfg.stoke_share))
    for k, flow in enumerate(flows):
        budget = Budget(sched_states // (2 if k == 0 else 4), cfg.deadline)
        if len(instrs) <= cfg.exact_max_length:
            part = budget.part(budget.left // 2)
            best = exact(flow, max_length=len(instrs) - 1, budget=part)
            budget.spend(budget.left // 2 - part.left)
            if best is not None:
                found.append(best)
        nodes = max(1, len(flow.needed_nodes()))
        width = max(2, min(64, budget.left // (nodes * 24)))
        cand = beam(flow, width=width, budget=budget)
        if cand is not None:
            found.append(cand)
    shortest = min(found, key=len) if found else instrs
    iterations = int(cfg.states * cfg.stoke_share)
    if iterations > 0:
        better = stoke(
            instrs,
            shortest,
            iterations=iterations,
            seed=cfg.seed,
            isa=cfg.isa,
            deadline=cfg.deadline,
            dead_slots=cfg.dead_slots,
        )
        if better is not None:
            found.append(better)
    out: list[list[Instr]] = []
    seen = set()
    for cand in sorted(found, key=lambda c: (len(c), [str(i) for i in c])):
        key = tuple(cand)
        if len(cand) < len(instrs) and key not in seen:
            seen.add(key)
            out.append(cand)
    return out[:4]
