"""Algebraic rewrites of a block's dataflow before scheduling (the verifier proves them).

* constant folding: a pure, failure-free operation whose inputs are all constants becomes a
  constant (``push 5; split`` -> two pushes, ``push 2; push 3; mul`` -> ``push 6``);
* ``add`` of a constant becomes ``addi c`` (one operand fewer to bring to the top);
* identities: ``x + 0``, ``x * 1``, ``addi 0`` become ``x``.

Each rewrite maps value ids; later operations and the final stack follow the mapping.
"""

from __future__ import annotations

from tasmopt.isa import P
from tasmopt.search.dataflow import Dataflow, Node
from tasmopt.tasm.program import Instr
from tasmopt.vm.expr import ExprContext
from tasmopt.vm.symbolic import run_symbolic

__all__ = ["simplify"]


def _fold(node: Node, constants: dict[int, int]) -> list[int] | None:
    """Outputs (st0 first) of a pure node on constant inputs, or None."""
    if node.effect is not None or not node.inputs:
        return None
    if not all(v in constants for v in node.inputs):
        return None
    prog = [Instr("push", constants[v]) for v in reversed(node.inputs)] + [node.instr]
    ctx = ExprContext()
    run = run_symbolic(prog, ctx)
    if run.unsupported or run.guards or run.base:
        return None
    outs = list(reversed(run.stack))[: len(node.outputs)]
    if len(outs) != len(node.outputs) or not all(v.is_const for v in outs):
        return None
    return [v.const for v in outs]


def simplify(df: Dataflow) -> Dataflow:
    """A rewritten copy of ``df`` (see module docstring); ``df`` itself is not changed."""
    alias: dict[int, int] = {}
    constants = dict(df.constants)
    const_value = {c: v for v, c in constants.items()}
    next_value = max([*df.entry, *df.producer, *constants, 0]) + 1
    nodes: list[Node] = []
    producer = dict(df.producer)

    def resolve(v: int) -> int:
        while v in alias:
            v = alias[v]
        return v

    def constant(c: int) -> int:
        nonlocal next_value
        c %= P
        v = const_value.get(c)
        if v is None:  # a new constant: the scheduler pushes it where it is needed
            v = next_value
            next_value += 1
            const_value[c] = v
            constants[v] = c
        return v

    for node in df.nodes:
        inputs = tuple(resolve(v) for v in node.inputs)
        node = Node(node.id, node.instr, inputs, node.outputs, node.effect, node.guarded)
        name = node.instr.name
        folded = None if node.instr.name == "push" else _fold(node, constants)
        if folded is not None:
            for v, c in zip(node.outputs, folded):
                alias[v] = constant(c)
            continue
        if name in ("add", "mul") and any(v in constants for v in inputs):
            k = 0 if inputs[0] in constants else 1
            c, other = constants[inputs[k]], inputs[1 - k]
            if (name == "add" and c == 0) or (name == "mul" and c == 1):
                alias[node.outputs[0]] = other
                continue
            if name == "add":
                node = Node(node.id, Instr("addi", c), (other,), node.outputs)
        elif name == "addi" and node.instr.arg == 0:
            alias[node.outputs[0]] = inputs[0]
            continue
        nodes.append(node)
    final = [resolve(v) for v in df.final]
    return Dataflow(list(df.entry), final, nodes, producer, constants, df.low_water, df.length)
