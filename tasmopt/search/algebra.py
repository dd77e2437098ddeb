"""Algebraic rewrites of a block's dataflow before scheduling (the verifier proves them).

* constant folding: a pure, failure-free operation whose inputs are all constants becomes a
  constant (``push 5; split`` -> two pushes, ``push 2; push 3; mul`` -> ``push 6``);
* ``add`` of a constant becomes ``addi c`` (one operand fewer to bring to the top);
* identities: ``x + 0``, ``x * 1``, ``addi 0`` become ``x``;
* linear cancellation: every value made by ``add``, ``addi`` and ``mul`` by a constant is a
  linear form over the block's other values (entry values and the outputs of every other
  operation) with Goldilocks coefficients; a form that is a constant becomes that constant,
  one that is ``x + c`` becomes ``x`` or ``addi c`` of ``x``, and two values with the same
  form become one (``dup b; push -1; mul; add; ...; dup b; add`` -> the original value);
  a value whose form differs from an earlier value's only in the constant is ``addi`` of it.
  This is what lets a conjugated loop body (`tasmopt.optimizer.pointers`) drop the change of
  variables it was wrapped in. The pointer a ``read_mem n`` / ``write_mem n`` leaves is the
  form of its input pointer minus / plus ``n`` (found by symbolic execution of the
  instruction), and ``x + c`` is made from the latest value of the same ``x`` (``p + 1``
  after ``read_mem 1`` of ``p`` is ``addi 2`` of the pointer it left: the read bumps it).

Each rewrite maps value ids; later operations and the final stack follow the mapping.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from tasmopt.isa import P, names_where
from tasmopt.search.dataflow import RAM_WORDS, Dataflow, Node, fuse_ram_words
from tasmopt.tasm.program import Instr
from tasmopt.vm.expr import ExprContext
from tasmopt.vm.symbolic import run_symbolic

__all__ = ["LinearForm", "linear_forms", "simplify"]

#: RAM word instructions that only read (``read_mem``; ISA table).
_READS = names_where(lambda i: i.name in RAM_WORDS and not i.writes_ram)


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


#: A linear form: ((value id, coefficient), ...) sorted by value id, coefficients nonzero,
#: and the constant term (all mod the Goldilocks prime).
LinearForm = tuple[tuple[tuple[int, int], ...], int]


class _Linear:
    """Linear forms of the values of one dataflow (see `simplify`)."""

    def __init__(self, constants: dict[int, int]) -> None:
        self.constants = constants
        self.forms: dict[int, LinearForm] = {}
        self.by_form: dict[LinearForm, int] = {}
        self.latest: dict[tuple[tuple[int, int], ...], int] = {}
        self.first: dict[tuple[tuple[int, int], ...], int] = {}

    def of_value(self, v: int) -> LinearForm:
        """The form of value ``v`` (itself, ``1*v + 0``, when nothing simpler is known)."""
        if v in self.constants:
            return (), self.constants[v] % P
        return self.forms.get(v, (((v, 1),), 0))

    def form_of(self, node: Node) -> LinearForm | None:
        """The form of ``node``'s output, or None if it is not a linear operation."""
        name, ins = node.instr.name, node.inputs
        if node.effect is not None or node.guarded or len(node.outputs) != 1:
            return None
        if name == "addi" and isinstance(node.instr.arg, int) and len(ins) == 1:
            terms, c = self.of_value(ins[0])
            return terms, (c + node.instr.arg) % P
        if name == "add" and len(ins) == 2:
            return _combine(self.of_value(ins[0]), 1, self.of_value(ins[1]), 1)
        if name == "mul" and len(ins) == 2:
            a, b = self.of_value(ins[0]), self.of_value(ins[1])
            if not b[0]:
                return _combine(a, b[1], ((), 0), 0)
            if not a[0]:
                return _combine(b, a[1], ((), 0), 0)
        return None

    def value_of(self, form: LinearForm) -> int | None:
        """An existing value with this form: the value itself for ``1*x + 0``; -1 standing
        for "the constant" when the form has no terms; else one recorded earlier."""
        terms, c = form
        if not terms:
            return -1
        if len(terms) == 1 and terms[0][1] == 1 and c == 0:
            return terms[0][0]
        return self.by_form.get(form)

    def record(self, v: int, form: LinearForm) -> None:
        self.forms[v] = form
        self.by_form.setdefault(form, v)
        self.first.setdefault(form[0], v)
        self.latest[form[0]] = v

    def record_pointer(self, node: Node) -> None:
        """Record the pointer a RAM word instruction leaves (`_pointer_step`)."""
        step = _pointer_step(node.instr.name, node.instr.arg)
        if step is None or not node.inputs:
            return
        out, k = step
        terms, c = self.of_value(node.inputs[0])
        if out < len(node.outputs) and terms:
            self.record(node.outputs[out], (terms, (c + k) % P))

    def offsets_of(self, form: LinearForm) -> tuple[tuple[int, int], tuple[int, int]] | None:
        """``((y, d), (x, e))`` with ``y + d`` and ``x + e`` both equal to ``form``: ``y``
        the latest value recorded with the same terms, ``x`` the first (for one term with
        coefficient 1, the term itself); None when no value has these terms."""
        terms, c = form
        if len(terms) == 1 and terms[0][1] == 1:
            x, e = terms[0][0], c
        elif terms in self.first:
            x = self.first[terms]
            e = (c - self.forms[x][1]) % P
        else:
            return None
        y = self.latest.get(terms, x)
        d = (c - self.forms[y][1]) % P if y in self.forms else e
        return (y, d), (x, e)


