"""Function-level pass ``hot``: the straight-line runs of loop bodies searched again with a
deeper budget (issue 11 item 7, cost is what the user pays).

The block search splits a request's budget over its blocks by length
(`tasmopt.search.source`), so a loop body gets the share of any other run of its size,
though it runs once per iteration: a body of seven instructions run 512 times pays 3,584
cycles, the code around the loop a dozen. The function-level passes (loops, pointers,
unroll) also leave their new bodies to one search at that share. This pass spends more where
the cycles are: every straight-line run of a *loop section* (one whose last instruction may
recurse: ``recurse``, ``recurse_or_return``; ISA table) and of the sections such a loop
calls (its branch bodies, entered once per iteration that takes them) is searched again with
`HOT_FACTOR` times the request's search budget (`CompileOptions.search_budget_s`, converted
to a deterministic count of states; the search's own wall-clock guard and the request's
deadline still bound it).

Proof. Each run is replaced only by a candidate `check_block` proves equivalent to it (the
block sources' candidates, as for every block), so every path through the function computes
what it did. The rewritten function is then run against its reference on the verifier's
witnesses (`check_function`) and kept only when equivalent there, cheaper in cycles, and no
table is taller (design §2); otherwise it keeps what it had.
"""

from __future__ import annotations

from collections.abc import Sequence

from tasmopt.errors import TasmSyntaxError
from tasmopt.isa import IsaVariant, instruction_set
from tasmopt.module import ModuleText
from tasmopt.optimizer.inline import HOT_FACTOR, _reoptimize, _Run, _runs, deeper
from tasmopt.optimizer.loops import _instrs, _sections
from tasmopt.optimizer.state import FunctionState, VerifyBackend
from tasmopt.report import CompileOptions
from tasmopt.sources import SourceSet

__all__ = ["HOT_FACTOR", "hot_runs", "hot_stage"]


def hot_runs(lines: Sequence[str], isa: IsaVariant = "release") -> list[tuple[int, int]]:
    """The straight-line runs ``(start, end)`` (line indices, `_runs`) of one function's
    ``lines`` that lie in a loop section or in a section a loop section calls (module
    docstring), in text order."""
    table = instruction_set(isa)
    sections = _sections(lines)
    loops: set[str] = set()
    calls: dict[str, set[str]] = {}
    for label, start, end in sections:
        try:
            ins = [x for _, x in _instrs(lines, start + 1, end, isa)]
        except (TasmSyntaxError, ValueError):
            continue
        if ins and ins[-1].name in table and table[ins[-1].name].may_recurse:
            loops.add(label)
        calls[label] = {str(x.arg) for x in ins if x.name == "call"}
    hot = loops | {lab for lp in loops for lab in calls.get(lp, set())}
    spans = [(start, end) for label, start, end in sections if label in hot]
    return [r for r in _runs(lines, isa) if any(a <= r[0] and r[1] <= b for a, b in spans)]


def hot_stage(
    fns: list[FunctionState],
    ours: ModuleText,
    client: ModuleText | None,
    options: CompileOptions,
    sources: SourceSet,
    verify: VerifyBackend,
) -> None:
    """Search the loop bodies of every function worked on in this run again with
    `HOT_FACTOR` times the budget; a function keeps its result so far unless the rewritten
    one is equivalent on the verifier's witnesses, takes fewer cycles and raises no table."""
    run = _Run(fns, ours, client, options, sources, verify)
    deep = deeper(options)
    for f in run.workable(fns):
        cur = run.returned(f.name)
        spans = hot_runs(cur, options.isa)
        if not spans:
            continue
        cand = _reoptimize(f, cur, spans, deep, sources, verify)
        if cand == cur:
            continue
        best = run.measure(f, cur)
        if best is None:
            continue
        run.keep(f, cand, best, "hot loop bodies", "loop bodies searched deeper")
