"""Extension-field instruction selection for the block search (issue 11: the instructions
experts use where the source spells out the arithmetic).

Code that multiplies two cubic extension elements coefficient by coefficient (the Trident
corpus' ``X3`` struct: ``r0 = a0 b0 - (a2 b1 + a1 b2)``, ...) computes exactly what one
``xx_mul`` computes (Triton VM spec, ``xx_mul``: F_p[x] / (x^3 - x + 1)), and an expert
writes that one instruction. The dataflow search cannot find it: no sequence of its local
moves turns forty base-field operations into one extension-field operation.

`selections` runs the block symbolically (`tasmopt.vm.symbolic`, from an unknown entry
stack): when the block is pure (no effects, guards or RAM), every value it leaves is an
entry element, a constant, or one of exactly three computed values, and those three are the
result of one extension-field instruction (``xx_mul``, ``xx_add``, ``xb_mul``; the ISA table
says which ones take two extension operands or a base scalar) applied to entry elements in
some order, the block's dataflow is rebuilt around that single node. The scheduler then
places the operands and the results (`tasmopt.search.schedule`), and every candidate is
proven by `check_block` like any other: the symbolic run of the candidate yields the same
canonical polynomials.

The operand orders tried are bounded: the three results' variables must number 3, 4 or 6,
so at most 6! = 720 orders per instruction, tried only for blocks that leave exactly three
computed values.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import permutations

from tasmopt.isa import IsaVariant, instruction_set, names_where
from tasmopt.search.dataflow import Dataflow, Node
from tasmopt.tasm.program import Instr
from tasmopt.vm.expr import ExprContext, Poly
from tasmopt.vm.symbolic import SymbolicRun, continue_symbolic, run_symbolic

__all__ = ["selections", "EXTENSION_OPS"]

#: Extension-field arithmetic that cannot fail and leaves one extension element (three
#: words) from four or six operands (ISA table: group ``ext_arith``): ``xx_add``,
#: ``xx_mul``, ``xb_mul``.
EXTENSION_OPS = names_where(
    lambda i: i.group == "ext_arith" and not i.can_fail and i.pushes() == 3 and i.pops() in (4, 6)
)

#: Most entry variables the three results may involve (an xx_mul's six operands).
MAX_VARS = 6


def _var_index(ctx: ExprContext, p: Poly) -> int | None:
    """k when ``p`` is exactly the entry variable ``s k``."""
    if len(p.terms) != 1:
        return None
    ((mono, c),) = p.terms.items()
    if c != 1 or len(mono) != 1 or mono[0][1] != 1:
        return None
    key = ctx.atom_keys[mono[0][0]]
    return key[2] if key[:2] == ("var", "s") and isinstance(key[2], int) else None


def _entry_vars(ctx: ExprContext, polys: list[Poly]) -> set[int] | None:
    """The entry-stack indices ``polys`` depend on; None if they hold anything else (an
    input, RAM, an opaque operation)."""
    out: set[int] = set()
    for aid in ctx.atoms_of(polys):
        key = ctx.atom_keys[aid]
        if key[:2] != ("var", "s") or not isinstance(key[2], int):
            return None
        out.add(key[2])
    return out


def _apply(ctx: ExprContext, op: str, operands: tuple[int, ...], isa: IsaVariant) -> list[Poly]:
    """The results (st0 first) of ``op`` with ``operands[k]`` (entry indices) at st_k."""
    run = SymbolicRun(ctx)
    run.stack = [ctx.var("s", k) for k in reversed(operands)]
    run.base = max(operands) + 1
    continue_symbolic(run, [Instr(op)], isa)
    return [run.stack[-1 - k] for k in range(3)]


def selections(instrs: list[Instr], isa: IsaVariant = "release") -> list[Dataflow]:
    """Dataflows of the block ``instrs`` built around one extension-field instruction
    (module docstring); empty when the block is not such a computation."""
    table = instruction_set(isa)
    ctx = ExprContext()
    run = run_symbolic(instrs, ctx, isa)
    if (
        run.unsupported is not None
        or run.outputs
        or run.ram
        or run.guards
        or run.sponge is not None
        or run.sponge_initialized
        or any(run.consumed.values())
    ):
        return []
    final = list(run.stack)  # bottom..top; below it the entry elements s base, ... untouched
    computed = [p for p in final if not p.is_const and _var_index(ctx, p) is None]
    if len(set(computed)) != 3:
        return []
    need = _entry_vars(ctx, computed)
    if need is None or len(need) not in (3, 4, MAX_VARS):
        return []
    want = set(computed)
    found: list[Dataflow] = []
    for op in sorted(EXTENSION_OPS):
        arity = table[op].pops()
        pool = sorted(need)
        if len(pool) > arity:
            continue
        seen: set[tuple[int, ...]] = set()
        orders = permutations(pool, arity) if len(pool) == arity else _with_repeats(pool, arity)
        for operands in orders:
            if operands in seen:
                continue
            seen.add(operands)
            results = _apply(ctx, op, operands, isa)
            if set(results) == want:
                steps = [(op, tuple(("s", k) for k in operands))]
                found.append(_dataflow(ctx, run, final, steps, results, len(instrs)))
                break
        if found:
            break
    return found or _scaled(ctx, run, final, computed, len(instrs), isa)


def _linear(ctx: ExprContext, p: Poly) -> list[tuple[int, int]] | None:
    """``[(k, c), ...]`` when ``p`` is ``sum c * s_k`` (no constant term, degree one)."""
    out = []
    for mono, c in p.terms.items():
        if len(mono) != 1 or mono[0][1] != 1:
            return None
        key = ctx.atom_keys[mono[0][0]]
        if key[:2] != ("var", "s") or not isinstance(key[2], int):
            return None
        out.append((key[2], c))
    return out


def _scaled(
    ctx: ExprContext,
    run: SymbolicRun,
    final: list[Poly],
    computed: list[Poly],
    length: int,
    isa: IsaVariant,
) -> list[Dataflow]:
    """Coefficient-wise ``k * Y`` (``push k; xb_mul``) and ``X + k * Y`` (``push k; xb_mul;
    xx_add``: ``X - Y`` is k = -1) for a constant ``k``, X and Y extension elements among
    the entry elements: what the ``X3`` struct's ``scale``/``negate``/``diff`` spell out one
    coefficient at a time. Each order of X's and Y's words is tried by running the steps
    symbolically; the first whose three results are exactly the block's is the dataflow."""
    forms = [_linear(ctx, p) for p in computed]
    if any(f is None or len(f) not in (1, 2) for f in forms):
        return []
    scales = {c for f in forms for _, c in f or () if c != 1}
    if len(scales) != 1 or any(len(f or ()) != len(forms[0] or ()) for f in forms):
        return []
    (k,) = scales
    ys = sorted({v for f in forms for v, c in f or () if c == k})
    xs = sorted({v for f in forms for v, c in f or () if c != k})
    if len(ys) != 3 or len(xs) not in (0, 3) or set(xs) & set(ys):
        return []
    want = set(computed)
    for y in permutations(ys):
        for x in permutations(xs) if xs else [()]:
            sub = SymbolicRun(ctx)
            sub.stack = [ctx.var("s", v) for v in reversed(y + x)]  # y0 at st0
            sub.base = max(xs + ys) + 1
            code = [Instr("push", k), Instr("xb_mul")] + ([Instr("xx_add")] if x else [])
            continue_symbolic(sub, code, isa)
            results = [sub.stack[-1 - j] for j in range(3)]
            if set(results) != want:
                continue
            steps: list[tuple[str, tuple[Ref, ...]]] = [
                ("xb_mul", (("c", k), *(("s", v) for v in y)))
            ]
            if x:
                steps.append(
                    ("xx_add", (("n", 0, 0), ("n", 0, 1), ("n", 0, 2), *(("s", v) for v in x)))
                )
            return [_dataflow(ctx, run, final, steps, results, length)]
    return []