@cache
def _pointer_step(name: str, arg: int | str | None) -> tuple[int, int] | None:
    """``(output index, k)``: the RAM word instruction leaves its input pointer ``+ k`` at
    that output (st0 first); None for other instructions (Triton VM spec, by symbolic run)."""
    if name not in RAM_WORDS:
        return None
    ctx = ExprContext()
    run = run_symbolic([Instr(name, arg)], ctx)
    if run.unsupported:
        return None
    ptr = ctx.var("s", 0)
    for k, v in enumerate(reversed(run.stack)):
        d = ctx.sub(v, ptr)
        if d.is_const:
            return k, d.const
    return None


def _combine(a: LinearForm, ka: int, b: LinearForm, kb: int) -> LinearForm:
    """``ka * a + kb * b``."""
    acc: dict[int, int] = {}
    for terms, k in ((a[0], ka), (b[0], kb)):
        for v, coef in terms:
            acc[v] = (acc.get(v, 0) + k * coef) % P
    terms_out = tuple(sorted((v, coef) for v, coef in acc.items() if coef))
    return terms_out, (ka * a[1] + kb * b[1]) % P


def linear_forms(df: Dataflow) -> dict[int, LinearForm]:
    """The linear forms (`simplify`) of the values of ``df`` that ``add``, ``addi``, ``mul``
    by a constant or a RAM word instruction's pointer make, over the other values: value id
    -> ``(((value id, coefficient), ...), constant)``, Goldilocks coefficients."""
    linear = _Linear(df.constants)
    for node in df.nodes:
        form = linear.form_of(node)
        if form is not None:
            linear.record(node.outputs[0], form)
        else:
            linear.record_pointer(node)
    return dict(linear.forms)


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

    linear = _Linear(constants)
    #: nodes made from a later value of their term, by position, with their plain version
    fallback: dict[int, Node] = {}
    for node in df.nodes:
        inputs = tuple(resolve(v) for v in node.inputs)
        node = Node(node.id, node.instr, inputs, node.outputs, node.effect, node.guarded)
        name = node.instr.name
        folded = None if node.instr.name == "push" else _fold(node, constants)
        if folded is not None:
            for v, c in zip(node.outputs, folded):
                alias[v] = constant(c)
            continue
        form = linear.form_of(node)
        if form is not None:
            same = linear.value_of(form)
            if same is not None:  # an existing value (or constant) has this very form
                alias[node.outputs[0]] = same if form[0] else constant(form[1])
                continue
            (out,) = node.outputs
            offsets = linear.offsets_of(form)
            linear.record(out, form)
            if offsets is not None:  # x + c: one addi of a value with the same terms
                (y, d), (x, e) = offsets
                if y != x:  # from a later value: only if that one runs anyway
                    fallback[len(nodes)] = Node(node.id, Instr("addi", e), (x,), node.outputs)
                nodes.append(Node(node.id, Instr("addi", d), (y,), node.outputs))
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
        linear.record_pointer(node)
        nodes.append(node)
    final = [resolve(v) for v in df.final]
    if fallback:  # a value made from a later one must not keep an otherwise dead node alive
        plain = [fallback.get(k, n) for k, n in enumerate(nodes)]
        needed = {n.id for n in Dataflow([], final, plain, producer).needed_nodes()}
        for k, n in fallback.items():
            src = producer.get(nodes[k].inputs[0])
            if src is None or src[0] not in needed:
                nodes[k] = n
    nodes, next_value = _narrow_reads(nodes, final, producer, next_value)
    nodes = _gather_reads(nodes, final, producer, linear, constant, next_value)
    nodes = fuse_ram_words(nodes, final, producer)  # pointers the forms joined up
    return Dataflow(list(df.entry), final, nodes, producer, constants, df.low_water, df.length)


