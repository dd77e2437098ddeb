"""Type checking of function bodies (spec/trident-language.md §6): scopes and statements
(expressions: `tasmopt.frontend.check_expr`), annotating the tree for the builder (``ty``
on blocks and value-yielding ``if``/``match``, `Var` lists on ``let`` and assignments, the
loop variable, resolved events).

CF additions (§6 "not checked by Rust"): return type vs. body value; equal branch types of
a value-yielding ``if``/``match``; no ``let`` of a unit value; ``return`` only as the last
statement; ``==`` only on single elements; no ``+``/``*`` on XField (B26); field
assignment ``p.x = v`` is accepted (Rust rejects it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tasmopt.frontend import ast as A
from tasmopt.frontend.check_expr import ExprChecker
from tasmopt.frontend.source import Pos
from tasmopt.frontend.symbols import ConstRef, FnSig, Var, VarRef
from tasmopt.frontend.types import (
    BOOL,
    DIGEST,
    ERROR,
    FIELD,
    U32,
    UNIT,
    TupleTy,
    Ty,
    returns_as,
    show,
    unify,
    width_or,
)

if TYPE_CHECKING:
    from tasmopt.frontend.checker import ModuleChecker

__all__ = ["BodyChecker"]

_U32_MAX = 2**32 - 1


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


class BodyChecker(ExprChecker):
    """Checks one function body."""

    def __init__(self, mc: ModuleChecker, sig: FnSig) -> None:
        self.mc = mc
        self.env = mc.env
        self.diags = mc.diags
        self.sig = sig
        self.scopes: list[dict[str, Var]] = []
        self.local_calls: list[tuple[str, Pos]] = []
        self.sizes = dict(sig.bindings) or {g: g for g in sig.generics}

    # -- function ---------------------------------------------------------------------------

    def check(self) -> None:
        decl, sig = self.sig.decl, self.sig
        body = decl.body
        assert body is not None
        params = {}
        decl.param_vars = []  # type: ignore[attr-defined]  # checker annotation attached to the AST node for the builder
        for (name, ty), p in zip(sig.params, decl.params, strict=True):
            var = Var(name, ty, False, p.pos)
            params[name] = var
            decl.param_vars.append(var)  # type: ignore[attr-defined]  # checker annotation attached to the AST node for the builder
        self.scopes = [params]
        _normalize_returns(body)
        value = self.block(body, value_pos=True)
        where = body.tail.pos if body.tail is not None else decl.pos
        if sig.ret == UNIT and value not in (UNIT, ERROR):
            self.error(
                f"function '{sig.name}' returns nothing, but its body ends with a "
                f"value of type {show(value)}",
                where,
                "drop the value (let _ = ...) or declare a return type",
            )
        elif sig.ret != UNIT and value == UNIT and not self.asm_value(body, sig.ret):
            self.error(
                f"function '{sig.name}' must return {show(sig.ret)}, but its body has no value",
                decl.pos,
            )
        elif sig.ret != UNIT and value != UNIT and not returns_as(sig.ret, value):
            self.error(
                f"return type mismatch: '{sig.name}' returns {show(sig.ret)}, found {show(value)}",
                where,
            )

    @staticmethod
    def asm_value(body: A.Block, ret: Ty) -> bool:
        """A body ending in ``asm(+w)`` provides the w-wide result itself."""
        last = body.stmts[-1] if body.stmts else None
        return isinstance(last, A.AsmStmt) and last.body.effect == width_or(ret, -1)

    # -- scopes -----------------------------------------------------------------------------

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
        if not isinstance(e, A.CallExpr) or e.target is None:
            return False
        t = e.target
        return (
            t.intrinsic is not None
            and t.intrinsic.name == "assert"
            and len(e.args) == 1
            and isinstance(e.args[0], A.BoolLit)
            and not e.args[0].value
        )

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
            self.error(
                "'return' is only allowed as the last statement of a function",
                s.pos,
                "there is no early exit; restructure with if/else",
            )
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
            ann = self.mc.resolve_type(s.ann, self.sizes)
            if ann is not None and not returns_as(ann, ty):
                self.error(
                    f"type mismatch in let: annotated {show(ann)}, value is {show(ty)}", s.value.pos
                )
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
                what = (
                    f"a {len(ty.elems)}-tuple"
                    if isinstance(ty, TupleTy)
                    else f"a value of type {show(ty)}"
                )
                self.error(f"cannot destructure {what} into {n} names", s.pos)
                elems = [ERROR] * n
        s.vars = []
        s.elem_tys = elems  # type: ignore[attr-defined]  # checker annotation attached to the AST node for the builder
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
            self.error(
                f"cannot assign to immutable variable '{var.name}'",
                e.pos,
                f"declare it with 'let mut {var.name}'",
            )
        elif not returns_as(ref.ty, value_ty):
            self.error(
                f"assignment type mismatch: '{e.dotted}' is {show(ref.ty)}, value is "
                f"{show(value_ty)}",
                e.pos,
            )
        return ref

    def assign(self, s: A.AssignStmt) -> None:
        ty = self.expr(s.value)
        if not s.is_tuple:
            s.vars = [self.target(s.targets[0], ty)]  # type: ignore[arg-type]  # a binding target, never a Wildcard here
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
        s.vars = [
            None if isinstance(t, A.Wildcard) else self.target(t, ety)  # type: ignore[arg-type]  # a binding target, never a Wildcard here
            for t, ety in zip(s.targets, elems, strict=True)
        ]
        s.elem_tys = elems  # type: ignore[attr-defined]  # checker annotation attached to the AST node for the builder

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
                self.error(
                    f"if and else branches have different types: {show(t)} and {show(e)}", s.pos
                )
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
            isinstance(s.end, A.PathExpr) and isinstance(s.end.ref, ConstRef)
        )
        if s.bound is None and not constant:
            self.error(
                "loop end must be a compile-time constant, or annotated with a bound",
                s.end.pos,
                "write: for i in 0..n bounded 64 { ... }",
            )
        scope: dict[str, Var] = {}
        var = Var(s.var, U32, False, s.var_pos) if s.var is not None else None
        if var is not None:
            scope[var.name] = var
        self.scopes.append(scope)
        self.block(s.body, value_pos=False)
        self.scopes.pop()
        s.loop_var = var if var is not None and var.used else None

    def event(self, s: A.EventStmt) -> None:
        ev = self.env.events.get(s.name)
        if ev is None:
            for _, value, _ in s.fields:
                self.expr(value)
            self.error(
                f"undefined event '{s.name}'", s.name_pos, "events must be declared in this file"
            )
            return
        values = self.field_values(
            "event", s.name, [(f, FIELD) for f in ev.fields], s.fields, s.name_pos
        )
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
                self.error(
                    "match arms have different types: " + ", ".join(show(t) for t in types), s.pos
                )
                return ERROR
            s.ty = common
        return s.ty
