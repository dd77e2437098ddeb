"""Scalar replacement of aggregates for the builder (issue 36, item 2: struct fields read in
place): every struct-typed parameter and ``let`` variable of a function body becomes one
variable per leaf field, so that the stack model (`tasmopt.frontend.stack`) spills, drops
and takes each field on its own instead of the whole struct.

The stack layout does not change: a struct's fields already sit in declaration order, first
field deepest (spec/trident-language.md §4, `tasmopt.frontend.types.field_slot`), and the
leaf variables take exactly those slots. So the calling convention, and every value the
program computes, stay as they were; only which copies exist changes. The rewrite, on a
deep copy of the checked body:

* a read of a field path that is one leaf (or lies inside one, e.g. an array element)
  reads that leaf; a read that covers several leaves (the whole struct, a nested struct)
  becomes a tuple of leaf reads, which the builder pushes in order as one value;
* ``let s = e`` becomes ``let (s.f1, ..., s.fk) = e`` (a destructuring ``let``: no code,
  the value's slots are named), a struct element of a destructuring ``let`` likewise;
* ``s = e`` and ``s.g = e`` (a nested struct) become destructuring assignments to the
  leaves, ``s.f = e`` an assignment to the leaf.

A field path that cuts a leaf in a way none of these express (none is known) makes the
rewrite give up (`scalarize` returns None) and the function is built as written. The
builder tries both forms and keeps the cheaper (`tasmopt.frontend.builder`); the
differential tests run both against a Python interpretation.

The technique is the classic one of optimizing compilers (scalar replacement of aggregates,
"SRA", e.g. LLVM's ``sroa`` pass); here it exposes the fields to the stack allocator's
per-variable next-use spilling rather than to a register allocator.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator
from typing import Any

from tasmopt.frontend import ast as A
from tasmopt.frontend.symbols import Var, VarRef
from tasmopt.frontend.types import StructTy, Ty, field_slot, width

__all__ = ["forward_copies", "scalarize", "walk_nodes"]

#: fields that hold no expression of the body (types, positions, resolved call targets)
_SKIP = frozenset({"pos", "ty", "target", "generics", "ann", "name_pos", "var_pos"})


class _GiveUp(Exception):
    """A use of a struct variable that the rewrite cannot express with leaf variables."""


@dataclasses.dataclass(frozen=True)
class _Leaf:
    var: Var
    offset: int  # from the struct's top element to the leaf's top element
    width: int


def _leaves(var: Var) -> list[_Leaf]:
    """The struct variable's leaf fields in layout order (first field, deepest, first)."""
    out: list[_Leaf] = []

    def walk(ty: Ty, name: str, offset: int) -> None:
        if isinstance(ty, StructTy) and ty.fields:
            for fname, _fty in ty.fields:
                slot = field_slot(ty, fname)
                assert slot is not None
                off, _w, sub = slot
                walk(sub, f"{name}.{fname}", offset + off)
            return
        w = width(ty)
        if w:
            out.append(_Leaf(Var(name, ty, var.mutable, var.pos, var.used), offset, w))

    walk(var.ty, var.name, 0)
    return out


def _splittable(var: Any) -> bool:
    return isinstance(var, Var) and isinstance(var.ty, StructTy) and bool(var.ty.fields)