def _gather_reads(
    nodes: list[Node],
    final: list[int],
    producer: dict[int, tuple[int, int]],
    linear: _Linear,
    constant: Callable[[int], int],
    next_value: int,
) -> list[Node]:
    """Reads of adjacent cells as one ``read_mem n`` (issue 11 item 4; `fuse_ram_words`
    handles reads chained through the pointer they leave, this one independent reads).

    A run of ``read_mem`` nodes (those with a used value: a dead read is dropped instead)
    with no other effect between them whose pointers have the
    same terms (linear forms; none for constant addresses) and whose cells, ``[c - n + 1, c]``
    for a read of ``n`` at a pointer with constant ``c``, are disjoint and together
    contiguous, at most 5 words, is one ``read_mem`` of the top cell: the values keep their ids (RAM[a] is output ``a - low + 1``: Triton VM
    spec, ``read_mem``). It runs where the first read of the run ran, at an existing value
    with the top cell's form when one exists by then, else at ``addi`` of the first read's
    pointer (or the constant). The pointers the reads left are the one it leaves (the lowest
    read's) and ``addi`` of it (dropped when unused). Reads are not observable, so reading some cells earlier than
    before changes nothing; any other effect between two reads (a write) ends the run."""
    uses = _uses(nodes, final, producer)
    out = list(nodes)
    i = 0
    while i < len(out):
        run: list[int] = []  # positions of the reads in one run of effects
        k = i
        while k < len(out):
            if out[k].effect is not None:
                if out[k].instr.name not in _READS:
                    break
                run.append(k)
            k += 1
        groups: dict[tuple[tuple[int, int], ...], list[int]] = {}
        for pos in run:
            if any(uses.get(v, 0) for v in out[pos].outputs[1:]):  # a dead read is dropped
                groups.setdefault(linear.of_value(out[pos].inputs[0])[0], []).append(pos)
        merged = False
        for terms, members in groups.items():
            if len(members) < 2:
                continue
            spans = []  # (lowest cell, words, position)
            for pos in members:
                arg = out[pos].instr.arg
                n = arg if isinstance(arg, int) else 1
                cell = (linear.of_value(out[pos].inputs[0])[1] - n + 1) % P
                spans.append((cell - P if cell > P // 2 else cell, n, pos))  # signed offset
            spans.sort()
            low, total = spans[0][0], sum(n for _, n, _ in spans)
            if total > 5 or any(
                spans[j][0] - spans[j - 1][0] != spans[j - 1][1] for j in range(1, len(spans))
            ):
                continue
            top = (low + total - 1) % P
            first = min(members)
            before = {node.id for node in out[:first]}
            extra: list[Node] = []
            if not terms:
                ptr = constant(top)
            else:
                found = linear.value_of((terms, top))
                made = producer.get(found) if found is not None else None
                if found is not None and found >= 0 and (made is None or made[0] in before):
                    ptr = found
                else:
                    base = out[first].inputs[0]
                    delta = (top - linear.of_value(base)[1]) % P
                    ptr = base
                    if delta:
                        ptr, next_value = next_value, next_value + 1
                        step = Node(
                            max(x.id for x in out) + 1, Instr("addi", delta), (base,), (ptr,)
                        )
                        producer[ptr] = (step.id, 0)
                        extra.append(step)
            # the pointer it leaves, low - 1, is the lowest read's; the others' are addi of it
            values = [out[spans[0][2]].outputs[0]] + [0] * total
            for cell, n, pos in spans:
                for j in range(n):  # RAM[cell + j] is output j + 1 of that read
                    values[cell + j - low + 1] = out[pos].outputs[j + 1]
            head = out[first]
            fused = Node(head.id, Instr("read_mem", total), (ptr,), tuple(values), head.effect)
            for idx, v in enumerate(values):
                producer[v] = (fused.id, idx)
            left: list[Node] = []
            for cell, _, pos in spans[1:]:
                v = out[pos].outputs[0]
                step = Node(
                    max(x.id for x in out) + 1 + len(left) + len(extra),
                    Instr("addi", (cell - low) % P),
                    (values[0],),
                    (v,),
                )
                producer[v] = (step.id, 0)
                left.append(step)
            rebuilt: list[Node] = []
            for pos, node in enumerate(out):
                if pos == first:
                    rebuilt += [*extra, fused, *left]
                elif pos not in members:
                    rebuilt.append(node)
            out = rebuilt
            uses[ptr] = uses.get(ptr, 0) + 1
            merged = True
            break
        if not merged:
            i = k + 1
    return out


def _narrow_reads(
    nodes: list[Node], final: list[int], producer: dict[int, tuple[int, int]], next_value: int
) -> tuple[list[Node], int]:
    """A ``read_mem n`` whose outermost values are unused reads only the cells in use (the
    converse of `_gather_reads`: an inlined struct load of which one field is used). For a
    read of ``n`` at ``p`` whose used values are RAM[p - n + lo] .. RAM[p - n + hi]
    (1 <= lo <= hi <= n, spec ``read_mem``), the read of ``hi - lo + 1`` at ``p - n + hi``
    (``addi`` of ``p``) yields them with the same ids, and the pointer it leaves is the
    original's plus ``lo - 1`` (re-derived by ``addi`` when used). A read none of whose
    values is used is ``addi -n`` of its pointer (a pure node, dropped when that is unused
    too). Returns the nodes and the next free value id."""
    uses = _uses(nodes, final, producer)
    out: list[Node] = []
    fresh_id = max((x.id for x in nodes), default=0) + 1
    for node in nodes:
        arg = node.instr.arg
        if node.instr.name not in _READS or node.effect is None or not isinstance(arg, int):
            out.append(node)
            continue
        used = [j for j in range(1, arg + 1) if uses.get(node.outputs[j], 0)]
        if not used:  # only the pointer it leaves, if anything: p - n
            out.append(Node(node.id, Instr("addi", -arg % P), node.inputs[:1], node.outputs[:1]))
            continue
        if used[0] == 1 and used[-1] == arg:
            out.append(node)  # nothing to narrow
            continue
        lo, hi = used[0], used[-1]
        ptr = node.inputs[0]
        if hi != arg:
            step = Node(fresh_id, Instr("addi", (hi - arg) % P), (ptr,), (next_value,))
            producer[next_value] = (step.id, 0)
            out.append(step)
            ptr, fresh_id, next_value = next_value, fresh_id + 1, next_value + 1
        left = next_value
        next_value += 1
        narrow = Node(
            node.id,
            Instr("read_mem", hi - lo + 1),
            (ptr,),
            (left, *node.outputs[lo : hi + 1]),
            node.effect,
        )
        for k, v in enumerate(narrow.outputs):
            producer[v] = (narrow.id, k)
        out.append(narrow)
        if uses.get(node.outputs[0], 0):  # the original's left pointer, p - n
            back = Node(fresh_id, Instr("addi", (1 - lo) % P), (left,), (node.outputs[0],))
            producer[node.outputs[0]] = (back.id, 0)
            out.append(back)
            fresh_id += 1
    return out, next_value


def _uses(
    nodes: list[Node], final: list[int], producer: dict[int, tuple[int, int]]
) -> dict[int, int]:
    """How often each value is read: by the nodes that must run (dead nodes read nothing)
    and by the final stack."""
    uses: dict[int, int] = {}
    for node in Dataflow([], final, nodes, producer).needed_nodes():
        for v in node.inputs:
            uses[v] = uses.get(v, 0) + 1
    for v in final:
        uses[v] = uses.get(v, 0) + 1
    return uses
