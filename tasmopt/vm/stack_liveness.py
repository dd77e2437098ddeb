"""Dead op-stack slots: which values a program never reads again (design §2, issue 11 item 6).

A program keeps values on the op stack that it will only pop: a variable after its last use,
the copy of an argument the compiler kept "just in case". A straight-line run that leaves
such a slot holding something else changes nothing observable, so a rewrite of the run need
not rebuild it. This module *proves* which slots are dead at each point of one program, on
its own text, by a backward liveness analysis over op-stack slots (depth from the top,
``0`` = st0):

* **Instructions** move, copy, read and replace slots as the ISA table's slot flow says
  (`tasmopt.isa.slot_flow`). A slot is live before an instruction when the slot it moves or
  copies to is live after it, or when the instruction reads it and either one of its fresh
  results is live or the instruction has an effect beyond the op stack, can fail, or is
  control flow (a failure, a RAM access, an output and a branch all observe the value).
  Stack shuffles (``dup``, ``swap``, ``pick``, ``place``, ``pop``, ``push``) only move.
* **Calls** to a label of the program use the callee's *summary*: how deep below its entry
  it ever reaches (``reach``) and how it changes the stack length (``delta``), computed by a
  forward walk over every path of the callee (its own calls summarised in turn). The slots it
  may reach are live before the call; a deeper slot is live when its shifted slot is live
  after. A callee whose walk cannot bound it (a path whose stack length depends on how it
  was reached, a ``recurse`` at another length than its entry, a call into an external
  symbol or into a cycle of calls, a path that runs off the program) has no summary: every
  slot is live before a call to it.
* **Everything is live** at ``return``, ``recurse``, ``recurse_or_return`` and ``halt`` (a
  caller, the next iteration or the final state may read any slot), before an external
  call, and at a label's entry when control reaches it by falling through.
* ``skiz`` joins its two successors (the next instruction and the one after it): a slot is
  dead only if it is dead on both paths.

Soundness of its use (`tasmopt.vm.equivalence.check_aligned`): every value the program may
still observe — on the op stack at a return or halt, through an effect, a failure or a
branch — flows from slots this analysis marks live; so two states that differ only in dead
slots lead the program to the same observables, and a run of a rewrite may leave anything
in the slots dead after the baseline's run, provided the stack length is the same.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tasmopt.isa import IsaVariant, SlotFlow, instruction_set, slot_flow
from tasmopt.tasm.program import EXTERNAL_PREFIX, Program
from tasmopt.vm.scratch import Item, items_of_program

__all__ = ["Summary", "StackLiveness", "dead_slots", "of_program", "MAX_DEPTH"]

#: Dead sets are kept to slots above this depth (deeper ones count as live): a run can
#: address at most st15, and a bounded set keeps the analysis cheap.
MAX_DEPTH = 32

#: Every slot the analysis tracks, as a bit mask (bit j = slot j).
_ALL = (1 << MAX_DEPTH) - 1


@dataclass(frozen=True)
class Summary:
    """What a call to a label does to the op stack (for the caller's liveness).

    Attributes:
        reach: slots below the callee's entry top it may read, move or replace (st0 ..
            st(reach-1)); deeper slots pass through the call untouched.
        delta: change of the stack length from the call to its return.
    """

    reach: int
    delta: int


class StackLiveness:
    """Dead op-stack slots of one program (module docstring), analysed once.

    Args:
        items: the program's items (`tasmopt.vm.scratch.items_of_program`).
        isa: instruction-set variant.
    """

    def __init__(self, items: Sequence[Item], isa: IsaVariant = "release") -> None:
        self.items = list(items)
        self.table = instruction_set(isa)
        self.isa = isa
        self.labels = {arg: k for k, (name, arg) in enumerate(self.items) if name == "label"}
        self._summaries: dict[str, Summary | None] = {}
        n = len(self.items)
        self._frame_of, self._sites = self._frames()
        self._dead: list[int] = [_ALL] * n + [0]  # bit masks, bit j = slot j dead
        self._solved: set[int] = {n}  # items whose mask is final (`_solve`)

    def dead_before(self, index: int) -> frozenset[int]:
        """Slots (depth from the top) dead just before ``items[index]`` executes (after
        ``items[index - 1]`` when control falls through); ``index == len(items)`` is the end
        of the program (nothing dead)."""
        if index not in self._solved:
            self._solve(index)
        return _slots(self._dead[index])

    def _flow(self, name: str, arg: int | str | None) -> SlotFlow:
        """`tasmopt.isa.slot_flow` of one item (a field-element argument is no count)."""
        small = (
            arg if isinstance(arg, int) and self.table[name].arg_kind != "field_element" else None
        )
        return slot_flow(name, small, self.isa)

    # -- callee summaries (forward) -----------------------------------------------------------

    def summary(self, label: str) -> Summary | None:
        """The `Summary` of a call to ``label``, or None when no bound is proven."""
        if label in self._summaries:
            return self._summaries[label]
        self._summaries[label] = None  # a call cycle reaching this label again: unbounded
        result = self._walk(label)
        self._summaries[label] = result
        return result

    def _walk(self, label: str) -> Summary | None:
        start = self.labels.get(label)
        if start is None:
            return None
        height: dict[int, int] = {}
        todo = [(start, 0)]
        reach = 0
        delta: int | None = None
        while todo:
            k, h = todo.pop()
            if k in height:
                if height[k] != h:
                    return None
                continue
            if k >= len(self.items):
                return None  # runs off the program
            height[k] = h
            name, arg = self.items[k]
            if name == "label":
                todo.append((k + 1, h))
                continue
            if name not in self.table:
                return None
            spec = self.table[name]
            if name == "call":
                if not isinstance(arg, str) or arg.startswith(EXTERNAL_PREFIX):
                    return None
                callee = self.summary(arg)
                if callee is None:
                    return None
                reach = max(reach, callee.reach - h)
                todo.append((k + 1, h + callee.delta))
                continue
            if spec.ends_section:  # return, recurse, recurse_or_return, halt
                touch = max([0, *(r + 1 for r in self._flow(name, None).reads)])
                reach = max(reach, touch - h)
                if spec.may_recurse and h != 0:
                    return None  # an iteration that shifts the stack: no fixed bound
                if spec.may_return:
                    if delta is not None and delta != h:
                        return None
                    delta = h
                continue
            flow = self._flow(name, arg)
            touch = max([flow.consumed, *(r + 1 for r in flow.reads)])
            reach = max(reach, touch - h)
            h2 = h + flow.delta
            todo.append((k + 1, h2))
            if spec.may_skip_next:
                if k + 1 >= len(self.items) or self.items[k + 1][0] == "label":
                    return None
                todo.append((k + 2, h2))
        if delta is None:
            return None
        return Summary(max(reach, 0), delta)

    # -- frames and call sites ----------------------------------------------------------------

    def _frames(self) -> tuple[dict[int, set[str]], dict[str, list[int]]]:
        """Which call frames each item runs in (the call-target labels whose frame reaches it
        without a call or a return in between), and every call site of each target."""
        sites: dict[str, list[int]] = {}
        for k, (name, arg) in enumerate(self.items):
            if name == "call" and isinstance(arg, str) and arg in self.labels:
                sites.setdefault(arg, []).append(k)
        frames: dict[int, set[str]] = {}
        for label in sites:
            seen: set[int] = set()
            todo = [self.labels[label]]
            while todo:
                k = todo.pop()
                if k in seen or k >= len(self.items):
                    continue
                seen.add(k)
                frames.setdefault(k, set()).add(label)
                name = self.items[k][0]
                if name in self.table and self.table[name].ends_section:
                    continue
                todo.append(k + 1)
                if name in self.table and self.table[name].may_skip_next:
                    todo.append(k + 2)
        return frames, sites

    # -- dead slots (backward, to a fixpoint) -------------------------------------------------

    def _deps(self, k: int) -> list[int]:
        """The indices whose masks `_before` reads for item ``k``: the next item, the one
        after it when ``k`` may skip its next, and for a frame exit what is dead after each
        call site of its frames (``return``) or at each frame's first item (``recurse``)."""
        n = len(self.items)
        if k >= n:
            return []
        name = self.items[k][0]
        if name == "label":
            return [k + 1]
        if name not in self.table or self.table[name].halts:
            return []  # nothing dead before it, whatever follows
        spec = self.table[name]
        out = [] if spec.ends_section else [k + 1]  # a frame exit reads its exits instead
        if spec.may_skip_next and k + 2 <= n:
            out.append(k + 2)
        if spec.ends_section:
            for label in self._frame_of.get(k, ()):
                if spec.may_return:
                    out.extend(c + 1 for c in self._sites[label])
                if spec.may_recurse:
                    out.append(self.labels[label])
        return out

    def _solve(self, index: int) -> None:
        """Solve the dead masks of ``index`` and of every item its mask depends on
        (`_deps`, transitively), backward to a fixpoint: the greatest solution (the least
        liveness), from "everything dead" swept backward until nothing changes. A ``return``
        sees what is dead after *every* call site of its frame (nothing, for the harness's
        own call: it halts), a ``recurse`` what is dead at its frame's first instruction.

        On demand: the masks of a set of items closed under `_deps` are the same whether
        the rest of the program is solved or not (their equations read only that set), so
        a function's proofs solve its own items and not its callees' bodies (a call reads
        the callee's `Summary`, not its items). Items already solved are final."""
        deps: dict[int, list[int]] = {}  # the region: item -> what its mask reads
        todo = [index]
        while todo:
            k = todo.pop()
            if k in deps or k in self._solved:
                continue
            deps[k] = self._deps(k)
            todo.extend(deps[k])
        readers: dict[int, list[int]] = {}
        for k, ds in deps.items():
            for d in ds:
                if d in deps:
                    readers.setdefault(d, []).append(k)
        dead = self._dead
        # a worklist, latest item first (the order of a backward sweep): an item is looked
        # at again only when something its `_before` reads has changed
        heap = [-k for k in deps]
        heapq.heapify(heap)
        queued = set(deps)
        while heap:
            k = -heapq.heappop(heap)
            queued.discard(k)
            new = self._before(k, dead)
            if new == dead[k]:
                continue
            dead[k] = new
            for r in readers.get(k, ()):
                if r not in queued:
                    queued.add(r)
                    heapq.heappush(heap, -r)
        self._solved.update(deps)

    def _exit(self, k: int, dead: list[int], *, returns: bool) -> int:
        """Dead after control leaves item ``k``'s frame: by ``return`` (after each call site
        of each frame) or by ``recurse`` (at each frame's start); nothing outside a frame."""
        frames = self._frame_of.get(k)
        if not frames:
            return 0
        out: int | None = None
        for label in frames:
            if returns:
                for c in self._sites[label]:
                    out = dead[c + 1] if out is None else out & dead[c + 1]
            else:
                start = dead[self.labels[label]]
                out = start if out is None else out & start
        return out or 0

    def _before(self, k: int, dead: list[int]) -> int:
        """The dead mask before item ``k`` from the masks after it (the transfer function;
        the module docstring says why each slot is live)."""
        name, arg = self.items[k]
        after = dead[k + 1]
        if name == "label":
            return after
        if name not in self.table or self.table[name].halts:
            return 0
        spec = self.table[name]
        if spec.ends_section:  # leaves the frame: returns, recurses or both
            left: int | None = None
            if spec.may_return:
                left = self._exit(k, dead, returns=True)
            if spec.may_recurse:
                again = self._exit(k, dead, returns=False)
                left = again if left is None else left & again
            reads = _mask(self._flow(name, None).reads)  # recurse_or_return: st5, st6
            return (left or 0) & ~reads
        if name == "call":
            if not isinstance(arg, str) or arg.startswith(EXTERNAL_PREFIX):
                return 0
            callee = self.summary(arg)
            if callee is None:
                return 0
            # slot j before is slot j + delta after; the callee may reach st0 .. st(reach-1)
            return _shift(after, callee.delta) & ~_below(callee.reach)
        flow = self._flow(name, arg)
        if spec.may_skip_next:
            nxt = self.items[k + 1][0] if k + 1 < len(self.items) else "label"
            after = after & dead[k + 2] if nxt != "label" else 0
        observing = not spec.is_stack_shuffle and (
            spec.has_side_effect or spec.can_fail or spec.is_control_flow
        )
        live_moved = 0
        fresh_live = False
        for i, src in enumerate(flow.src):
            if not after >> i & 1:  # slot i after is live: so is where it came from
                if src >= 0:
                    live_moved |= 1 << src
                else:
                    fresh_live = True
        blocked = live_moved | (_mask(flow.reads) if observing or fresh_live else 0)
        consumed = _below(flow.consumed)
        # the slots it consumes are dead unless moved to a live slot or read for a use; the
        # ones below them are the slots after, shifted back by the stack's change
        out = (consumed | (_shift(after, flow.delta) & ~consumed)) & ~blocked
        return out & _ALL


