"""Function-level pass ``unroll``: counted loops with a short constant trip count replaced
by copies of their body (issue 11, loops: "unrolling short constant-trip loops when it pays
in cycles").

The lowering's counted loop (spec/tir.md §3.4) spends seven cycles of every iteration on
its counter and the jumps, and a ``call``/``return`` pair on entering and leaving::

    call L                          L: dup 0  push 0  eq  skiz  return     // c == 0: leave
                                       addi -1                             // c -= 1
                                       B                                   // the body
                                       recurse

When a call site starts the counter at a constant ``k`` (at most `MAX_TRIPS`), the call is
replaced by ``k`` copies of ``addi -1; B``; the block sources then fold the counter's
constants and schedule the copies as one straight-line run. A loop section no call is left
to is deleted.

Proof. `tasmopt.optimizer.loops.loop_shapes` establishes, by symbolic execution of every
path through ``B`` (exact polynomial identities over the Goldilocks field), that ``B`` leaves
the counter on top, in place and unread, with no net stack effect; that ``L`` is entered only
by ``call`` lines of this function (no fall-through into it, no other function calls it: the
caller drops loops others call), and that no ``skiz`` may skip a call site. Symbolic execution
of the site's straight-line prefix establishes ``c = k`` (a constant polynomial, so on every
input). Then the loop runs exactly ``k`` iterations: before iteration ``j`` (1-based) the
counter is ``k - j + 1``, which is not 0 since ``0 < k - j + 1 <= k < p``; after ``k`` it is 0
and ``L`` returns. Each iteration executes ``addi -1; B`` on the same state as the copy, so
inputs, outputs, RAM, the sponge and failures happen in the same order on the same values;
only the jump stack (not observable, design §2), the clock cycles and the program's length
differ. Every unrolled function is then run against its reference on the verifier's
witnesses (`check_function`) and kept only when equivalent there, cheaper in cycles, with no
execution table taller and no padded height larger, its own or a caller's (`refusal` with
``longer``: the copies lengthen the program). Fail closed: any condition not established
leaves the loop.

Cost model: the copies add ``k * |B|`` words to the program and remove ``7k + 6`` cycles of
loop control (plus whatever the block sources fold); a loop is a candidate only while
``k <= MAX_TRIPS`` and the copies stay under `MAX_WORDS`, and the measurement decides.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from tasmopt.errors import TasmSyntaxError
from tasmopt.isa import IsaVariant, P
from tasmopt.module import ModuleText
from tasmopt.optimizer.inline import INDENT, _reoptimize, _Run, apply_edits
from tasmopt.optimizer.loops import LoopShape, _at, _site_run, called_labels, loop_shapes
from tasmopt.optimizer.state import FunctionState, VerifyBackend
from tasmopt.report import CompileOptions
from tasmopt.sources import SourceSet

__all__ = ["MAX_TRIPS", "MAX_WORDS", "Unrolling", "find_unrollings", "unroll", "unroll_stage"]

log = logging.getLogger(__name__)

#: Longest constant trip count unrolled.
MAX_TRIPS = 16
#: Most words the copies of one loop may add to the program.
MAX_WORDS = 160


@dataclass(frozen=True)
class Unrolling:
    """A counted loop (`LoopShape`) and the constant counter at each of its call sites.

    Attributes:
        shape: the loop. trips: line index of a call site -> its constant trip count ``k``.
        whole: every call site of the loop is unrolled (the section can be deleted).
    """

    shape: LoopShape
    trips: dict[int, int]

    @property
    def whole(self) -> bool:
        return set(self.trips) == set(self.shape.sites)


def _constant_counter(lines: Sequence[str], site: int, isa: IsaVariant) -> int | None:
    """``k`` if the straight-line prefix of the ``call`` at line ``site`` leaves the counter
    (st0) equal to the constant ``k`` on every input, with ``0 <= k <= MAX_TRIPS``."""
    run = _site_run(lines, site, isa)
    if run is None:
        return None
    c = _at(run[1], 0)
    if not c.is_const:
        return None
    k = c.const % P
    return k if k <= MAX_TRIPS else None


def find_unrollings(
    lines: Sequence[str], others: Sequence[Sequence[str]], isa: IsaVariant = "release"
) -> list[Unrolling]:
    """The loops of one function's ``lines`` with call sites to unroll (module docstring);
    ``others``: the other functions' lines (a loop one of them calls is left alone)."""
    called = called_labels(others)
    out = []
    for shape in loop_shapes(lines, isa):
        if shape.label in called:
            continue
        trips = {}
        for site in shape.sites:
            k = _constant_counter(lines, site, isa)
            if k is not None:
                trips[site] = k
        words = sum(k * (len(shape.body) + 1) for k in trips.values())
        if trips and words <= MAX_WORDS:
            out.append(Unrolling(shape, trips))
    return out


def unroll(
    lines: Sequence[str], unrollings: Sequence[Unrolling]
) -> tuple[list[str], list[tuple[int, int]]]:
    """``lines`` with every call site of ``unrollings`` replaced by its copies (and the loop
    sections no call is left to deleted), and the line spans of the copies."""
    edits: list[tuple[int, int, list[str]]] = []
    for u in unrollings:
        body = [INDENT + "addi -1"] + [INDENT + str(x) for x in u.shape.body]
        for site, k in u.trips.items():
            edits.append((site, site + 1, body * k))
        if u.whole:
            edits.append((u.shape.start, u.shape.end, []))
    out, spans = apply_edits(lines, edits)
    # where empty copies were: the line before them, so that their run is searched again
    return out, sorted((a - 1, a) if a == b and a > 0 else (a, b) for a, b in spans if b > 0)


def unroll_stage(
    fns: list[FunctionState],
    ours: ModuleText,
    client: ModuleText | None,
    options: CompileOptions,
    sources: SourceSet,
    verify: VerifyBackend,
) -> None:
    """Unroll the short constant-trip loops of every function worked on in this run; a
    function keeps its result so far unless the unrolled one is equivalent on the verifier's
    witnesses, takes fewer cycles and raises no execution table nor the padded height."""
    run = _Run(fns, ours, client, options, sources, verify)
    for f in run.workable(fns):
        cur = run.returned(f.name)
        try:
            found = find_unrollings(cur, run.others(f), options.isa)
        except TasmSyntaxError:
            continue
        if not found:
            continue
        best = run.measure(f, cur)
        if best is None:
            continue
        cand, spans = unroll(cur, found)
        touched = [(x, x + 1) for a, b in spans for x in range(a, b)]
        cand = _reoptimize(f, cand, touched, options, sources, verify)
        names = ", ".join(u.shape.label for u in found)
        trips = ", ".join(str(k) for u in found for k in u.trips.values())
        run.keep(
            f,
            cand,
            best,
            f"unroll {names}",
            f"unroll {names} ({trips} trips)",
            longer=True,  # the copies lengthen the program
        )
