"""TIR for Trident expressions (spec/trident-language.md §7.4): every expression leaves
exactly one model temp of its checked width; variable reads are copies; room is made before
every op that grows the stack (CF).

CF fixes here: real struct widths and field offsets (B1, B2, B4), struct literal fields in
declaration order (B4, B11), the callee's declared result width for every call (B5),
``Swap(1)`` before ``Lt``/``DivMod`` (B19), constants pushed by value (B7, B8), and runtime
indexing that stores the array with the pointer on top and reads it back from the same
addresses (B22), after an ``index < N`` assertion.
"""

from __future__ import annotations

from collections.abc import Sequence

from tasmopt.errors import FrontendError
from tasmopt.frontend import ast as A
from tasmopt.frontend.source import Pos
from tasmopt.frontend.stack import CAPACITY, OutOfReach, StackModel, pop_chunks
from tasmopt.frontend.symbols import ConstRef, VarRef
from tasmopt.frontend.types import ArrayTy, width
from tasmopt.isa import names_where
from tasmopt.tir.ops import Op

__all__ = ["ExprBuilder", "BINARY_OPS"]

#: TIR op of each binary operator (spec §5).
BINARY_OPS = {
    "==": "Eq",
    "<": "Lt",
    "+": "Add",
    "*": "Mul",
    "*.": "ExtMul",
    "&": "And",
    "^": "Xor",
    "/%": "DivMod",
}


#: Binary operators whose operands may be evaluated in either order: their TIR op is one
#: commutative instruction (ISA table, `Instruction.commutative`).
COMMUTATIVE_OPS = frozenset(
    op for op, kind in BINARY_OPS.items() if kind.lower() in names_where(lambda i: i.commutative)
)


