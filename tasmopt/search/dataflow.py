"""The dataflow graph of a straight-line block: what it computes, without how it shuffles.

A value-numbering run over the block's instructions: every op-stack slot holds a value id;
``dup``/``swap``/``pick``/``place``/``pop`` only move ids, every other instruction becomes a
`Node` that consumes the slots it reads and produces fresh values. Pure nodes are
hash-consed (common subexpressions merge), constants are values of their own, and effectful
nodes (input, output, RAM, sponge) keep their original relative order. The result is what the
scheduler re-emits with cheaper stack traffic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tasmopt.isa import IsaVariant, P, instruction_set, names_where
from tasmopt.tasm.program import Instr

__all__ = [
    "Node",
    "Dataflow",
    "extract",
    "UnsupportedBlock",
    "ANY",
    "COMMUTATIVE",
    "EFFECTS",
    "GUARDED",
    "RAM_WORDS",
]

#: The value of a final-stack slot whose value does not matter: a slot dead after the block
#: (`tasmopt.vm.stack_liveness`). No node produces it; a schedule may leave anything there.
ANY = -1
#: Deepest slot a schedule can address (``dup 15``, ``swap 15``).
_MAX_INDEX = 15

#: Binary instructions whose two operands may be swapped (ISA table ``commutative``).
COMMUTATIVE = names_where(lambda i: i.commutative)
#: Instructions with an effect outside the op stack; they keep their relative order
#: (ISA table ``has_side_effect``).
EFFECTS = names_where(lambda i: i.has_side_effect)
#: Pure instructions that can fail (u32 checks, zero checks, asserts): never dropped
#: (ISA table ``is_guarded``).
GUARDED = names_where(lambda i: i.is_guarded)

#: Instructions that read or rewrite slots below what they pop (Triton VM spec §5.10,
#: §5.5): ``(reach, passthrough)`` — the node consumes ``reach`` slots and produces
#: ``reach + delta``; ``passthrough`` maps output positions to input positions they keep.
_REACH: dict[str, tuple[int, dict[int, int]]] = {
    "assert_vector": (10, {k: k + 5 for k in range(5)}),
    "sponge_absorb_mem": (5, {}),
    "merkle_step": (6, {}),
    "merkle_step_mem": (8, {6: 6}),
    "xx_dot_step": (5, {}),
    "xb_dot_step": (5, {}),
    "b_horner_step": (10, {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 6: 6}),
    "x_horner_step": (10, {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 6: 6}),
}


#: ``read_mem n`` / ``write_mem n`` (ISA table: RAM at the pointer on st0, argument 1..5).
RAM_WORDS = names_where(lambda i: i.accesses_ram and i.arg_kind == "n_1_5")
#: RAM word instructions that only read: their "effect" is a RAM table row, nothing a
#: program can observe, so one whose outputs are all unused is dropped like a pure node.
_PLAIN_READS = names_where(lambda i: i.name in RAM_WORDS and not i.writes_ram and not i.can_fail)


class UnsupportedBlock(Exception):
    """The fragment contains control flow or something else the search does not handle."""


@dataclass(frozen=True)
class Node:
    """One operation of the block.

    Attributes:
        id: node index (topological: inputs come from lower ids).
        instr: the instruction that performs it (``push c`` for constants).
        inputs: value ids consumed, st0 first.
        outputs: value ids produced, st0 first (after the instruction).
        effect: position in the block's effect order, or None for pure nodes.
        guarded: may fail, so it must run even if its results are unused.
    """

    id: int
    instr: Instr
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    effect: int | None = None
    guarded: bool = False

    @property
    def commutative(self) -> bool:
        return self.instr.name in COMMUTATIVE


@dataclass
class Dataflow:
    """A block's dataflow.

    Attributes:
        entry: value ids of the entry stack region, bottom..top (``entry[-1]`` was st0).
        final: value ids of the final stack region, bottom..top; below both regions the
            stack is untouched. `ANY` marks a slot whose final value does not matter.
        nodes: operations in the block's order.
        producer: value id -> (node id, output index); entry values are absent.
        constants: value id -> field element, for values made by ``push``.
        low_water: lowest stack length relative to the entry any shrinking instruction
            reached (<= 0); a schedule must not go lower.
        length: instructions in the block.
    """

    entry: list[int]
    final: list[int]
    nodes: list[Node]
    producer: dict[int, tuple[int, int]] = field(default_factory=dict)
    constants: dict[int, int] = field(default_factory=dict)
    low_water: int = 0
    length: int = 0

    def needed_nodes(self) -> list[Node]:
        """Nodes that must run: effects, guarded nodes, and producers of values needed by
        them or by the final stack (dead pure nodes and dead RAM reads are dropped)."""
        need_vals = set(self.final) - {ANY}
        keep: set[int] = set()
        for node in reversed(self.nodes):
            effect = node.effect is not None and node.instr.name not in _PLAIN_READS
            if effect or node.guarded or any(v in need_vals for v in node.outputs):
                keep.add(node.id)
                need_vals.update(node.inputs)
        return [n for n in self.nodes if n.id in keep]


def extract(
    instrs: Sequence[Instr],
    isa: IsaVariant = "release",
    dead_cells: frozenset[int] = frozenset(),
    dead_slots: frozenset[int] = frozenset(),
) -> Dataflow:
    """Value-number a straight-line fragment.

    ``dead_slots``: op-stack slots (st index after the fragment) whose values the program
    never reads again (`tasmopt.vm.stack_liveness`) become `ANY` in the final stack (the
    region is widened to reach them, up to st15); a value only they held is not computed.

    RAM round trips at constant addresses are forwarded: a ``read_mem`` at a constant
    pointer whose cells the fragment wrote earlier at constant pointers (with no write at a
    computed address in between) yields the written values, and is no node. A ``write_mem``
    at a constant pointer whose cells are all in ``dead_cells`` (private scratch cells dead
    after the fragment: `tasmopt.vm.scratch`) is no node either: its values are simply
    dropped, so the schedule keeps them on the op stack instead of spilling them.

    Raises:
        UnsupportedBlock: control flow in the fragment.
    """
    table = instruction_set(isa)
    next_value = 0
    entry: list[int] = []  # bottom..top
    stack: list[int] = []
    nodes: list[Node] = []
    producer: dict[int, tuple[int, int]] = {}
    constants: dict[int, int] = {}
    const_value: dict[int, int] = {}
    cse: dict[tuple, tuple[int, ...]] = {}
    effects = 0
    delta = low = 0
    known: dict[int, int] = {}  # RAM cell -> value id written to it in this fragment

    def fresh() -> int:
        nonlocal next_value
        next_value += 1
        return next_value - 1

    def const(value: int) -> int:
        v = const_value.get(value)
        if v is None:
            v = fresh()
            const_value[value] = v
            constants[v] = value
            node = Node(len(nodes), Instr("push", value), (), (v,))
            nodes.append(node)
            producer[v] = (node.id, 0)
        return v

    def ensure(n: int) -> None:
        missing = n - len(stack)
        if missing > 0:
            deeper = [fresh() for _ in range(missing)]  # deeper[k] is the (k)th new deeper slot
            stack[:0] = list(reversed(deeper))
            entry[:0] = list(reversed(deeper))

    for ins in instrs:
        name = ins.name
        # straight-line code: every argument is an int (labels belong to control flow)
        arg = ins.arg if isinstance(ins.arg, int) else 0
        if name not in table or table[name].is_control_flow:
            raise UnsupportedBlock(f"{name} is not straight-line code")
        d = table[name].stack_delta(ins.arg if isinstance(ins.arg, int) else None)
        if d < 0:
            low = min(low, delta + d)
        delta += d
        if name == "push":
            v = const_value.get(arg)
            if v is None:
                v = fresh()
                const_value[arg] = v
                constants[v] = arg
                node = Node(len(nodes), Instr("push", arg), (), (v,))
                nodes.append(node)
                producer[v] = (node.id, 0)
            stack.append(v)
        elif name == "dup":
            ensure(arg + 1)
            stack.append(stack[-1 - arg])
        elif name == "swap":
            ensure(arg + 1)
            stack[-1], stack[-1 - arg] = stack[-1 - arg], stack[-1]
        elif name == "pick":
            ensure(arg + 1)
            stack.append(stack.pop(-1 - arg))
        elif name == "place":
            ensure(arg + 1)
            v = stack.pop()
            stack.insert(len(stack) - arg, v)
        elif name == "pop":
            ensure(arg)
            del stack[-arg:]
        elif name == "nop":
            pass
        elif name in RAM_WORDS and _forward(
            name, arg, stack, ensure, constants, known, dead_cells, const, table[name].writes_ram
        ):
            pass
        else:
            if table[name].writes_ram and not (
                name in RAM_WORDS and constants.get(stack[-1]) is not None
            ):  # at a computed address: may overwrite any cell
                known.clear()
            spec = table[name]
            narg = ins.arg if isinstance(ins.arg, int) else None
            reach, through = _REACH.get(name, (spec.pops(narg), {}))
            n_out = reach + d
            ensure(reach)
            inputs = tuple(stack[-1 - k] for k in range(reach))
            effect = None
            if name in EFFECTS:
                effect = effects
                effects += 1
            guarded = name in GUARDED
            key = None
            if effect is None:
                key = (name, arg, inputs)
                if name in COMMUTATIVE:
                    key = (name, arg, tuple(sorted(inputs)))
            if key is not None and key in cse:
                outputs = cse[key]
            else:
                outputs = tuple(
                    inputs[through[k]] if k in through else fresh() for k in range(n_out)
                )
                node = Node(len(nodes), ins, inputs, outputs, effect, guarded)
                nodes.append(node)
                for k, v in enumerate(outputs):
                    if k not in through:
                        producer[v] = (node.id, k)
                if key is not None:
                    cse[key] = outputs
            if reach:
                del stack[-reach:]
            stack.extend(reversed(outputs))
    nodes = fuse_ram_words(nodes, stack, producer, isa)
    final = list(stack)
    if dead_slots:
        usable = [k for k in dead_slots if k <= _MAX_INDEX]
        if usable:
            ensure(max(usable) + 1)
            final = list(stack)
            for k in usable:
                if k < len(final):
                    final[len(final) - 1 - k] = ANY
    return Dataflow(entry, final, nodes, producer, constants, low, len(instrs))


def _forward(
    name: str,
    arg: object,
    stack: list[int],
    ensure: Callable[[int], None],
    constants: dict[int, int],
    known: dict[int, int],
    dead_cells: frozenset[int],
    const: Callable[[int], int],
    writes: bool,
) -> bool:
    """Value-number a ``read_mem``/``write_mem`` at a constant pointer without a node, where
    that is exact (see `extract`); False: it needs its node. A ``write_mem`` that keeps its
    node still records what it wrote (for reads after it)."""
    n = arg if isinstance(arg, int) else 1
    ensure(n + 1 if writes else 1)
    p = constants.get(stack[-1])
    if p is None:
        return False
    if not writes:
        cells = [(p - k) % P for k in range(n)]
        if not all(c in known for c in cells):
            if any(c in dead_cells and c in known for c in cells):
                # part of it was written to a dropped (dead) store: RAM lacks it
                raise UnsupportedBlock("read of a forwarded dead cell mixed with RAM")
            return False
        stack.pop()
        stack.extend(known[c] for c in cells)
        stack.append(const((p - n) % P))
        return True
    cells = [(p + k) % P for k in range(n)]
    values = [stack[-2 - k] for k in range(n)]
    for c, v in zip(cells, values):
        known[c] = v
    if not all(c in dead_cells for c in cells):
        return False
    del stack[-1 - n :]
    stack.append(const((p + n) % P))
    return True


def fuse_ram_words(
    nodes: list[Node],
    final: Sequence[int],
    producer: dict[int, tuple[int, int]],
    isa: IsaVariant = "release",
) -> list[Node]:
    """Chained RAM word accesses as one (issue 11, loops the way experts write them).

    ``read_mem a`` at ``p`` leaves ``p - a``; a ``read_mem b`` of that pointer reads the
    next ``b`` cells down, exactly what ``read_mem a+b`` at ``p`` reads, in the same stack
    order (Triton VM spec, ``read_mem``: st0 = p-n, st1 = RAM[p-n+1], ..., st_n = RAM[p]).
    Likewise ``write_mem a`` then ``write_mem b`` at the pointer it left is ``write_mem a+b``
    with the second one's values below the first's on the stack (spec, ``write_mem``: old
    st1 -> RAM[p], st2 -> RAM[p+1], ...). Fused when the intermediate pointer is used by the second
    access alone (not by another node, not on the final stack), no other effect lies between
    the two, and ``a + b <= 5`` (the argument range in the ISA table). A read pair runs where
    the first read ran, a write pair where the second write ran (all its inputs exist by
    then). Returns the new node list (``producer`` is updated in place)."""
    table = instruction_set(isa)
    top = max((r.stop - 1 for n in RAM_WORDS if (r := table[n].arg_range()) is not None), default=1)
    changed = True
    while changed:
        changed = False
        uses: dict[int, int] = {}
        for n in nodes:
            for v in n.inputs:
                uses[v] = uses.get(v, 0) + 1
        for v in final:
            uses[v] = uses.get(v, 0) + 1
        for i, first in enumerate(nodes):
            name = first.instr.name
            if name not in RAM_WORDS or first.effect is None:
                continue
            a = first.instr.arg if isinstance(first.instr.arg, int) else 1
            pointer = first.outputs[0]
            if uses.get(pointer) != 1:
                continue
            j = next((k for k in range(i + 1, len(nodes)) if nodes[k].effect is not None), None)
            if j is None:
                continue
            second = nodes[j]
            b = second.instr.arg if isinstance(second.instr.arg, int) else 1
            if second.instr.name != name or second.inputs[:1] != (pointer,) or a + b > top:
                continue
            fused_instr = Instr(name, a + b)
            if table[name].writes_ram:
                inputs = first.inputs + second.inputs[1:]
                fused = Node(
                    second.id,
                    fused_instr,
                    inputs,
                    second.outputs,
                    second.effect,
                    second.guarded or first.guarded,
                )
                nodes = nodes[:i] + nodes[i + 1 : j] + [fused] + nodes[j + 1 :]
            else:
                outputs = second.outputs + first.outputs[1:]
                fused = Node(
                    first.id,
                    fused_instr,
                    first.inputs,
                    outputs,
                    first.effect,
                    first.guarded or second.guarded,
                )
                for k, v in enumerate(outputs):
                    producer[v] = (fused.id, k)
                nodes = nodes[:i] + [fused] + nodes[i + 1 : j] + nodes[j + 1 :]
            producer.pop(pointer, None)
            changed = True
            break
    return nodes
