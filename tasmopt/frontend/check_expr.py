"""Type checking of Trident expressions (spec/trident-language.md §6): literals, paths
(variables, field chains, constants), calls (local, cross-module, intrinsic wrappers and
builtins, spec §3.1 CF resolution), operators, tuples, arrays, indexing, struct literals.
Every expression gets its checked type in ``ty``; paths, calls and literals get the
references the builder needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tasmopt.frontend import ast as A
from tasmopt.frontend.intrinsics import INTRINSICS
from tasmopt.frontend.source import Diagnostics, Pos
from tasmopt.frontend.symbols import (
    CallTarget,
    ConstRef,
    FnSig,
    ModuleEnv,
    Var,
    VarRef,
    call_label,
)
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
    width,
    width_or,
)

if TYPE_CHECKING:
    from tasmopt.frontend.checker import ModuleChecker

__all__ = ["ExprChecker"]


def _has_call(e: A.Expr) -> bool:
    if isinstance(e, A.CallExpr):
        return True
    return any(_has_call(c) for c in _children(e))


def _children(e: A.Expr) -> list[A.Expr]:
    if isinstance(e, A.BinExpr):
        return [e.lhs, e.rhs]  # type: ignore[list-item]  # operands of a binary/index expression are Exprs
    if isinstance(e, A.TupleExpr | A.ArrayExpr):
        return list(e.elems)
    if isinstance(e, A.StructLit):
        return [v for _, v, _ in e.fields]
    if isinstance(e, A.IndexExpr):
        return [e.base, e.index]  # type: ignore[list-item]  # operands of a binary/index expression are Exprs
    if isinstance(e, A.CallExpr):
        return list(e.args)
    return []


def _infer(t: A.TypeExpr, ty: Ty, names: set[str], bound: dict[str, int | str]) -> None:
    """Bind size parameters by matching a declared parameter type against an argument."""
    if isinstance(t, A.ArrayT) and isinstance(ty, ArrayTy):
        if isinstance(t.size, A.SizeName) and t.size.name in names:
            bound.setdefault(t.size.name, ty.size)
        _infer(t.elem, ty.elem, names, bound)
    elif isinstance(t, A.TupleT) and isinstance(ty, TupleTy):
        for te, e in zip(t.elems, ty.elems, strict=False):
            _infer(te, e, names, bound)


class ExprChecker:
    """Expression half of the body checker (`tasmopt.frontend.check_body.BodyChecker`)."""

    mc: ModuleChecker
    env: ModuleEnv
    diags: Diagnostics
    scopes: list[dict[str, Var]]
    local_calls: list[tuple[str, Pos]]
    #: size parameters in scope: value (an instance) or opaque spelling (the generic body)
    sizes: dict[str, int | str]

    def error(self, message: str, pos: Pos, help: str | None = None) -> Ty:
        self.diags.error(message, pos, help)
        return ERROR

    def lookup(self, name: str) -> Var | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def field_values(
        self,
        kind: str,
        name: str,
        declared: list[tuple[str, Ty]],
        given: list[tuple[str, A.Expr, Pos]],
        pos: Pos,
    ) -> list[A.Expr] | None:
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
                    self.error(
                        f"field '{fname}' of {kind} '{name}' is {show(fty)}, value is {show(vt)}",
                        value.pos,
                    )
                by_name[fname] = value
        missing = [f for f, _ in declared if f not in by_name]
        if missing:
            self.error(
                f"missing field{'s' if len(missing) > 1 else ''} "
                f"{', '.join(repr(m) for m in missing)} in {kind} '{name}'",
                pos,
            )
            ok = False
        return [by_name[f] for f, _ in declared] if ok else None

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
        return self.struct_lit(e)

    def var_path(self, var: Var, e: A.PathExpr) -> VarRef | None:
        var.used = True
        ty, off, w = var.ty, 0, width_or(var.ty, 0)
        for seg in e.segments[1:]:
            if not isinstance(ty, StructTy):
                self.error(f"field access '.{seg}' on a value of type {show(ty)}", e.pos)
                return None
            slot = field_slot(ty, seg)
            if slot is None:
                self.error(f"struct '{ty.name}' has no field '{seg}'", e.pos)
                return None
            off, w, ty = off + slot[0], slot[1], slot[2]
        return VarRef(var, off, w, ty)  # type: ignore[arg-type]  # a width: width_or defaults to 0, field slots are ints

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
        name = e.segments[0]
        if len(e.segments) == 1 and name in self.sizes:  # a size parameter, as a Field
            value = self.sizes[name]
            e.ref = ConstRef(value if isinstance(value, int) else 0, FIELD)
            return FIELD
        const = self.const(e)
        if const is not None:
            e.ref = const
            return const.ty
        return self.error(f"undefined variable '{e.dotted}'", e.pos)

    def generic_target(
        self, sig: FnSig, e: A.CallExpr, args: list[Ty], local: bool
    ) -> CallTarget | None:
        """A call of a size-generic function: sizes explicit (``f<3>(..)``) or inferred
        from array arguments; concrete sizes name an instance (spec §3)."""
        if not local:
            self.error(
                f"calling size-generic function '{e.dotted}' of another module is not supported",
                e.pos,
            )
            return None
        n = len(sig.generics)
        if e.generics:
            if len(e.generics) != n:
                self.error(
                    f"'{sig.name}' takes {n} size argument{'s' if n != 1 else ''}, "
                    f"got {len(e.generics)}",
                    e.pos,
                )
                return None
            sizes = [self.mc.size(g, self.sizes) for g in e.generics]
            if any(v is None for v in sizes):
                return None
        else:
            bound: dict[str, int | str] = {}
            for p, at in zip(sig.decl.params, args, strict=False):
                _infer(p.type, at, set(sig.generics), bound)
            missing = [g for g in sig.generics if g not in bound]
            if missing:
                self.error(
                    f"cannot infer size '{missing[0]}' of '{sig.name}'",
                    e.pos,
                    f"write {sig.name}<...>(...)",
                )
                return None
            sizes = [bound[g] for g in sig.generics]
        if all(isinstance(v, int) for v in sizes):
            inst = self.mc.instantiate(sig, tuple(sizes))  # type: ignore[arg-type]  # every size resolved on this branch (None returned earlier)
            return CallTarget(
                "user",
                inst.name,
                tuple(t for _, t in inst.params),
                inst.ret,
                None,
                sig.module,
                inst.name,
            )
        # inside an opaque body: a size may still be a parameter name (str) or unresolved
        bindings: dict[str, int | str] = dict(zip(sig.generics, sizes, strict=True))  # type: ignore[arg-type]  # unresolved sizes stay as resolve_type expects them
        params = tuple(self.mc.resolve_type(p.type, bindings) or ERROR for p in sig.decl.params)
        ret = (self.mc.resolve_type(sig.decl.ret, bindings) or ERROR) if sig.decl.ret else UNIT
        return CallTarget("user", sig.name, params, ret, None, sig.module, sig.name)

    def resolve_call(self, e: A.CallExpr, args: list[Ty]) -> CallTarget | None:
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
                self.error(
                    f"undefined module '{'.'.join(segs[:-1])}'",
                    e.pos,
                    f"add: use <path>.{segs[-2]}",
                )
                return None
            sig = module.fns.get(segs[-1])
            if sig is None or not sig.pub:
                why = "is private" if sig is not None else "is not defined"
                self.error(
                    f"undefined function '{e.dotted}': '{segs[-1]}' {why} in module "
                    f"'{module.name}'",
                    e.pos,
                )
                return None
            local = False
        if sig.generic:
            return self.generic_target(sig, e, args, local)
        params = tuple(t for _, t in sig.params)
        if sig.intrinsic is not None:
            intr = INTRINSICS[sig.intrinsic]
            pw, rw = sum(width(t) for t in params), width(sig.ret)
            if (pw, rw) != (intr.in_width, intr.out_width):
                self.error(
                    f"'{e.dotted}' is declared with {pw} argument and {rw} result "
                    f"elements, but intrinsic '{intr.name}' takes {intr.in_width} and "
                    f"gives {intr.out_width}",
                    e.pos,
                )
                return None
            return CallTarget("intrinsic", intr.name, params, sig.ret, intr, sig.module, sig.name)
        return CallTarget(
            "user",
            call_label(sig.module, sig.name, local),
            params,
            sig.ret,
            None,
            sig.module,
            sig.name,
        )

    def call(self, e: A.CallExpr) -> Ty:
        args = [self.expr(a) for a in e.args]
        target = self.resolve_call(e, args)
        if target is None:
            return ERROR
        e.target = target
        if len(args) != len(target.params):
            return self.error(
                f"'{e.dotted}' takes {len(target.params)} argument"
                f"{'s' if len(target.params) != 1 else ''}, got {len(args)}",
                e.pos,
            )
        for k, (a, want, got) in enumerate(zip(e.args, target.params, args, strict=True)):
            if not returns_as(want, got):
                self.error(
                    f"argument {k + 1} of '{e.dotted}': expected {show(want)}, found {show(got)}",
                    a.pos,
                )
        return target.ret

    def binary(self, e: A.BinExpr) -> Ty:
        lt, rt = self.expr(e.lhs), self.expr(e.rhs)  # type: ignore[arg-type]  # operands of a binary/index expression are Exprs
        op = e.op
        if ERROR in (lt, rt):
            on_error: dict[str, Ty] = {"==": BOOL, "<": BOOL, "/%": TupleTy((U32, U32))}
            return on_error.get(op, ERROR)
        if op in ("+", "*"):
            if lt == rt == FIELD:
                return FIELD
            help_ = (
                "XField arithmetic has no TIR op"
                if XFIELD in (lt, rt)
                else ("convert U32 with as_field(x)" if U32 in (lt, rt) else None)
            )
            return self.error(
                f"operator '{op}' needs Field operands, found {show(lt)} and {show(rt)}",
                e.pos,
                help_,
            )
        if op == "==":
            if not same_type(lt, rt) or width_or(lt, 0) != 1:
                return self.error(
                    f"operator '==' needs two single-element operands of the "
                    f"same type, found {show(lt)} and {show(rt)}",
                    e.pos,
                    "use assert_digest for Digest values" if lt == DIGEST else None,
                )
            return BOOL
        if op == "*.":
            if (lt, rt) != (XFIELD, FIELD):
                return self.error(
                    f"operator '*.' needs XField *. Field, found {show(lt)} and {show(rt)}", e.pos
                )
            return XFIELD
        if lt == rt == U32:
            u32_ops: dict[str, Ty] = {"<": BOOL, "&": U32, "^": U32, "/%": TupleTy((U32, U32))}
            return u32_ops[op]
        return self.error(
            f"operator '{op}' needs U32 operands, found {show(lt)} and {show(rt)}",
            e.pos,
            "convert with as_u32(x)",
        )

    def array(self, e: A.ArrayExpr) -> Ty:
        if not e.elems:
            return self.error("an empty array literal has no type", e.pos)
        types = [self.expr(x) for x in e.elems]
        for x, t in zip(e.elems, types, strict=True):
            if not same_type(t, types[0]):
                self.error(
                    f"array element type mismatch: expected {show(types[0])}, found {show(t)}",
                    x.pos,
                )
        return ArrayTy(types[0], len(types))

    def index(self, e: A.IndexExpr) -> Ty:
        bt = self.expr(e.base)  # type: ignore[arg-type]  # operands of a binary/index expression are Exprs
        idx = e.index
        k: int | None = None
        if isinstance(idx, A.IntLit):
            k = idx.value
            idx.ty = U32
        else:
            it = self.expr(idx)  # type: ignore[arg-type]  # operands of a binary/index expression are Exprs
            if isinstance(idx, A.PathExpr) and isinstance(idx.ref, ConstRef):
                k = idx.ref.value
            elif it not in (U32, ERROR):
                self.error(f"array index must be U32, found {show(it)}", idx.pos)  # type: ignore[union-attr]  # idx is an Expr node with a position
        if bt == ERROR:
            return ERROR
        if not isinstance(bt, ArrayTy):
            return self.error(f"cannot index a value of type {show(bt)}", e.pos)
        if k is not None and isinstance(bt.size, int) and k >= bt.size:
            return self.error(f"index {k} is out of range for {show(bt)}", idx.pos)  # type: ignore[union-attr]  # idx is an Expr node with a position
        e.const_index = k
        return bt.elem

    def struct_lit(self, e: A.StructLit) -> Ty:
        t = (
            self.mc.named_type(A.NamedT(e.segments, e.pos))
            if (
                len(e.segments) > 1
                or e.segments[0] in self.env.structs
                or e.segments[0] in self.mc.struct_decls
            )
            else None
        )
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
            self.error(
                f"fields of struct literal '{t.name}' with calls must be written in "
                "declaration order",
                e.pos,
                "order: " + ", ".join(f for f, _ in t.fields),
            )
        e.ordered = values
        return t
