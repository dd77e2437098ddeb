"""Type checking of function bodies (spec/trident-language.md §6): scopes, every statement
and expression, annotating the tree for the builder (``ty`` on expressions and blocks,
`VarRef`/`ConstRef` on paths, `CallTarget` on calls, `Var` lists on ``let`` and
assignments).

CF additions (§6 "not checked by Rust"): return type vs. body value; equal branch types of
a value-yielding ``if``/``match``; no ``let`` of a unit value; ``return`` only as the last
statement; ``==`` only on single elements; no ``+``/``*`` on XField (B26); field
assignment ``p.x = v`` is accepted (Rust rejects it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tasmopt.frontend import ast as A
from tasmopt.frontend.intrinsics import INTRINSICS
from tasmopt.frontend.source import Pos
from tasmopt.frontend.symbols import CallTarget, ConstRef, FnSig, Var, VarRef, call_label
from tasmopt.frontend.types import (
    BOOL,
    DIGEST,
    ERROR,
    FIELD,
    U32,
    UNIT,
    XFIELD,
    ArrayTy,
    StructTy,
    TupleTy,
    Ty,
    field_slot,
    returns_as,
    same_type,
    show,
    unify,
    width,
)

if TYPE_CHECKING:
    from tasmopt.frontend.checker import ModuleChecker

__all__ = ["BodyChecker"]

_U32_MAX = 2**32 - 1


def _has_call(e: A.Expr) -> bool:
    if isinstance(e, A.CallExpr):
        return True
    return any(_has_call(c) for c in _children(e))


def _children(e: A.Expr) -> list[A.Expr]:
    if isinstance(e, A.BinExpr):
        return [e.lhs, e.rhs]  # type: ignore[list-item]
    if isinstance(e, A.TupleExpr | A.ArrayExpr):
        return list(e.elems)
    if isinstance(e, A.StructLit):
        return [v for _, v, _ in e.fields]
    if isinstance(e, A.IndexExpr):
        return [e.base, e.index]  # type: ignore[list-item]
    if isinstance(e, A.CallExpr):
        return list(e.args)
    return []


def _normalize_returns(block: A.Block) -> None:
    """A final ``return e`` of a block in tail position becomes its tail (spec §8 B17)."""
    if block.tail is None and block.stmts:
        last = block.stmts[-1]
        if isinstance(last, A.ReturnStmt):
            block.stmts.pop()
            block.tail = last.value
        elif isinstance(last, A.IfStmt):
            _normalize_returns(last.then)
            if last.els is not None:
                _normalize_returns(last.els)
        elif isinstance(last, A.MatchStmt):
            for arm in last.arms:
                _normalize_returns(arm.body)


class BodyChecker:
    """Checks one function body."""

    def __init__(self, mc: ModuleChecker, sig: FnSig) -> None:
        self.mc = mc
        self.env = mc.env
        self.diags = mc.diags
        self.sig = sig
        self.scopes: list[dict[str, Var]] = []
        self.local_calls: list[tuple[str, Pos]] = []

    def error(self, message: str, pos: Pos, help: str | None = None) -> Ty:
        self.diags.error(message, pos, help)
        return ERROR

    # -- function ---------------------------------------------------------------------------

    def check(self) -> None:
        decl, sig = self.sig.decl, self.sig
        body = decl.body
        assert body is not None
        params = {}
        decl.param_vars = []  # type: ignore[attr-defined]
        for (name, ty), p in zip(sig.params, decl.params, strict=True):
            var = Var(name, ty, False, p.pos)
            params[name] = var
            decl.param_vars.append(var)  # type: ignore[attr-defined]
        self.scopes = [params]
        _normalize_returns(body)
        value = self.block(body, value_pos=True)
        where = body.tail.pos if body.tail is not None else decl.pos
        if sig.ret == UNIT and value not in (UNIT, ERROR):
            self.error(f"function '{sig.name}' returns nothing, but its body ends with a "
                       f"value of type {show(value)}", where,
                       "drop the value (let _ = ...) or declare a return type")
        elif sig.ret != UNIT and value == UNIT and not self.asm_value(body, sig.ret):
            self.error(f"function '{sig.name}' must return {show(sig.ret)}, but its body "
                       "has no value", decl.pos)
        elif sig.ret != UNIT and value != UNIT and not returns_as(sig.ret, value):
            self.error(f"return type mismatch: '{sig.name}' returns {show(sig.ret)}, found "
                       f"{show(value)}", where)

    @staticmethod
    def asm_value(body: A.Block, ret: Ty) -> bool:
        """A body ending in ``asm(+w)`` provides the w-wide result itself."""
        last = body.stmts[-1] if body.stmts else None
        return isinstance(last, A.AsmStmt) and last.body.effect == width(ret)

    # -- scopes -----------------------------------------------------------------------------

    def lookup(self, name: str) -> Var | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def block(self, b: A.Block, value_pos: bool) -> Ty:
        """Check a block; its value type (UNIT if none) is stored in ``b.ty``."""
        self.scopes.append({})
        unreachable = False
        ty: Ty = UNIT
        for i, s in enumerate(b.stmts):
            if unreachable:
                self.error("unreachable code", s.pos)
                unreachable = False
            last = i == len(b.stmts) - 1 and b.tail is None
            ty = self.stmt(s, value_pos and last)
            unreachable = isinstance(s, A.ExprStmt) and self.diverges(s.expr)
        if b.tail is not None:
            if unreachable:
                self.error("unreachable tail expression", b.tail.pos)
            ty = self.expr(b.tail)
        elif not b.stmts or not isinstance(b.stmts[-1], A.IfStmt | A.MatchStmt):
            ty = UNIT
        self.scopes.pop()
        b.ty = ty
        return ty

    @staticmethod
    def diverges(e: A.Expr) -> bool:
        t = e.target if isinstance(e, A.CallExpr) else None
        return (t is not None and t.intrinsic is not None and t.intrinsic.name == "assert"
                and len(e.args) == 1 and isinstance(e.args[0], A.BoolLit)  # type: ignore[union-attr]
                and not e.args[0].value)  # type: ignore[union-attr]

    # -- statements -------------------------------------------------------------------------

    def stmt(self, s: A.Stmt, value_pos: bool) -> Ty:
        """Check a statement; returns the value it yields (if/match in value position)."""
        if isinstance(s, A.LetStmt):
            self.let(s)
        elif isinstance(s, A.AssignStmt):
            self.assign(s)
        elif isinstance(s, A.IfStmt):
            return self.if_stmt(s, value_pos)
        elif isinstance(s, A.ForStmt):
            self.for_stmt(s)
        elif isinstance(s, A.ReturnStmt):
            if s.value is not None:
                self.expr(s.value)
            self.error("'return' is only allowed as the last statement of a function", s.pos,
                       "there is no early exit; restructure with if/else")
        elif isinstance(s, A.EventStmt):
            self.event(s)
        elif isinstance(s, A.MatchStmt):
            return self.match(s, value_pos)
        elif isinstance(s, A.AsmStmt):
            if s.body.target not in (None, "triton"):
                self.diags.warning(f"asm block for target '{s.body.target}' is skipped", s.pos)
        else:
            self.expr(s.expr)
        return UNIT

    def let(self, s: A.LetStmt) -> None:
        ty = self.expr(s.value)
        if ty == UNIT:
            self.error("cannot bind a unit value", s.value.pos)
            ty = ERROR
        if s.ann is not None:
            ann = self.mc.resolve_type(s.ann)
            if ann is not None and not returns_as(ann, ty):
                self.error(f"type mismatch in let: annotated {show(ann)}, value is "
                           f"{show(ty)}", s.value.pos)
        elems: list[Ty] = [ty]
        if s.is_tuple:
            n = len(s.names)
            if isinstance(ty, TupleTy) and len(ty.elems) == n:
                elems = list(ty.elems)
            elif ty == DIGEST and n == 5:
                elems = [FIELD] * 5
            elif ty == ERROR:
                elems = [ERROR] * n
            else:
                what = (f"a {len(ty.elems)}-tuple" if isinstance(ty, TupleTy)
                        else f"a value of type {show(ty)}")
                self.error(f"cannot destructure {what} into {n} names", s.pos)
                elems = [ERROR] * n
        s.vars = []
        s.elem_tys = elems  # type: ignore[attr-defined]
        seen: set[str] = set()
        for (name, pos), ety in zip(s.names, elems, strict=True):
            if name == "_":
                s.vars.append(None)
                continue
            if name in seen:
                self.error(f"'{name}' is bound twice in this pattern", pos)
            seen.add(name)
            var = Var(name, ety, s.mutable, pos)
            self.scopes[-1][name] = var
            s.vars.append(var)

    def target(self, e: A.PathExpr, value_ty: Ty) -> VarRef | None:
        var = self.lookup(e.segments[0])
        if var is None:
            what = "constant" if self.const(e) is not None else "undefined variable"
            self.error(f"cannot assign to {what} '{e.dotted}'", e.pos)
            return None
        ref = self.var_path(var, e)
        if ref is None:
            return None
        if not var.mutable:
            self.error(f"cannot assign to immutable variable '{var.name}'", e.pos,
                       f"declare it with 'let mut {var.name}'")
        elif not returns_as(ref.ty, value_ty):
            self.error(f"assignment type mismatch: '{e.dotted}' is {show(ref.ty)}, value is "
                       f"{show(value_ty)}", e.pos)
        return ref

    def assign(self, s: A.AssignStmt) -> None:
        ty = self.expr(s.value)
        if not s.is_tuple:
            s.vars = [self.target(s.targets[0], ty)]  # type: ignore[arg-type]
            return
        n = len(s.targets)
        if isinstance(ty, TupleTy) and len(ty.elems) == n:
            elems = list(ty.elems)
        elif ty == DIGEST and n == 5:
            elems = [FIELD] * 5
        else:
            if ty != ERROR:
                self.error(f"cannot assign a value of type {show(ty)} to {n} names", s.pos)
            elems = [ERROR] * n
        s.vars = [None if isinstance(t, A.Wildcard) else self.target(t, ety)  # type: ignore[arg-type]
                  for t, ety in zip(s.targets, elems, strict=True)]
        s.elem_tys = elems  # type: ignore[attr-defined]

    def cond(self, e: A.Expr) -> None:
        ty = self.expr(e)
        if ty not in (BOOL, FIELD, ERROR):
            self.error(f"condition must be Bool or Field, found {show(ty)}", e.pos)

    def if_stmt(self, s: A.IfStmt, value_pos: bool) -> Ty:
        self.cond(s.cond)
        t = self.block(s.then, value_pos)
        e = self.block(s.els, value_pos) if s.els is not None else UNIT
        s.ty = UNIT
        if value_pos and s.els is not None and (t != UNIT or e != UNIT):
            common = unify(t, e)
            if common is None:
                self.error(f"if and else branches have different types: {show(t)} and "
                           f"{show(e)}", s.pos)
                return ERROR
            s.ty = common
        return s.ty

    def for_stmt(self, s: A.ForStmt) -> None:
        st = self.expr(s.start)
        if st not in (U32, FIELD, ERROR):
            self.error(f"loop start must be U32, found {show(st)}", s.start.pos)
        et = self.expr(s.end)
        if et not in (U32, FIELD, ERROR):
            self.error(f"loop end must be U32 or Field, found {show(et)}", s.end.pos)
        constant = isinstance(s.end, A.IntLit) or (
            isinstance(s.end, A.PathExpr) and isinstance(s.end.ref, ConstRef))
        if s.bound is None and not constant:
            self.error("loop end must be a compile-time constant, or annotated with a bound",
                       s.end.pos, "write: for i in 0..n bounded 64 { ... }")
        scope: dict[str, Var] = {}
        var = Var(s.var, U32, False, s.var_pos) if s.var is not None else None
        if var is not None:
            scope[var.name] = var
        self.scopes.append(scope)
        self.block(s.body, value_pos=False)
        self.scopes.pop()
        s.loop_var = var if var is not None and var.used else None

    def field_values(self, kind: str, name: str, declared: list[tuple[str, Ty]],
                     given: list[tuple[str, A.Expr, Pos]], pos: Pos) -> list[A.Expr] | None:
        """Check ``{f: e, ...}`` against declared fields; values in declaration order."""
        names = {f for f, _ in declared}
        by_name: dict[str, A.Expr] = {}
        ok = True
        for fname, value, fpos in given:
            vt = self.expr(value)
            if fname in by_name:
                self.error(f"duplicate field '{fname}' in {kind} '{name}'", fpos)
                ok = False
            elif fname not in names:
                self.error(f"{kind} '{name}' has no field '{fname}'", fpos)
                ok = False
            else:
                fty = next(t for f, t in declared if f == fname)
                if not returns_as(fty, vt):
                    self.error(f"field '{fname}' of {kind} '{name}' is {show(fty)}, value is "
                               f"{show(vt)}", value.pos)
                by_name[fname] = value
        missing = [f for f, _ in declared if f not in by_name]
        if missing:
            self.error(f"missing field{'s' if len(missing) > 1 else ''} "
                       f"{', '.join(repr(m) for m in missing)} in {kind} '{name}'", pos)
            ok = False
        return [by_name[f] for f, _ in declared] if ok else None

    def event(self, s: A.EventStmt) -> None:
        ev = self.env.events.get(s.name)
        if ev is None:
            for _, value, _ in s.fields:
                self.expr(value)
            self.error(f"undefined event '{s.name}'", s.name_pos,
                       "events must be declared in this file")
            return
        values = self.field_values("event", s.name, [(f, FIELD) for f in ev.fields], s.fields,
                                   s.name_pos)
        if values is not None:
            s.resolved = (ev.tag, len(ev.fields), values)

    def match(self, s: A.MatchStmt, value_pos: bool) -> Ty:
        st = self.expr(s.scrutinee)
        if st not in (FIELD, U32, BOOL, ERROR):
            self.error(f"cannot match on a value of type {show(st)}", s.scrutinee.pos)
        seen_wild = False
        bools: set[bool] = set()
        types: list[Ty] = []
        for arm in s.arms:
            p = arm.pattern
            if seen_wild:
                self.error("pattern after '_' is unreachable", arm.pos)
            if p == "_":
                seen_wild = True
            elif isinstance(p, tuple):
                self.error("struct patterns are not supported", arm.pos)
            elif isinstance(p, bool):
                if st not in (BOOL, ERROR):
                    self.error(f"pattern type mismatch: Bool pattern on {show(st)}", arm.pos)
                bools.add(p)
            elif st == BOOL:
                self.error("pattern type mismatch: integer pattern on Bool", arm.pos)
            elif st == U32 and p > _U32_MAX:
                self.error(f"pattern {p} does not fit U32", arm.pos)
            types.append(self.block(arm.body, value_pos))
        if not seen_wild and not (st == BOOL and bools == {True, False}):
            self.error("match is not exhaustive (add a '_' arm)", s.pos)
        s.ty = UNIT
        if value_pos and any(t != UNIT for t in types):
            common: Ty | None = types[0]
            for t in types[1:]:
                common = unify(common, t) if common is not None else None
            if common is None:
                self.error("match arms have different types: "
                           + ", ".join(show(t) for t in types), s.pos)
                return ERROR
            s.ty = common
        return s.ty

    # -- expressions ------------------------------------------------------------------------

    def expr(self, e: A.Expr) -> Ty:
        """Check an expression and store its type in ``e.ty``."""
        ty = self._expr(e)
        e.ty = ty
        return ty

    def _expr(self, e: A.Expr) -> Ty:
        if isinstance(e, A.IntLit):
            return FIELD
        if isinstance(e, A.BoolLit):
            return BOOL
        if isinstance(e, A.Wildcard):
            return self.error("'_' is not a value", e.pos)
        if isinstance(e, A.PathExpr):
            return self.path(e)
        if isinstance(e, A.CallExpr):
            return self.call(e)
        if isinstance(e, A.BinExpr):
            return self.binary(e)
        if isinstance(e, A.TupleExpr):
            elems = [self.expr(x) for x in e.elems]
            for x, t in zip(e.elems, elems, strict=True):
                if t == UNIT:
                    self.error("a tuple element cannot be a unit value", x.pos)
            return TupleTy(tuple(elems))
        if isinstance(e, A.ArrayExpr):
            return self.array(e)
        if isinstance(e, A.IndexExpr):
            return self.index(e)
        return self.struct_lit(e)  # type: ignore[arg-type]

    def var_path(self, var: Var, e: A.PathExpr) -> VarRef | None:
        var.used = True
        ty, off, w = var.ty, 0, var.width
        for seg in e.segments[1:]:
            if not isinstance(ty, StructTy):
                self.error(f"field access '.{seg}' on a value of type {show(ty)}", e.pos)
                return None
            slot = field_slot(ty, seg)
            if slot is None:
                self.error(f"struct '{ty.name}' has no field '{seg}'", e.pos)
                return None
            off, w, ty = off + slot[0], slot[1], slot[2]
        return VarRef(var, off, w, ty)

    def const(self, e: A.PathExpr) -> ConstRef | None:
        segs = e.segments
        if len(segs) == 1:
            entry = self.env.consts.get(segs[0])
            return entry[0] if entry else None
        module = self.mc.module_for(segs[:-1], e.pos)
        entry = module.consts.get(segs[-1]) if module is not None else None
        return entry[0] if entry and entry[1] else None

    def path(self, e: A.PathExpr) -> Ty:
        var = self.lookup(e.segments[0])
        if var is not None:
            ref = self.var_path(var, e)
            if ref is None:
                return ERROR
            e.ref = ref
            return ref.ty
        const = self.const(e)
        if const is not None:
            e.ref = const
            return const.ty
        return self.error(f"undefined variable '{e.dotted}'", e.pos)

    def resolve_call(self, e: A.CallExpr) -> CallTarget | None:
        segs = e.segments
        if len(segs) == 1:
            sig = self.env.fns.get(segs[0])
            if sig is None:
                intr = INTRINSICS.get(segs[0])
                if intr is None:
                    self.error(f"undefined function '{segs[0]}'", e.pos)
                    return None
                return CallTarget("intrinsic", intr.name, intr.params, intr.ret, intr)
            if sig.intrinsic is None:
                self.local_calls.append((sig.name, e.pos))
            local = True
        else:
            module = self.mc.module_for(segs[:-1], e.pos)
            if module is None:
                self.error(f"undefined module '{'.'.join(segs[:-1])}'", e.pos,
                           f"add: use <path>.{segs[-2]}")
                return None
            sig = module.fns.get(segs[-1])
            if sig is None or not sig.pub:
                why = "is private" if sig is not None else "is not defined"
                self.error(f"undefined function '{e.dotted}': '{segs[-1]}' {why} in module "
                           f"'{module.name}'", e.pos)
                return None
            local = False
        if sig.generic:
            self.error(f"calling size-generic function '{sig.name}' is not supported", e.pos)
            return None
        params = tuple(t for _, t in sig.params)
        if sig.intrinsic is not None:
            intr = INTRINSICS[sig.intrinsic]
            pw, rw = sum(width(t) for t in params), width(sig.ret)
            if (pw, rw) != (intr.in_width, intr.out_width):
                self.error(f"'{e.dotted}' is declared with {pw} argument and {rw} result "
                           f"elements, but intrinsic '{intr.name}' takes {intr.in_width} and "
                           f"gives {intr.out_width}", e.pos)
                return None
            return CallTarget("intrinsic", intr.name, params, sig.ret, intr, sig.module,
                              sig.name)
        return CallTarget("user", call_label(sig.module, sig.name, local), params, sig.ret,
                          None, sig.module, sig.name)

    def call(self, e: A.CallExpr) -> Ty:
        target = self.resolve_call(e)
        args = [self.expr(a) for a in e.args]
        if target is None:
            return ERROR
        e.target = target
        if len(args) != len(target.params):
            return self.error(f"'{e.dotted}' takes {len(target.params)} argument"
                              f"{'s' if len(target.params) != 1 else ''}, got {len(args)}",
                              e.pos)
        for k, (a, want, got) in enumerate(zip(e.args, target.params, args, strict=True)):
            if not returns_as(want, got):
                self.error(f"argument {k + 1} of '{e.dotted}': expected {show(want)}, found "
                           f"{show(got)}", a.pos)
        return target.ret

    def binary(self, e: A.BinExpr) -> Ty:
        lt, rt = self.expr(e.lhs), self.expr(e.rhs)  # type: ignore[arg-type]
        op = e.op
        if ERROR in (lt, rt):
            return {"==": BOOL, "<": BOOL, "/%": TupleTy((U32, U32))}.get(op, ERROR)
        if op in ("+", "*"):
            if lt == rt == FIELD:
                return FIELD
            help_ = "XField arithmetic has no TIR op" if XFIELD in (lt, rt) else (
                "convert U32 with as_field(x)" if U32 in (lt, rt) else None)
            return self.error(f"operator '{op}' needs Field operands, found {show(lt)} and "
                              f"{show(rt)}", e.pos, help_)
        if op == "==":
            if not same_type(lt, rt) or width(lt) != 1:
                return self.error(f"operator '==' needs two single-element operands of the "
                                  f"same type, found {show(lt)} and {show(rt)}", e.pos,
                                  "use assert_digest for Digest values" if lt == DIGEST
                                  else None)
            return BOOL
        if op == "*.":
            if (lt, rt) != (XFIELD, FIELD):
                return self.error(f"operator '*.' needs XField *. Field, found {show(lt)} and "
                                  f"{show(rt)}", e.pos)
            return XFIELD
        if lt == rt == U32:
            return {"<": BOOL, "&": U32, "^": U32, "/%": TupleTy((U32, U32))}[op]
        return self.error(f"operator '{op}' needs U32 operands, found {show(lt)} and "
                          f"{show(rt)}", e.pos, "convert with as_u32(x)")

    def array(self, e: A.ArrayExpr) -> Ty:
        if not e.elems:
            return self.error("an empty array literal has no type", e.pos)
        types = [self.expr(x) for x in e.elems]
        for x, t in zip(e.elems, types, strict=True):
            if not same_type(t, types[0]):
                self.error(f"array element type mismatch: expected {show(types[0])}, found "
                           f"{show(t)}", x.pos)
        return ArrayTy(types[0], len(types))

    def index(self, e: A.IndexExpr) -> Ty:
        bt = self.expr(e.base)  # type: ignore[arg-type]
        idx = e.index
        k: int | None = None
        if isinstance(idx, A.IntLit):
            k = idx.value
            idx.ty = U32
        else:
            it = self.expr(idx)  # type: ignore[arg-type]
            if isinstance(idx, A.PathExpr) and isinstance(idx.ref, ConstRef):
                k = idx.ref.value
            elif it not in (U32, ERROR):
                self.error(f"array index must be U32, found {show(it)}", idx.pos)  # type: ignore[union-attr]
        if bt == ERROR:
            return ERROR
        if not isinstance(bt, ArrayTy):
            return self.error(f"cannot index a value of type {show(bt)}", e.pos)
        if k is not None and isinstance(bt.size, int) and k >= bt.size:
            return self.error(f"index {k} is out of range for {show(bt)}", idx.pos)  # type: ignore[union-attr]
        e.const_index = k
        return bt.elem

    def struct_lit(self, e: A.StructLit) -> Ty:
        t = self.mc.named_type(A.NamedT(e.segments, e.pos)) if (
            len(e.segments) > 1 or e.segments[0] in self.env.structs
            or e.segments[0] in self.mc.struct_decls) else None
        if not isinstance(t, StructTy):
            for _, value, _ in e.fields:
                self.expr(value)
            if t is None and len(e.segments) == 1:
                self.error(f"undefined struct '{e.segments[0]}'", e.pos)
            return ERROR
        values = self.field_values("struct", t.name, list(t.fields), e.fields, e.pos)
        if values is None:
            return ERROR
        written = [v for _, v, _ in e.fields]
        reordered = any(a is not b for a, b in zip(written, values, strict=True))
        if reordered and any(_has_call(v) for v in written):
            self.error(f"fields of struct literal '{t.name}' with calls must be written in "
                       "declaration order", e.pos,
                       "order: " + ", ".join(f for f, _ in t.fields))
        e.ordered = values
        return t

