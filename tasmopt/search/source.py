"""The block search as a candidate source of `tasmopt.optimizer.compile` (name ``search``).

Each block gets a share of the request's budget (``CompileOptions.search_budget_s``,
converted to a deterministic count of search states so that a seed and a budget give the same
candidates on any machine; a wall-clock guard stops runaway work). Results are cached by the
block's baseline text, so a repeated request costs nothing.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence

from tasmopt.deadline import Deadline
from tasmopt.report import CompileOptions
from tasmopt.search.optimize import SearchConfig, optimize_block
from tasmopt.sources import BlockTask
from tasmopt.tasm.program import Instr

__all__ = ["SearchSource", "STATES_PER_SECOND", "MAX_SEARCH_INSTRS"]

log = logging.getLogger(__name__)

#: Longest block the search works on, instructions: each STOKE proposal runs the simulator
#: on every test input, so a 10,000-instruction block costs seconds per proposal.
MAX_SEARCH_INSTRS = 400

#: Conversion of a time budget into search states (calibrated on this project's CI machine:
#: one state is one expansion of the exact search or of the beam).
STATES_PER_SECOND = 20_000


class SearchSource:
    """Candidate source running `optimize_block` on every block of a request."""

    name = "search"

    def __init__(self, cache_size: int = 4096) -> None:
        self._cache: OrderedDict[tuple, list[list[Instr]]] = OrderedDict()
        self._lock = threading.Lock()
        self._cache_size = cache_size

    def propose(
        self, tasks: Sequence[BlockTask], options: CompileOptions
    ) -> list[list[list[Instr]]]:
        if not tasks:
            return []
        total = max(1, sum(len(t.baseline) for t in tasks if len(t.baseline) <= MAX_SEARCH_INSTRS))
        states = int(options.search_budget_s * STATES_PER_SECOND)
        # the search's own budget, within the request's deadline
        stop = Deadline(3 * options.search_budget_s + 1.0, within=options.deadline)
        out: list[list[list[Instr]]] = []
        for task in tasks:
            if len(task.baseline) > MAX_SEARCH_INSTRS:
                out.append([])  # one proposal of a long block costs a simulator run per test
                continue
            share = max(200, states * len(task.baseline) // total)
            key = (
                tuple(str(i) for i in task.baseline),
                options.isa,
                options.seed,
                share,
                task.dead_cells,
                task.dead_slots,
            )
            with self._lock:
                hit = self._cache.get(key)
                if hit is not None:
                    self._cache.move_to_end(key)
            if hit is None:
                if stop.expired:
                    out.append([])
                    continue
                cfg = SearchConfig(
                    states=share,
                    seed=options.seed,
                    isa=options.isa,
                    deadline=stop,
                    dead_cells=frozenset(task.dead_cells),
                    dead_slots=frozenset(task.dead_slots),
                )
                try:
                    hit = optimize_block(list(task.baseline), cfg)
                except Exception:  # the search must never break a compile
                    log.exception("search failed on block %s of %s", task.index, task.function)
                    hit = []
                if not stop.expired:  # a search cut short is not the block's answer: no cache
                    with self._lock:
                        self._cache[key] = hit
                        if len(self._cache) > self._cache_size:
                            self._cache.popitem(last=False)
            out.append(hit)
        return out