class ExprBuilder:
    """Expression half of the function builder; the statement half subclasses it."""

    model: StackModel
    out: list[Op]

    def emit_op(self, op: Op) -> None:
        self.out.append(op)

    def emit(self, kind: str, value: int | str | None = None) -> None:
        self.out.append(Op(kind, value))

    def emit_all(self, ops: list[Op] | tuple[Op, ...]) -> None:
        self.out.extend(ops)

    def dup(self, d: int) -> None:
        if d >= CAPACITY:
            raise OutOfReach(d)
        self.emit("Dup", d)

    def swap(self, d: int) -> None:
        if d >= CAPACITY:
            raise OutOfReach(d)
        self.emit("Swap", d)

    def fail(self, message: str, pos: Pos) -> FrontendError:
        """The error to raise for code that cannot be generated at ``pos``."""
        raise NotImplementedError

    # -- cleanup patterns -------------------------------------------------------------------

    def cleanup_under(self, k: int, dead: int) -> None:
        """Drop ``dead`` elements under a k-wide value on top (spec §7.3, CF B16)."""
        if dead <= 0:
            return
        if k == 0:
            self.emit_all(pop_chunks(dead))
        elif k == 1:
            if dead < CAPACITY:
                self.emit("Swap", dead)
                self.emit_all(pop_chunks(dead))
            else:
                for _ in range(dead):
                    self.emit("Swap", 1)
                    self.emit("Pop", 1)
        elif k < CAPACITY:
            for _ in range(dead):
                self.emit("Swap", k)
                self.emit("Pop", 1)
            for _ in range(dead % k):
                for j in range(1, k):
                    self.emit("Swap", j)
        else:
            s = self.model.alloc.spill(k)
            self.emit("Push", s)
            for n in _chunks(k):
                self.emit("WriteMem", n)
            self.emit("Pop", 1)
            self.emit_all(pop_chunks(dead))
            self.emit("Push", s + k - 1)
            for n in _chunks(k):
                self.emit("ReadMem", n)
            self.emit("Pop", 1)

    # -- reads ------------------------------------------------------------------------------

    def read(self, ref: VarRef) -> None:
        """Copy a variable (or a field path of it) onto the top: ``Dup(d)`` x width."""
        var, m = ref.var, self.model
        if var not in m.spilled and self.replace_read(ref):
            return
        if var in m.spilled:
            # CF: copy straight from RAM. Upstream reloads the variable itself on top, which
            # puts it between pending operands (e.g. `t + v` with v spilled adds v to itself).
            m.ensure_space(ref.width, (var,))
            m.emit_ram_read(var, var.width - ref.offset - ref.width, ref.width)
            m.push(None, ref.width)
            return
        i = m.index_of(var)
        assert i is not None, var
        if self.consume(ref):
            return
        m.entries[i].tick = m.stamp()
        m.ensure_space(ref.width, (var,))
        d = m.depth(var) + ref.offset + ref.width - 1
        if (d >= CAPACITY or m.total + ref.width > CAPACITY) and m.spill_var(var):
            self.read(ref)  # too deep (or nothing else to spill): from RAM
            return
        for _ in range(ref.width):
            self.dup(d)
        m.push(None, ref.width)

    def replace_read(self, ref: VarRef) -> bool:
        """Take the old value of a variable the assignment being built replaces. The base
        builder never does."""
        return False

    def rhs_first(self, e: A.BinExpr) -> bool:
        """Evaluate a commutative operator's right operand first (so that a variable on
        top can be taken by its last read). The base builder never does."""
        return False

    def take_under(self, e: object) -> bool:
        """Use a commutative operator's second operand in place, under the first; True if
        it did. The base builder never does."""
        return False

    def consume(self, ref: VarRef) -> bool:
        """Take the variable itself as the value instead of a copy (its last read, on top of
        the stack); True if it did. The base builder never does."""
        return False

    def push_const(self, value: int) -> None:
        self.model.ensure_space(1)
        self.emit("Push", value)
        self.model.push(None, 1)

    # -- expressions ------------------------------------------------------------------------

    def expr(self, e: A.Expr) -> None:
        """Build ``e``: one new model temp of width(e.ty) (none for unit)."""
        try:
            self._expr(e)
        except OutOfReach:
            raise self.fail(
                "too many live values here: a value is deeper than 15 stack "
                "elements and cannot be spilled (anonymous temporaries are never "
                "spilled)",
                e.pos,
            ) from None

    def _expr(self, e: A.Expr) -> None:
        if isinstance(e, A.IntLit):
            self.push_const(e.value)
        elif isinstance(e, A.BoolLit):
            self.push_const(int(e.value))
        elif isinstance(e, A.PathExpr):
            if isinstance(e.ref, ConstRef):
                self.push_const(e.ref.value)
            else:
                self.read(e.ref)
        elif isinstance(e, A.CallExpr):
            self.call(e)
        elif isinstance(e, A.BinExpr):
            self.binary(e)
        elif isinstance(e, A.TupleExpr | A.ArrayExpr):
            if not self.in_place(e.elems):
                for x in e.elems:
                    self.expr(x)
            self.model.merge_top(len(e.elems))
        elif isinstance(e, A.StructLit):
            if not self.in_place(e.ordered):
                for x in e.ordered:
                    self.expr(x)
            self.model.merge_top(len(e.ordered))
        elif isinstance(e, A.IndexExpr):
            self.index(e)
        else:
            raise self.fail(f"cannot generate code for {type(e).__name__}", e.pos)

    def late_reads(self) -> bool:
        """Evaluate a call's leading plain reads after its other arguments (`call`). The
        base builder never does."""
        return False

    def in_place(self, values: Sequence[A.Expr]) -> bool:
        """Whether ``values`` (a call's arguments, a literal's parts) are already on top of
        the stack in order and taken there, one model temp each, no code. The base builder
        never does."""
        return False

    def call(self, e: A.CallExpr) -> None:
        t = e.target
        k = _leading_reads(e.args) if self.late_reads() else 0
        if self.in_place(e.args):
            pass  # the arguments are the top entries already
        elif k:  # the heavy arguments first, then the reads on top, then S under R
            for a in (*e.args[k:], *e.args[:k]):
                self.expr(a)
            self._rotate(len(e.args), k)
        else:
            for a in e.args:
                self.expr(a)
        in_w = sum(width(p) for p in t.params)
        out_w = width(t.ret)
        self.model.ensure_space(max(0, out_w - in_w))
        if t.kind == "intrinsic":
            self.emit_all(t.intrinsic.ops)
        else:
            self.emit("Call", t.label)
        self.model.pop_entries(len(e.args))
        self.model.push(None, out_w)

    def _rotate(self, n: int, k: int) -> None:
        """The top ``n`` model entries are ``R`` (``n - k`` entries) under ``S`` (``k``):
        bring every element of ``R`` above ``S``, deepest first (``R`` keeps its order)."""
        m = self.model
        top = m.entries[-n:]
        ws = sum(x.width for x in top[n - k :])
        wr = sum(x.width for x in top[: n - k])
        for _ in range(wr):
            m.emit_swap_chain(ws + wr - 1)
        m.entries[-n:] = top[n - k :] + top[: n - k]

    def operands(self, e: A.BinExpr) -> list[A.Expr] | None:
        """A chain of one commutative, associative operator as operands in the order to
        evaluate them, or None to build ``e`` as written. The base builder never reorders."""
        return None

    def binary(self, e: A.BinExpr) -> None:
        chain = self.operands(e)
        if chain is not None:
            self.expr(chain[0])
            for x in chain[1:]:
                if not self.take_under(x):
                    self.expr(x)
                self.emit(BINARY_OPS[e.op])
                self.model.pop_entries(2)
                self.model.push(None, 1)
            return
        first, second = e.lhs, e.rhs
        if e.op in COMMUTATIVE_OPS and self.rhs_first(e):
            first, second = second, first
        self.expr(first)  # type: ignore[arg-type]  # the checker typed this operand as an Expr (a Place only on assignment targets)
        if not (e.op in COMMUTATIVE_OPS and self.take_under(second)):
            self.expr(second)  # type: ignore[arg-type]  # the checker typed this operand as an Expr (a Place only on assignment targets)
        out_w = width(e.ty)
        self.model.ensure_space(max(0, out_w - 2))
        if e.op in ("<", "/%"):
            self.emit("Swap", 1)  # B19: the ISA wants the left operand on st0
        self.emit(BINARY_OPS[e.op])
        self.model.pop_entries(2)
        self.model.push(None, out_w)

    def index(self, e: A.IndexExpr) -> None:
        base, k = e.base, e.const_index
        aty = base.ty  # type: ignore[union-attr]  # base was type-checked: its ty is set
        assert isinstance(aty, ArrayTy) and isinstance(aty.size, int)
        ew, total = width(aty.elem), width(aty)
        if k is not None:
            off = (aty.size - 1 - k) * ew
            if isinstance(base, A.PathExpr) and isinstance(base.ref, VarRef):
                ref = base.ref
                self.read(VarRef(ref.var, ref.offset + off, ew, aty.elem))
                return
            self.expr(base)  # type: ignore[arg-type]  # the checker typed this operand as an Expr (a Place only on assignment targets)
            self.model.ensure_space(ew)
            for _ in range(ew):
                self.dup(off + ew - 1)
            self.cleanup_under(ew, total)
            self.model.pop_entries(1)
            self.model.push(None, ew)
            return
        # runtime index: store the array at a fresh scratch region, read the element back
        self.expr(base)  # type: ignore[arg-type]  # the checker typed this operand as an Expr (a Place only on assignment targets)
        addr = self.model.alloc.index(total)
        self.model.ensure_space(1)
        self.emit("Push", addr)
        for n in _chunks(total):  # RAM[addr + j] = flattened element total-1-j
            self.emit("WriteMem", n)
        self.emit("Pop", 1)
        self.model.pop_entries(1)
        self.expr(e.index)  # type: ignore[arg-type]  # the checker typed this operand as an Expr (a Place only on assignment targets)
        self.model.ensure_space(max(2, ew))
        self.emit("Dup", 0)
        self.emit("Push", aty.size)
        self.emit("Swap", 1)
        self.emit("Lt")
        self.emit("Assert", 1)
        if ew > 1:
            self.emit("Push", ew)
            self.emit("Mul")
        self.emit("Push", addr + total - 1)
        self.emit("Swap", 1)
        self.emit("Sub")  # pointer to word 0 of element i
        if ew <= 5:
            self.emit_op(Op("RamRead", fields=(("width", ew),)))
        else:
            for n in _chunks(ew):
                self.emit("ReadMem", n)
            self.emit("Pop", 1)
        self.model.pop_entries(1)
        self.model.push(None, ew)


def _chunks(n: int) -> list[int]:
    out = []
    while n > 0:
        out.append(min(5, n))
        n -= min(5, n)
    return out


def _plain(e: object) -> bool:
    """A literal or a variable read (a field path of one): ``Push``/``Dup`` only, no
    effect, the same value whenever it is evaluated within one expression."""
    return isinstance(e, A.IntLit | A.BoolLit | A.PathExpr)


def _leading_reads(args: Sequence[A.Expr]) -> int:
    """How many leading arguments `call` may evaluate last: the plain ones (`_plain`)
    before the first argument that is not, when one follows and the rotation that puts them
    back under it stays within reach (16 elements); 0 otherwise."""
    k = next((i for i, a in enumerate(args) if not _plain(a)), len(args))
    if k == 0 or k == len(args):
        return 0
    span = sum(width(a.ty) for a in args)
    return k if 0 < span <= CAPACITY and all(width(a.ty) > 0 for a in args) else 0
