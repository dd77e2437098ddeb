"""Next-use positions of a function's variables, for the builder's ``next-use`` spill
policy (issue 11, item 3: spill the value used furthest in the future, drop dead ones).

Positions number the function's statements and block tails in the order the builder builds
them (pre-order: an ``if`` before its branches, a branch before the next statement). A
variable is *used* at a position when the statement or tail there reads it or assigns to it
(any field path; the condition, bounds and scrutinee belong to the compound statement's own
position). A ``for`` loop adds one more position after its body, its *back edge*: every
variable declared outside the loop and used inside it, and the loop variable (the builder
increments it there), is also used at the back edge, so it stays live for the whole body.

`Liveness.next_use` answers "the first position >= p that uses v" on a path through p: the
positions of a later branch of the same ``if``/``match`` do not count from inside an earlier
one (only one of them runs); ``None`` means v is dead from p on. Variables the analysis has not seen (the builder's own temporaries: loop
counters, match scrutinees, stashed branch values) are never reported dead: callers treat
them as used now.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any

from tasmopt.frontend import ast as A
from tasmopt.frontend.symbols import Var, VarRef

__all__ = ["Liveness"]

#: fields that point outside the function body or hold only types and positions, or repeat
#: another field's expressions (``StructLit.ordered``: its ``fields`` in layout order;
#: counted twice, no read of a struct literal would ever be the last one)
_SKIP = frozenset(
    {"pos", "ty", "target", "resolved", "generics", "ann", "name_pos", "var_pos", "ordered"}
)


class Liveness:
    """Use positions of every variable of one function body.

    Args:
        body: the checked function body (``PathExpr.ref``, ``LetStmt.vars``,
            ``AssignStmt.vars`` and ``ForStmt.loop_var`` set by the checker).
        params: the function's parameter variables (known, dead unless used).
    """

    def __init__(self, body: A.Block, params: Iterable[Var] = ()) -> None:
        self.position: dict[int, int] = {}  # id(statement or tail expression) -> position
        self.end: dict[int, int] = {}  # id(statement) -> first position after it
        self.uses: dict[Var, list[int]] = {v: [] for v in params}
        #: per position, the variables it reads in the order of the walk (evaluation order
        #: for operands and arguments; source order for a struct literal's fields)
        self.order: dict[int, list[Var]] = {}
        #: (a0, a1, b0, b1): positions a0..a1-1 (a branch) never run before b0..b1-1 (a
        #: later branch of the same ``if``/``match``) on one path
        self.exclusive: list[tuple[int, int, int, int]] = []
        self._n = 0
        self._block(body)
        for positions in self.uses.values():
            positions.sort()

    # -- queries ------------------------------------------------------------------------------

    def at(self, node: object) -> int | None:
        """The position of a statement or block tail of this body, else None."""
        return self.position.get(id(node))

    def after(self, stmt: object) -> int | None:
        """The first position after a statement of this body (its branches included)."""
        return self.end.get(id(stmt))

    def known(self, var: Var) -> bool:
        return var in self.uses

    def count_at(self, var: Var, at: int) -> int:
        """How many uses (occurrences) of ``var`` the position ``at`` has."""
        positions = self.uses[var]
        return bisect.bisect_right(positions, at) - bisect.bisect_left(positions, at)

    def within(self, var: Var, at: int, done: int) -> float:
        """Where the next read of ``var`` falls inside position ``at`` once ``done`` of its
        reads there are done: a fraction in (0, 1] of the position's reads (1 when it has no
        further read there). For choosing spill victims only: an estimate, never a proof."""
        reads = self.order.get(at, [])
        seen = 0
        for k, v in enumerate(reads):
            if v is var:
                if seen == done:
                    return (k + 1) / (len(reads) + 1)
                seen += 1
        return 1.0

    def next_after(self, var: Var, at: int) -> int | None:
        """First position after ``at`` that uses ``var`` on a path through ``at`` (from an
        ``if`` condition both branches are on such paths; from inside a branch the later
        branches are not); None when this position's reads are its last."""
        positions = self.uses[var]
        return self._on_path(positions, bisect.bisect_right(positions, at), at)

    def next_use(self, var: Var, at: int) -> int | None:
        """First position >= ``at`` that uses ``var``; None when it is dead from ``at`` on.

        Raises:
            KeyError: ``var`` is not a variable of this body (see `known`).
        """
        positions = self.uses[var]
        return self._on_path(positions, bisect.bisect_left(positions, at), at)

    def _on_path(self, positions: list[int], i: int, at: int) -> int | None:
        """The first of ``positions[i:]`` not in a later branch of an ``if``/``match`` whose
        earlier branch holds ``at``."""
        skip = [(b0, b1) for a0, a1, b0, b1 in self.exclusive if a0 <= at < a1]
        for q in positions[i:]:
            if not any(b0 <= q < b1 for b0, b1 in skip):
                return q
        return None

    # -- the walk -----------------------------------------------------------------------------

    def _new(self, node: object | None) -> int:
        p = self._n
        self._n += 1
        if node is not None:
            self.position[id(node)] = p
        return p

    def _use(self, var: Var | None, p: int) -> None:
        if var is not None:
            self.uses.setdefault(var, []).append(p)
            self.order.setdefault(p, []).append(var)

    def _block(self, b: A.Block) -> None:
        for s in b.stmts:
            self._stmt(s)
        if b.tail is not None:
            self._mark(b.tail, self._new(b.tail))

    def _stmt(self, s: Any) -> None:
        p = self._new(s)
        if isinstance(s, A.IfStmt):
            self._mark(s.cond, p)
            t0 = self._n
            self._block(s.then)
            if s.els is not None:
                e0 = self._n
                self._block(s.els)
                self.exclusive.append((t0, e0, e0, self._n))
        elif isinstance(s, A.MatchStmt):
            self._mark(s.scrutinee, p)
            ranges = []
            for arm in s.arms:
                a0 = self._n
                self._block(arm.body)
                ranges.append((a0, self._n))
            for k, (a0, a1) in enumerate(ranges):
                for b0, b1 in ranges[k + 1 :]:
                    self.exclusive.append((a0, a1, b0, b1))
        elif isinstance(s, A.ForStmt):
            self._mark(s.start, p)
            self._mark(s.end, p)
            self._use(s.loop_var, p)
            first = self._n
            self._block(s.body)
            back_edge = self._new(None)
            inner = set(_declared(s.body))
            for var, positions in self.uses.items():
                if var not in inner and any(first <= q < back_edge for q in positions):
                    positions.append(back_edge)
            self._use(s.loop_var, back_edge)
        elif isinstance(s, A.LetStmt):
            self._mark(s.value, p)
            for v in s.vars:
                if v is not None:
                    self.uses.setdefault(v, [])
        else:
            self._mark(s, p)
        self.end[id(s)] = self._n

    def _mark(self, e: object, p: int) -> None:
        for v in _vars(e):
            self._use(v, p)


def _vars(node: object) -> Iterator[Var]:
    """Every variable an expression or simple statement reads or assigns (not descending
    into nested blocks, which have positions of their own)."""
    if isinstance(node, Var):
        yield node
    elif isinstance(node, VarRef):
        yield node.var
    elif isinstance(node, list | tuple):
        for x in node:
            yield from _vars(x)
    elif dataclasses.is_dataclass(node) and not isinstance(node, A.Block | type):
        for f in dataclasses.fields(node):
            if f.name not in _SKIP:
                yield from _vars(getattr(node, f.name))


def _declared(b: A.Block) -> Iterator[Var]:
    """Variables declared anywhere inside a block (``let`` names and loop variables)."""
    for s in b.stmts:
        if isinstance(s, A.LetStmt):
            yield from (v for v in s.vars if v is not None)
        elif isinstance(s, A.IfStmt):
            yield from _declared(s.then)
            if s.els is not None:
                yield from _declared(s.els)
        elif isinstance(s, A.MatchStmt):
            for arm in s.arms:
                yield from _declared(arm.body)
        elif isinstance(s, A.ForStmt):
            if s.loop_var is not None:
                yield s.loop_var
            yield from _declared(s.body)