def _mask(slots: Iterable[int]) -> int:
    """Bit mask of ``slots`` (those outside 0 .. MAX_DEPTH-1 left out)."""
    m = 0
    for j in slots:
        if 0 <= j < MAX_DEPTH:
            m |= 1 << j
    return m


def _slots(mask: int) -> frozenset[int]:
    """The slots of a bit mask."""
    return frozenset(j for j in range(MAX_DEPTH) if mask >> j & 1)


def _below(n: int) -> int:
    """Mask of slots 0 .. n-1."""
    return (1 << max(n, 0)) - 1


def _shift(after: int, delta: int) -> int:
    """Slots ``i - delta`` for every slot ``i`` of ``after`` that stays at a depth >= 0 and
    below MAX_DEPTH: where a slot after an instruction that changes the stack length by
    ``delta`` was before it."""
    return (after >> delta if delta >= 0 else after << -delta) & _ALL


def dead_slots(items: Sequence[Item], index: int, isa: IsaVariant = "release") -> frozenset[int]:
    """`StackLiveness.dead_before` for one point (analyses the program each call)."""
    return StackLiveness(items, isa).dead_before(index)


#: `Program._cache` key of the program's analysis.
_CACHE_KEY = "stack_liveness"


def of_program(program: Program) -> StackLiveness:
    """`StackLiveness` of a parsed program (its items, its ISA variant), analysed once per
    program object: the optimizer's block stage and every `check_aligned` against the same
    reference share it."""
    live = program._cache.get(_CACHE_KEY)
    if live is None:
        live = program._cache.setdefault(
            _CACHE_KEY, StackLiveness(items_of_program(program), program.isa)
        )
    return live  # type: ignore[no-any-return]  # the cache holds what this function stored