class _Rewriter:
    def __init__(self) -> None:
        self.leaves: dict[Var, list[_Leaf]] = {}
        self.memo: dict[int, Any] = {}

    def split(self, var: Var) -> list[_Leaf]:
        if var not in self.leaves:
            self.leaves[var] = _leaves(var)
        return self.leaves[var]

    def refs(self, ref: VarRef) -> list[VarRef]:
        """Leaf references covering ``ref`` exactly, in layout order (deepest first)."""
        lo, hi = ref.offset, ref.offset + ref.width
        leaves = self.split(ref.var)
        for leaf in leaves:  # inside one leaf (the leaf itself, an array element)
            if leaf.offset <= lo and hi <= leaf.offset + leaf.width:
                return [VarRef(leaf.var, lo - leaf.offset, ref.width, ref.ty)]
        covered = [leaf for leaf in leaves if lo <= leaf.offset and leaf.offset + leaf.width <= hi]
        if sum(leaf.width for leaf in covered) != ref.width:
            raise _GiveUp(ref)
        return [VarRef(leaf.var, 0, leaf.width, leaf.var.ty) for leaf in covered]

    # -- the walk -----------------------------------------------------------------------------

    def node(self, node: Any) -> Any:
        key = id(node)
        if key in self.memo:
            return self.memo[key]
        new = self._node(node)
        self.memo[key] = new
        return new

    def _node(self, node: Any) -> Any:
        if isinstance(node, Var | VarRef | str | int | bool | type) or node is None:
            return node
        if isinstance(node, list):
            node[:] = [self.node(x) for x in node]
            return node
        if isinstance(node, tuple):
            return tuple(self.node(x) for x in node)
        if isinstance(node, A.PathExpr) and isinstance(node.ref, VarRef):
            return self.path(node) if _splittable(node.ref.var) else node
        if not dataclasses.is_dataclass(node):
            return node
        for f in dataclasses.fields(node):
            if f.name in _SKIP or f.name == "vars":
                continue
            old = getattr(node, f.name)
            new = self.node(old)
            if new is not old:
                setattr(node, f.name, new)
        if isinstance(node, A.LetStmt):
            self.let(node)
        elif isinstance(node, A.AssignStmt):
            self.assign(node)
        return node

    def path(self, e: A.PathExpr) -> A.Expr:
        refs = self.refs(e.ref)
        reads = [_read(r, e.pos, whole=len(refs) > 1 or _whole(r)) for r in refs]
        if len(reads) == 1:
            reads[0].ty = e.ty
            return reads[0]
        tup = A.TupleExpr(e.pos, elems=list(reads))
        tup.ty = e.ty
        return tup

    def let(self, s: A.LetStmt) -> None:
        if not s.is_tuple:
            var = s.vars[0]
            if not _splittable(var):
                return
            leaves = self.split(var)
            s.vars = [leaf.var for leaf in leaves]
            s.elem_tys = [leaf.var.ty for leaf in leaves]  # type: ignore[attr-defined]  # the checker's attribute of a destructuring let
            s.names = [(leaf.var.name, s.pos) for leaf in leaves]
            s.is_tuple = True
            return
        tys = list(s.elem_tys)  # type: ignore[attr-defined]  # set by the checker on every destructuring let
        new_vars: list[Any] = []
        new_tys: list[Ty] = []
        for var, ty in zip(s.vars, tys, strict=True):
            if _splittable(var):
                for leaf in self.split(var):
                    new_vars.append(leaf.var)
                    new_tys.append(leaf.var.ty)
            else:
                new_vars.append(var)
                new_tys.append(ty)
        s.vars, s.elem_tys = new_vars, new_tys  # type: ignore[attr-defined]  # as above
        s.names = [(v.name if v is not None else "_", s.pos) for v in new_vars]

    def assign(self, s: A.AssignStmt) -> None:
        if not s.is_tuple:
            ref = s.vars[0]
            if not (isinstance(ref, VarRef) and _splittable(ref.var)):
                return
            refs = self.refs(ref)
            s.vars = refs
            if len(refs) > 1:
                s.is_tuple = True
                s.elem_tys = [r.ty for r in refs]  # type: ignore[attr-defined]  # the checker's attribute of a destructuring assignment
            return
        tys = list(s.elem_tys)  # type: ignore[attr-defined]  # set by the checker on every destructuring assignment
        new_refs: list[Any] = []
        new_tys: list[Ty] = []
        for ref, ty in zip(s.vars, tys, strict=True):
            if isinstance(ref, VarRef) and _splittable(ref.var):
                for r in self.refs(ref):
                    new_refs.append(r)
                    new_tys.append(r.ty)
            else:
                new_refs.append(ref)
                new_tys.append(ty)
        s.vars, s.elem_tys = new_refs, new_tys  # type: ignore[attr-defined]  # as above


def _whole(ref: VarRef) -> bool:
    return ref.offset == 0 and ref.width == ref.var.width


def _read(ref: VarRef, pos: Any, whole: bool) -> A.PathExpr:
    """A read of ``ref``: a plain variable read (one segment) when it is the whole leaf, so
    that the builder may take the leaf itself at its last read."""
    e = A.PathExpr(pos, segments=(ref.var.name,) if whole else (ref.var.name, "<part>"))
    e.ref = ref
    e.ty = ref.ty
    return e


def scalarize(params: list[Var], body: A.Block) -> tuple[list[Var], A.Block] | None:
    """The function with its struct variables split into leaf variables (module
    docstring): (parameters, body) of a rewritten deep copy, or None when the body has no
    struct variable or a use that cannot be rewritten. The arguments are not changed."""
    if not _has_struct_var(params, body):
        return None
    params2, body2 = copy.deepcopy((params, body))
    rw = _Rewriter()
    try:
        rw.node(body2)
    except _GiveUp:
        return None
    new_params: list[Var] = []
    for p in params2:
        if _splittable(p):
            new_params.extend(leaf.var for leaf in rw.split(p))
        else:
            new_params.append(p)
    return new_params, body2


