"""Stack scheduling: re-emit a block's dataflow with as few instructions as possible.

Every instruction costs one clock cycle, so the cost of a schedule is its length: one
instruction per operation plus the ``dup``/``swap``/``pick``/``place``/``pop``/``push`` that
bring operands to the top and leave the final op stack as the baseline leaves it.

Two searches over the states ``(op stack region, operations done)``:

* `exact` — breadth-first over every instruction, memoized on states. All moves cost one
  cycle, so the first goal state found is optimal. Used when the state space is small.
* `beam` — a beam over the *order* of operations; between operations, a greedy fetch moves
  (``pick``) or copies (``dup``) each operand to the top depending on whether it is needed
  again; at the end a small exact search (or a greedy fallback) arranges the final stack.

Both respect the baseline's dataflow (`tasmopt.search.dataflow`): effectful operations keep
their order, guarded ones always run, dead pure ones are dropped, the stack never drops below
the baseline's low-water mark. Candidates still go through the verifier.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tasmopt.deadline import Deadline
from tasmopt.isa import names_where
from tasmopt.search.dataflow import ANY, Dataflow, Node
from tasmopt.tasm.program import Instr

__all__ = ["exact", "beam", "arrange", "Budget"]

_MAX_INDEX = 15
#: Data-movement instructions (ISA table ``is_stack_shuffle``).
SHUFFLES = names_where(lambda i: i.is_stack_shuffle)


class Budget:
    """An effort budget: counts expanded states (deterministic), and stops early when the
    request's `Deadline` expires (looked at every `DEADLINE_EVERY` states).

    Args:
        states: states to expand at most.
        deadline: the request's deadline, if any.
    """

    DEADLINE_EVERY = 64

    def __init__(self, states: int, deadline: Deadline | None = None) -> None:
        self.left = states
        self.deadline = deadline
        self._tick = 0

    def spend(self, n: int = 1) -> bool:
        """Take ``n`` states; False (and nothing taken) once the budget is exhausted or the
        deadline has passed."""
        if self.left < n:
            self.left = 0
            return False
        if self.deadline is not None:
            self._tick += n
            if self._tick >= self.DEADLINE_EVERY:
                self._tick = 0
                if self.deadline.expired:
                    self.left = 0
                    return False
        self.left -= n
        return True

    def part(self, states: int) -> Budget:
        """A sub-budget of ``states`` under the same deadline (nothing is taken here)."""
        return Budget(states, self.deadline)

    @property
    def exhausted(self) -> bool:
        return self.left <= 0


@dataclass(frozen=True)
class _Problem:
    entry: tuple[int, ...]
    final: tuple[int, ...]
    nodes: tuple[Node, ...]  # needed nodes, in block order
    constants: dict[int, int]
    low: int  # minimum stack length allowed (absolute, region)
    effect_order: tuple[int, ...]  # node ids of effectful needed nodes, in order


def _problem(df: Dataflow) -> _Problem:
    nodes = tuple(n for n in df.needed_nodes() if n.instr.name != "push")
    effects = tuple(n.id for n in nodes if n.effect is not None)
    return _Problem(
        tuple(df.entry), tuple(df.final), nodes, df.constants, len(df.entry) + df.low_water, effects
    )


def _fits(stack: Sequence[int], final: Sequence[int]) -> bool:
    """``stack`` is a goal for ``final``: the same length, equal values except where
    ``final`` says `ANY`."""
    return len(stack) == len(final) and all(f == ANY or s == f for s, f in zip(stack, final))


def _demand(p: _Problem, done: frozenset[int]) -> Counter:
    need: Counter = Counter(v for v in p.final if v != ANY)
    for n in p.nodes:
        if n.id not in done:
            need.update(n.inputs)
    return need


def _ready(
    p: _Problem, done: frozenset[int], stack: Sequence[int], produced: set[int]
) -> list[Node]:
    out = []
    next_effect = next((e for e in p.effect_order if e not in done), None)
    for n in p.nodes:
        if n.id in done:
            continue
        if n.effect is not None and n.id != next_effect:
            continue
        if all(v in p.constants or v in produced for v in n.inputs):
            out.append(n)
    return out


def _apply_node(stack: tuple[int, ...], n: Node) -> tuple[int, ...]:
    r = len(n.inputs)
    return stack[: len(stack) - r] + tuple(reversed(n.outputs))


def _operand_orders(n: Node) -> list[tuple[int, ...]]:
    if n.commutative and n.inputs[0] != n.inputs[1]:
        return [n.inputs, (n.inputs[1], n.inputs[0])]
    return [n.inputs]


def _produced(p: _Problem, done: frozenset[int]) -> set[int]:
    vals = set(p.entry)
    for n in p.nodes:
        if n.id in done:
            vals.update(n.outputs)
    return vals


# -- exact breadth-first search --------------------------------------------------------------


def exact(
    df: Dataflow, *, max_length: int, budget: Budget, shuffles: frozenset[str] = SHUFFLES
) -> list[Instr] | None:
    """The shortest schedule of at most ``max_length`` instructions, or None if there is none
    or the budget ran out first. ``shuffles`` limits the data-movement instructions used
    (e.g. without ``pick``/``place``, which TIR cannot express)."""
    p = _problem(df)
    start: tuple[Any, frozenset[int]] = (p.entry, frozenset())
    goal_done = frozenset(n.id for n in p.nodes)
    prev: dict[tuple, tuple[tuple, Instr] | None] = {start: None}
    frontier = deque([start])
    depth = {start: 0}
    while frontier:
        state = frontier.popleft()
        stack, done = state
        if done == goal_done and _fits(stack, p.final):
            return _path(prev, state)
        if depth[state] >= max_length:
            continue
        if not budget.spend():
            return None
        for ins, nxt in _moves(p, stack, done):
            if ins.name in SHUFFLES and ins.name not in shuffles:
                continue
            if nxt not in prev:
                prev[nxt] = (state, ins)
                depth[nxt] = depth[state] + 1
                frontier.append(nxt)
    return None


def _path(prev: dict, state: tuple) -> list[Instr]:
    out: list[Instr] = []
    while prev[state] is not None:
        state, ins = prev[state]
        out.append(ins)
    return out[::-1]


def _moves(p: _Problem, stack: tuple[int, ...], done: frozenset[int]):
    """Every useful instruction from a state, with the state it leads to."""
    need = _demand(p, done)
    have = Counter(stack)
    produced = _produced(p, done)
    n = len(stack)
    for node in _ready(p, done, stack, produced):
        r = len(node.inputs)
        if n - r + len(node.outputs) < p.low or n < r:
            continue
        for order in _operand_orders(node):
            if stack[n - r :] == tuple(reversed(order)):
                yield node.instr, (_apply_node(stack, node), done | {node.id})
                break
    for v in sorted({v for v in need if need[v] > have[v] and v in p.constants}):
        yield Instr("push", p.constants[v]), (stack + (v,), done)
    for i in range(min(n, _MAX_INDEX + 1)):
        v = stack[n - 1 - i]
        if need[v] > have[v]:
            yield Instr("dup", i), (stack + (v,), done)
    if n < len(p.final) and p.final[n] == ANY:  # a filler for a dead slot: any word will do
        yield Instr("push", 0), (stack + (ANY,), done)
    for i in range(1, min(n, _MAX_INDEX + 1)):
        s = list(stack)
        s[-1], s[-1 - i] = s[-1 - i], s[-1]
        yield Instr("swap", i), (tuple(s), done)
        if i > 1:
            s = list(stack)
            s.append(s.pop(-1 - i))
            yield Instr("pick", i), (tuple(s), done)
            s = list(stack)
            v = s.pop()
            s.insert(len(s) - i, v)
            yield Instr("place", i), (tuple(s), done)
    surplus: Counter[int] = Counter()
    for k in range(1, min(5, n - p.low) + 1):
        v = stack[n - k]
        surplus[v] += 1
        if have[v] - surplus[v] < need[v]:
            break
        yield Instr("pop", k), (stack[: n - k], done)


# -- beam over operation orders ----------------------------------------------------------------


def _fetch(
    stack: list[int],
    operands: Sequence[int],
    need: Counter,
    constants: dict[int, int],
    code: list[Instr],
) -> bool:
    """Bring ``operands`` (st0 first) to the top of ``stack``, deepest operand first.

    ``need`` counts every pending use of each value, this operation's included. A copy is
    *moved* (``pick``) when enough copies stay below for the uses after this operation, else
    *copied* (``dup``); constants are pushed when no copy is at hand. Mutates ``stack`` and
    ``code``; returns False if a value is gone or out of reach (deeper than st15).
    """
    r = len(operands)
    uses = Counter(operands)
    top = tuple(stack[len(stack) - r :]) if r else ()
    if r and top == tuple(reversed(operands)):
        below = Counter(stack[: len(stack) - r])
        if all(v in constants or below[v] >= need[v] - uses[v] for v in uses):
            return True
    for j in range(r - 1, -1, -1):
        v = operands[j]
        arranged = r - 1 - j  # operands already placed on top
        region = len(stack) - arranged
        future = need[v] - uses[v]
        copies = [k for k in range(region) if stack[k] == v]
        if copies and (len(copies) - 1 >= future or v in constants):
            pos = copies[-1]
            depth = len(stack) - 1 - pos
            if depth > _MAX_INDEX:
                if v not in constants:
                    return False
                code.append(Instr("push", constants[v]))
                stack.append(v)
                continue
            if depth:
                code.append(Instr("pick", depth))
                stack.append(stack.pop(pos))
            continue
        anywhere = [k for k in range(len(stack)) if stack[k] == v]
        if anywhere and len(stack) - 1 - anywhere[-1] <= _MAX_INDEX and v not in constants:
            code.append(Instr("dup", len(stack) - 1 - anywhere[-1]))
        elif v in constants:
            code.append(Instr("push", constants[v]))
        else:
            return False
        stack.append(v)
    return True


def _drop_dead_top(stack: list[int], need: Counter, low: int, code: list[Instr]) -> None:
    have = Counter(stack)
    k = 0
    gone: Counter = Counter()
    while k < len(stack) and len(stack) - (k + 1) >= low:
        v = stack[-1 - k]
        if have[v] - gone[v] - 1 < need[v]:
            break
        gone[v] += 1
        k += 1
    while k > 0:
        m = min(5, k)
        code.append(Instr("pop", m))
        del stack[-m:]
        k -= m


def beam(
    df: Dataflow, *, width: int, budget: Budget, finals: int = 4, rng: random.Random | None = None
) -> list[Instr] | None:
    """Best schedule found by a beam of ``width`` over operation orders (see module doc).

    Every child state generated costs one unit of ``budget``; the final arrangement of the
    ``finals`` most promising complete states shares what is left (at most 2000 units).
    With ``rng``, ties between equally short partial schedules are broken at random instead
    of by text (used to sample alternative schedules of the same cost)."""
    p = _problem(df)
    layer: list[tuple[int, tuple, tuple[int, ...], frozenset[int], tuple[Instr, ...]]] = [
        (0, (), p.entry, frozenset(), ())
    ]
    for _ in range(len(p.nodes)):
        seen: dict[tuple, int] = {}
        nxt = []
        if budget.exhausted:  # out of budget: finish greedily from the best state so far
            if budget.deadline is not None and budget.deadline.expired:
                return None  # out of time: nothing more
            layer, width = layer[:1], 1
            budget = budget.part(10 * (len(p.nodes) + 1) * (_MAX_INDEX + 2))
        for _cost, _tie, stack, done, code in layer:
            if budget.exhausted or not budget.spend():
                break
            produced = _produced(p, done)
            for node in _ready(p, done, stack, produced):
                for order in _operand_orders(node):
                    if budget.exhausted or not budget.spend():
                        break
                    s, c = list(stack), list(code)
                    need = _demand(p, done)
                    if not _fetch(s, order, need, p.constants, c):
                        continue
                    if len(s) - len(order) + len(node.outputs) < p.low:
                        continue
                    c.append(node.instr)
                    s = list(_apply_node(tuple(s), node))
                    done2 = done | {node.id}
                    need2 = _demand(p, done2)
                    _drop_dead_top(s, need2, p.low, c)
                    for s2, c2 in _with_burials(s, c, need2, p):
                        if budget.exhausted or not budget.spend():
                            break
                        key = (tuple(s2), done2)
                        if key in seen and seen[key] <= len(c2):
                            continue
                        seen[key] = len(c2)
                        tie = (rng.random(),) if rng is not None else tuple(str(i) for i in c2)
                        nxt.append((len(c2), tie, tuple(s2), done2, tuple(c2)))
        if not nxt:
            return None
        layer = heapq.nsmallest(width, nxt, key=lambda e: (e[0], len(e[2]), e[1]))
    best: list[Instr] | None = None
    closest = sorted(layer, key=lambda e: (e[0] + _distance(e[2], p.final), e[1]))[:finals]
    share = max(50, min(2000, budget.left) // max(1, len(closest)))
    for _cost, _tie, stack, _done, code in closest:
        part = budget.part(share)
        tail = arrange(stack, p.final, p.constants, p.low, budget=part)
        budget.spend(share - max(part.left, 0))
        if tail is None:
            continue
        cand = list(code) + tail
        if best is None or len(cand) < len(best):
            best = cand
    return best


def _with_burials(stack: list[int], code: list[Instr], need: Counter, p: _Problem):
    """The state as is, and, when the top value is only needed in the final stack (no
    operation uses it any more), the states that bury it with ``place k`` out of the way of
    the remaining operations."""
    yield stack, code
    if not stack:
        return
    v = stack[-1]
    ops_left = need[v] - p.final.count(v)  # ANY never equals a value
    if ops_left > 0 or v not in p.final:
        return
    for k in range(1, min(len(stack) - 1, _MAX_INDEX) + 1):
        s = list(stack)
        top = s.pop()
        s.insert(len(s) - k, top)  # place k: the old top becomes st_k
        yield s, code + [Instr("place", k)]


def _distance(stack: Sequence[int], final: Sequence[int]) -> int:
    """A cheap estimate of the instructions still needed to turn ``stack`` into ``final``."""
    keep = 0
    while keep < min(len(stack), len(final)) and final[keep] in (ANY, stack[keep]):
        keep += 1
    return (len(stack) - keep) + (len(final) - keep)


# -- final arrangement ----------------------------------------------------------------------


def arrange(
    stack: Sequence[int],
    final: Sequence[int],
    constants: dict[int, int],
    low: int,
    *,
    budget: Budget,
) -> list[Instr] | None:
    """Shuffle ``stack`` into ``final`` (both bottom..top) without going below ``low``
    elements: exact search within the budget, else a greedy sequence (fetch every value in
    order, then drop what is left below)."""
    stack, final = tuple(stack), tuple(final)
    if _fits(stack, final):
        return []
    if len(stack) <= 12:
        flow = Dataflow(list(stack), list(final), [], {}, constants, low - len(stack), 0)
        found = exact(flow, max_length=8, budget=budget)
        if found is not None:
            return found
    # the greedy pass needs values: a slot that may hold anything keeps what is there now
    # (or a copy of the top where the stack is shorter)
    if not stack and ANY in final:
        return None
    concrete = [
        f if f != ANY else (stack[j] if j < len(stack) else stack[-1]) for j, f in enumerate(final)
    ]
    return _greedy_arrange(list(stack), concrete, constants, low)


def _pops(n: int) -> list[Instr]:
    out = []
    while n > 0:
        out.append(Instr("pop", min(5, n)))
        n -= min(5, n)
    return out


def _greedy_arrange(
    stack: list[int], final: list[int], constants: dict[int, int], low: int
) -> list[Instr] | None:
    code: list[Instr] = []
    keep = 0
    while keep < min(len(stack), len(final)) and stack[keep] == final[keep]:
        keep += 1
    wanted = list(reversed(final[keep:]))
    if not _fetch(stack, wanted, Counter(wanted), constants, code):
        return None
    # stack = [final[:keep], leftovers..., final[keep:]]: drop the leftovers
    m = len(final) - keep
    left = len(stack) - len(final)
    if left < 0 or len(final) < low:
        return None
    if left and m == 1 and left <= _MAX_INDEX:
        code.append(Instr("swap", left))
        stack[-1], stack[-1 - left] = stack[-1 - left], stack[-1]
    elif left and m > 0:
        if m + left - 1 > _MAX_INDEX:
            return None
        for i in range(left):
            code.append(Instr("pick", m + i))
            stack.append(stack.pop(len(stack) - 1 - (m + i)))
    code += _pops(left)
    if left:
        del stack[-left:]
    return code if tuple(stack) == tuple(final) else None