def _with_repeats(pool: list[int], arity: int) -> list[tuple[int, ...]]:
    """Operand orders for a square (``xx_mul`` of an element with itself: three variables,
    six operands, both halves the same order)."""
    if arity != 6 or len(pool) != 3:
        return []
    return [p + p for p in permutations(pool)]


#: An operand of a selected step: ``("s", k)`` entry element k, ``("c", v)`` the constant v,
#: ``("n", i, k)`` output k (st_k) of step i.
Ref = tuple[str, int] | tuple[str, int, int]


def _dataflow(
    ctx: ExprContext,
    run: SymbolicRun,
    final: list[Poly],
    steps: Sequence[tuple[str, tuple[Ref, ...]]],
    results: list[Poly],
    length: int,
) -> Dataflow:
    """The block as entry values, the selected ``steps`` (instruction, operands st0 first;
    the last one leaves ``results``, st0 first) and constants, and its final stack."""
    base = run.base  # the operands are among the materialized entry elements
    entry = list(range(base - 1, -1, -1))  # value id k is entry element s k; bottom..top
    next_id = base
    nodes: list[Node] = []
    producer: dict[int, tuple[int, int]] = {}
    constants: dict[int, int] = {}
    const_ids: dict[int, int] = {}

    def constant(c: int) -> int:
        nonlocal next_id
        if c not in const_ids:
            const_ids[c] = next_id
            constants[next_id] = c
            push = Node(len(nodes), Instr("push", c), (), (next_id,))
            nodes.append(push)
            producer[next_id] = (push.id, 0)
            next_id += 1
        return const_ids[c]

    outs: list[tuple[int, ...]] = []
    for op, refs in steps:
        inputs = []
        for r in refs:
            if len(r) == 3:  # ("n", step, output)
                inputs.append(outs[r[1]][r[2]])
            elif r[0] == "s":
                inputs.append(r[1])
            else:
                inputs.append(constant(r[1]))
        out_ids = tuple(range(next_id, next_id + 3))
        next_id += 3
        node = Node(len(nodes), Instr(op), tuple(inputs), out_ids)
        nodes.append(node)
        for k, v in enumerate(out_ids):
            producer[v] = (node.id, k)
        outs.append(out_ids)
    by_poly = {results[k].id: outs[-1][k] for k in range(3)}
    final_ids: list[int] = []
    for p in final:
        var = _var_index(ctx, p)
        if var is not None:
            final_ids.append(var)
        elif p.id in by_poly:
            final_ids.append(by_poly[p.id])
        else:
            final_ids.append(constant(p.const))
    return Dataflow(entry, final_ids, nodes, producer, constants, run.low_water, length)