def _has_struct_var(params: list[Var], body: A.Block) -> bool:
    return any(_splittable(p) for p in params) or any(
        isinstance(s, A.LetStmt) and any(_splittable(v) for v in s.vars)
        for b in _blocks(body)
        for s in b.stmts
    )


# -- copy forwarding ---------------------------------------------------------------------------


def forward_copies(params: list[Var], body: A.Block) -> tuple[list[Var], A.Block] | None:
    """The function with struct copies turned into moves where that is safe: after ``let b
    = a`` (a whole variable ``a`` that is never assigned in the body), every later read of
    ``a`` in the same block reads ``b`` instead, provided no part of ``b`` it reads can have
    been assigned before it (an assignment's right side is read before its target is
    written; inside a branch or loop any write counts as before any read). ``a``'s last
    read is then the ``let`` itself, and the builder renames ``a``'s slots to ``b`` in
    place instead of copying it (``touch(a, now) = { let mut b = a; b.updated = now;
    b.flags = a.flags * 2; b }`` costs no copy). A rewritten deep copy, or None when no
    copy qualifies. The arguments are not changed."""
    if not _has_copy(body) and not _has_update(body):
        return None
    params2, body2 = copy.deepcopy((params, body))
    done = _literal_updates(body2)
    assigned = {ref.var for ref in _assign_refs(body2)}
    for block in _blocks(body2):
        for i, s in enumerate(block.stmts):
            src = _copy_source(s)
            if src is None or src in assigned:
                continue
            assert isinstance(s, A.LetStmt)  # `_copy_source` says so
            dst: Var = s.vars[0]
            later: list[Any] = [*block.stmts[i + 1 :], *([block.tail] if block.tail else [])]
            if _forwardable(src, dst, later):
                for node in later:
                    _retarget(node, src, dst)
                done = True
    return (params2, body2) if done else None


def _update_source(lit: Any) -> Var | None:
    """The struct variable of the literal's own type from whose same-named fields at least
    half of the literal's fields are computed (``S { a: s.a + k, b: s.b, .. }``: ``s``), or
    None."""
    t = getattr(lit, "ty", None)
    if not isinstance(lit, A.StructLit) or not isinstance(t, StructTy) or not t.fields:
        return None
    counts: dict[Var, int] = {}
    for (fname, _fty), e in zip(t.fields, lit.ordered, strict=True):
        slot = field_slot(t, fname)
        assert slot is not None
        off, w, _ = slot
        own = {
            n.ref.var
            for n in walk_nodes(e)
            if isinstance(n, A.PathExpr)
            and isinstance(n.ref, VarRef)
            and n.ref.var.ty == t
            and (n.ref.offset, n.ref.width) == (off, w)
        }
        for v in own:
            counts[v] = counts.get(v, 0) + 1
    if not counts:
        return None
    src = max(counts, key=lambda v: counts[v])
    return src if 2 * counts[src] >= len(t.fields) else None


def _has_update(body: A.Block) -> bool:
    for b in _blocks(body):
        for s in b.stmts:
            if isinstance(s, A.LetStmt) and not s.is_tuple and _update_source(s.value):
                return True
        if _update_source(b.tail) is not None:
            return True
    return False


def _literal_updates(body: A.Block) -> bool:
    """Rewrite ``let x = S { .. }`` and a block's tail ``S { .. }`` whose fields mostly come
    from the same fields of one variable ``a`` (`_update_source`) into ``let mut x = a``
    followed by one assignment per field that is not a plain copy of ``a``'s, in layout
    order (the order the literal evaluates them in); the tail then reads ``x``. With
    `forward_copies` the copy becomes a move and each update happens in the field's slot.
    True if anything was rewritten."""
    changed = False
    for block in _blocks(body):
        out: list[Any] = []
        for s in block.stmts:
            if not isinstance(s, A.LetStmt) or s.is_tuple or s.vars[0] is None:
                out.append(s)
                continue
            src = _update_source(s.value)
            if src is None or not isinstance(s.value, A.StructLit):
                out.append(s)
                continue
            out += _as_updates(s.vars[0], src, s.value, s.pos)
            changed = True
        tail = block.tail
        src = _update_source(tail)
        if src is not None and isinstance(tail, A.StructLit):
            x = Var("__update", src.ty, True, tail.pos)
            out += _as_updates(x, src, tail, tail.pos)
            block.tail = _read(VarRef(x, 0, x.width, x.ty), tail.pos, whole=True)
            changed = True
        block.stmts = out
    return changed


def _as_updates(x: Var, src: Var, lit: A.StructLit, pos: Any) -> list[Any]:
    t = lit.ty
    let = A.LetStmt(pos, True, [(x.name, pos)], False, None, _read(_whole_ref(src), pos, True))
    let.vars = [x]
    out: list[Any] = [let]
    for (fname, fty), e in zip(t.fields, lit.ordered, strict=True):
        slot = field_slot(t, fname)
        assert slot is not None
        off, w, _ = slot
        ref = getattr(e, "ref", None)
        if isinstance(e, A.PathExpr) and isinstance(ref, VarRef) and ref.var is src:
            if (ref.offset, ref.width) == (off, w):
                continue  # a plain copy of the same field: the copy has it already
        target = VarRef(x, off, w, fty)
        assign = A.AssignStmt(pos, [_read(target, pos, False)], False, e)
        assign.vars = [target]
        out.append(assign)
    return out


def _whole_ref(var: Var) -> VarRef:
    return VarRef(var, 0, var.width, var.ty)


def _copy_source(s: Any) -> Var | None:
    """``a`` of a statement ``let b = a`` (a whole-variable read, ``b`` of the same type)."""
    if not isinstance(s, A.LetStmt) or s.is_tuple or s.vars[0] is None:
        return None
    ref = getattr(s.value, "ref", None)
    if not isinstance(s.value, A.PathExpr) or not isinstance(ref, VarRef):
        return None
    if ref.offset or ref.width != ref.var.width or ref.var is s.vars[0]:
        return None
    return ref.var


def _has_copy(body: A.Block) -> bool:
    return any(_copy_source(s) is not None for b in _blocks(body) for s in b.stmts)


def _blocks(node: Any) -> list[A.Block]:
    """Every block of a body (the body itself first)."""
    out: list[A.Block] = []

    def visit(n: Any) -> None:
        if isinstance(n, A.Block):
            out.append(n)
            for s in n.stmts:
                visit(s)
            visit(n.tail)
        elif isinstance(n, A.IfStmt):
            visit(n.then)
            visit(n.els)
        elif isinstance(n, A.ForStmt):
            visit(n.body)
        elif isinstance(n, A.MatchStmt):
            for arm in n.arms:
                visit(arm.body)
        elif isinstance(n, A.LetStmt | A.ExprStmt):
            visit(getattr(n, "value", getattr(n, "expr", None)))

    visit(node)
    return out


def walk_nodes(node: Any) -> Iterator[Any]:
    """Every AST node below ``node`` (expressions, statements, blocks), each once (a struct
    literal's ``ordered`` parts are its ``fields``' nodes)."""
    seen: set[int] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, list | tuple):
            stack.extend(n)
            continue
        if not dataclasses.is_dataclass(n) or isinstance(n, type | Var | VarRef) or id(n) in seen:
            continue
        seen.add(id(n))
        yield n
        for f in dataclasses.fields(n):
            if f.name not in _SKIP:
                stack.append(getattr(n, f.name))


def _assign_refs(node: Any) -> list[VarRef]:
    return [
        r for n in walk_nodes(node) if isinstance(n, A.AssignStmt) for r in n.vars if r is not None
    ]


def _reads(node: Any, var: Var) -> list[VarRef]:
    return [
        n.ref
        for n in walk_nodes(node)
        if isinstance(n, A.PathExpr) and isinstance(n.ref, VarRef) and n.ref.var is var
    ]


def _overlaps(ref: VarRef, dirty: list[tuple[int, int]]) -> bool:
    lo, hi = ref.offset, ref.offset + ref.width
    return any(lo < b and a < hi for a, b in dirty)


def _forwardable(src: Var, dst: Var, later: list[Any]) -> bool:
    dirty: list[tuple[int, int]] = []  # ranges of dst assigned so far (offset, end)
    for s in later:
        writes = [(r.offset, r.offset + r.width) for r in _assign_refs(s) if r.var is dst]
        if isinstance(s, A.AssignStmt):  # its right side is read before the target is written
            reads = _reads(s.value, src) + [r for t in s.targets for r in _reads(t, src)]
            if any(_overlaps(r, dirty) for r in reads):
                return False
        elif any(_overlaps(r, dirty + writes) for r in _reads(s, src)):
            return False
        dirty += writes
    return True


def _retarget(node: Any, src: Var, dst: Var) -> None:
    for n in walk_nodes(node):
        if isinstance(n, A.PathExpr) and isinstance(n.ref, VarRef) and n.ref.var is src:
            n.ref = VarRef(dst, n.ref.offset, n.ref.width, n.ref.ty)
