"""Module-level checks: imports and aliases, constants, structs, events, function
signatures, intrinsic declarations, recursion, ``fn main`` (spec/trident-language.md §2.3,
§3, §6, §9); function bodies are checked by `tasmopt.frontend.check_body`.

CF choices: a per-file alias map (two ``use`` lines with the same last segment are an
error); ``c.x`` for a loaded module that this file does not ``use`` is accepted with a
warning (the corpus relies on it); constants keep their declared type (Field, U32 or
Bool; Rust types every constant Field); duplicates, bodiless non-intrinsic functions,
unknown intrinsics and a program without ``main`` are errors. Size-generic functions
(``fn f<N>(a: [Field; N])``) are checked once with opaque sizes; each local instance is
checked again with its sizes and built after all other functions as ``f__N3`` in
first-use order (calls of another module's generic function are rejected).
"""

from __future__ import annotations

import copy

from tasmopt.frontend import ast as A
from tasmopt.frontend.check_body import BodyChecker
from tasmopt.frontend.intrinsics import INTRINSICS
from tasmopt.frontend.modules import ModuleUnit
from tasmopt.frontend.source import Diagnostics, Pos
from tasmopt.frontend.symbols import ConstRef, EventDef, FnSig, ModuleEnv
from tasmopt.frontend.types import (
    BOOL,
    DIGEST,
    FIELD,
    U32,
    UNIT,
    XFIELD,
    ArrayTy,
    StructTy,
    TupleTy,
    Ty,
    show,
)

__all__ = ["check_module", "ACTIVE_CFG"]

#: Active ``cfg`` flags: the default build profile (spec §3).
ACTIVE_CFG = frozenset({"debug"})
_PRIMS = {"Field": FIELD, "XField": XFIELD, "Bool": BOOL, "U32": U32, "Digest": DIGEST}
_INTRINSIC_PREFIXES = ("std.", "vm.", "os.", "ext.")
#: Most fields of an event (spec §3).
MAX_EVENT_FIELDS = 9
#: Most instances of size-generic functions per module (guards runaway instantiation).
MAX_INSTANCES = 256
#: Size parameters in scope -> value (int) or opaque spelling (str).
Sizes = dict[str, int | str]


def _active(attrs: list[A.Attribute]) -> bool:
    return all(a.arg in ACTIVE_CFG for a in attrs if a.name == "cfg")


class ModuleChecker:
    """Checks one module against the modules checked before it."""

    def __init__(self, unit: ModuleUnit, loaded: dict[str, ModuleEnv]) -> None:
        self.unit = unit
        self.loaded = loaded
        self.env = ModuleEnv(unit.name, unit.source, unit.ast)
        self.diags = Diagnostics(unit.source)
        self.used_aliases: set[str] = set()
        self.struct_decls: dict[str, A.StructItem] = {}
        self.instances: dict[tuple[str, tuple[int, ...]], FnSig] = {}
        self.pending: list[FnSig] = []
        self.struct_busy: set[str] = set()

    # -- names across modules ---------------------------------------------------------------

    def module_for(self, prefix: tuple[str, ...], pos: Pos) -> ModuleEnv | None:
        """The module that ``prefix`` (``c`` or ``a.b.c``) names here (spec §2.3, CF)."""
        if len(prefix) == 1 and prefix[0] in self.env.aliases:
            self.used_aliases.add(prefix[0])
            return self.loaded[self.env.aliases[prefix[0]]]
        dotted = ".".join(prefix)
        if dotted in self.loaded:
            if dotted not in self.env.aliases.values():
                self.diags.warning(f"module '{dotted}' used without `use`", pos)
            return self.loaded[dotted]
        if len(prefix) == 1:
            found = [m for m in self.loaded if m.split(".")[-1] == prefix[0]]
            if found:
                self.diags.warning(
                    f"module '{prefix[0]}' used without `use` (resolved to '{found[-1]}')", pos
                )
                return self.loaded[found[-1]]
        return None

    # -- types ------------------------------------------------------------------------------

    def resolve_type(self, t: A.TypeExpr, generics: Sizes | None = None) -> Ty | None:
        """The checked type of a type expression, or None after reporting an error.

        ``generics`` maps the size parameters in scope to their value: an int (an instance),
        or a string (an opaque size expression while checking a generic body once)."""
        generics = generics or {}
        if isinstance(t, A.PrimT):
            return _PRIMS[t.name]
        if isinstance(t, A.ArrayT):
            elem = self.resolve_type(t.elem, generics)
            size = self.size(t.size, generics)
            return None if elem is None or size is None else ArrayTy(elem, size)
        if isinstance(t, A.TupleT):
            elems = [self.resolve_type(e, generics) for e in t.elems]
            return None if any(e is None for e in elems) else TupleTy(tuple(elems))  # type: ignore[arg-type]  # no element is None on this branch
        return self.named_type(t)

    def named_type(self, t: A.NamedT) -> Ty | None:
        if len(t.path) == 1:
            name = t.path[0]
            if name in self.env.structs:
                return self.env.structs[name][0]
            if name in self.struct_decls:
                return self.define_struct(self.struct_decls[name])
            self.diags.error(f"unknown type '{name}'", t.pos)
            return None
        module = self.module_for(t.path[:-1], t.pos)
        if module is None:
            self.diags.error(
                f"unknown module '{'.'.join(t.path[:-1])}' in type '{'.'.join(t.path)}'", t.pos
            )
            return None
        entry = module.structs.get(t.path[-1])
        if entry is None or not entry[1]:
            what = "is not public in" if entry else "is not a struct of"
            self.diags.error(
                f"unknown type '{'.'.join(t.path)}': '{t.path[-1]}' {what} module '{module.name}'",
                t.pos,
            )
            return None
        return entry[0]

    def size(self, s: A.SizeExpr, generics: Sizes) -> int | str | None:
        if isinstance(s, A.SizeLit):
            return s.value
        if isinstance(s, A.SizeName):
            if s.name in generics:
                return generics[s.name]
            const = self.env.consts.get(s.name)
            if const is not None:
                return const[0].value
            self.diags.error(f"unknown array size '{s.name}'", s.pos)
            return None
        lhs, rhs = self.size(s.lhs, generics), self.size(s.rhs, generics)
        if lhs is None or rhs is None:
            return None
        if isinstance(lhs, int) and isinstance(rhs, int):
            return lhs + rhs if s.op == "+" else lhs * rhs
        return f"({lhs}{s.op}{rhs})"

    def define_struct(self, item: A.StructItem) -> StructTy | None:
        if item.name in self.env.structs:
            return self.env.structs[item.name][0]
        if item.name in self.struct_busy:
            self.diags.error(f"struct '{item.name}' contains itself", item.pos)
            return None
        self.struct_busy.add(item.name)
        fields: list[tuple[str, Ty]] = []
        for f in item.fields:
            if any(f.name == g for g, _ in fields):
                self.diags.error(f"duplicate field '{f.name}' in struct '{item.name}'", f.pos)
                continue
            ty = self.resolve_type(f.type)
            if ty is not None:
                fields.append((f.name, ty))
        self.struct_busy.discard(item.name)
        sty = StructTy(f"{self.env.name}.{item.name}", item.name, tuple(fields))
        self.env.structs[item.name] = (sty, item.pub)
        return sty

    # -- items ------------------------------------------------------------------------------

    def aliases(self) -> None:
        for use in self.unit.ast.uses:
            alias = use.path[-1]
            if alias in self.env.aliases:
                self.diags.error(
                    f"'{alias}' is imported twice ({self.env.aliases[alias]} and "
                    f"{use.dotted}); the last segment is the alias",
                    use.pos,
                )
            self.env.aliases[alias] = use.dotted

    def items(self) -> None:
        items = [it for it in self.unit.ast.items if _active(it.attrs)]
        names: dict[str, Pos] = {}

        def unique(kind: str, name: str, pos: Pos) -> bool:
            if name in names:
                self.diags.error(f"duplicate {kind} '{name}'", pos)
                return False
            names[name] = pos
            return True

        for it in items:
            if isinstance(it, A.StructItem) and unique("struct", it.name, it.pos):
                self.struct_decls[it.name] = it
        for it in items:
            if isinstance(it, A.ConstItem) and unique("constant", it.name, it.pos):
                self.const(it)
        for it in items:
            if isinstance(it, A.StructItem):
                self.define_struct(it)
        tag = 0
        for it in items:
            if isinstance(it, A.EventItem) and unique("event", it.name, it.pos):
                self.event(it, tag)
                tag += 1
        for it in items:
            if isinstance(it, A.FnItem) and unique("function", it.name, it.pos):
                self.signature(it)

    def const(self, it: A.ConstItem) -> None:
        ty = self.resolve_type(it.type)
        v = it.value
        if not isinstance(v, A.IntLit | A.BoolLit):
            while isinstance(v, A.BinExpr):
                v = v.lhs  # type: ignore[assignment]  # walks a chain of field accesses down to its root
            self.diags.error(
                f"constant '{it.name}' must be an integer literal or true/false", v.pos
            )
            return
        if ty not in (FIELD, U32, BOOL):
            self.diags.error(
                f"constant '{it.name}' must have type Field, U32 or Bool, not {show(ty)}",
                it.type.pos,
            )
            return
        if isinstance(v, A.BoolLit) != (ty == BOOL):
            self.diags.error(f"constant '{it.name}': value does not match type {show(ty)}", v.pos)
            return
        value = int(v.value)
        if ty == U32 and value >= 2**32:
            self.diags.error(f"constant '{it.name}': {value} does not fit U32", v.pos)
            return
        assert ty is not None
        self.env.consts[it.name] = (ConstRef(value, ty), it.pub)

    def event(self, it: A.EventItem, tag: int) -> None:
        if len(it.fields) > MAX_EVENT_FIELDS:
            self.diags.error(
                f"event '{it.name}' has {len(it.fields)} fields, max is {MAX_EVENT_FIELDS}", it.pos
            )
        seen: set[str] = set()
        for f in it.fields:
            if not (isinstance(f.type, A.PrimT) and f.type.name == "Field"):
                self.diags.error(f"event field '{f.name}' must be Field type", f.type.pos)
            if f.name in seen:
                self.diags.error(f"duplicate field '{f.name}' in event '{it.name}'", f.pos)
            seen.add(f.name)
        self.env.events[it.name] = EventDef(it.name, tag, tuple(f.name for f in it.fields), it)

    def signature(self, it: A.FnItem) -> None:
        generics: Sizes = {g: g for g, _ in it.generics}
        params: list[tuple[str, Ty]] = []
        for p in it.params:
            if any(p.name == q for q, _ in params):
                self.diags.error(f"duplicate parameter '{p.name}'", p.pos)
            ty = self.resolve_type(p.type, generics)
            params.append((p.name, ty if ty is not None else FIELD))
        ret: Ty = UNIT
        if it.ret is not None:
            ret = self.resolve_type(it.ret, generics) or UNIT
        intrinsic = self.intrinsic_attr(it)
        test = it.attr("test")
        if test is not None and (it.params or it.ret is not None):
            self.diags.error(
                f"#[test] function '{it.name}' must take no parameters and return nothing", it.pos
            )
        if it.body is None and intrinsic is None:
            self.diags.error(
                f"function '{it.name}' has no body",
                it.pos,
                "only #[intrinsic(...)] functions may be bodiless",
            )
        sig = FnSig(
            it.name,
            self.env.name,
            tuple(params),
            ret,
            it,
            intrinsic,
            it.pub,
            tuple(g for g, _ in it.generics),
        )
        self.env.fns[it.name] = sig
        if it.body is not None and test is None:
            self.env.build.append(sig)

    def intrinsic_attr(self, it: A.FnItem) -> str | None:
        attr = it.attr("intrinsic")
        if attr is None:
            return None
        name = (attr.arg or "").strip()
        mod = self.env.name
        if not (mod.startswith(_INTRINSIC_PREFIXES) or ".ext." in mod):
            self.diags.error(
                "#[intrinsic] is only allowed in std., vm., os. and ext. modules", attr.pos
            )
            return None
        if name not in INTRINSICS:
            self.diags.error(f"unknown intrinsic '{name}'", attr.pos)
            return None
        return name

    # -- size-generic functions -------------------------------------------------------------

    def instantiate(self, sig: FnSig, sizes: tuple[int, ...]) -> FnSig:
        """The instance of a local size-generic function for these sizes (spec §3: label
        ``name__N<sizes joined by _>``), checked after the other bodies, built after all
        other functions in first-use order."""
        key = (sig.name, sizes)
        inst = self.instances.get(key)
        if inst is None:
            bindings: Sizes = dict(zip(sig.generics, sizes, strict=True))
            decl = copy.deepcopy(sig.decl)
            params = tuple(
                (p.name, self.resolve_type(p.type, bindings) or FIELD) for p in decl.params
            )
            ret = self.resolve_type(decl.ret, bindings) or UNIT if decl.ret else UNIT
            name = f"{sig.name}__N{'_'.join(map(str, sizes))}"
            inst = FnSig(name, sig.module, params, ret, decl, None, sig.pub, (), bindings)
            self.instances[key] = inst
            self.pending.append(inst)
        return inst

    # -- whole module -----------------------------------------------------------------------

    def recursion(self, calls: dict[str, list[tuple[str, Pos]]]) -> None:
        state: dict[str, int] = {}
        path: list[str] = []

        def visit(f: str) -> bool:
            state[f] = 1
            path.append(f)
            for g, pos in calls.get(f, []):
                if state.get(g) == 1:
                    cycle = " -> ".join([*path[path.index(g) :], g])
                    self.diags.error(f"recursive call cycle detected: {cycle}", pos)
                    return True
                if g not in state and visit(g):
                    return True
            path.pop()
            state[f] = 2
            return False

        for f in calls:
            if f not in state:
                path.clear()
                if visit(f):
                    return  # one cycle is reported

    def run(self) -> ModuleEnv:
        self.aliases()
        self.items()
        if self.unit.ast.kind == "program":
            main = self.env.fns.get("main")
            if main is None:
                self.diags.error(
                    f"program '{self.env.name}' has no 'fn main'", self.unit.ast.name_pos
                )
            elif main.params or main.ret != UNIT:
                self.diags.error(
                    "'fn main' must take no parameters and return nothing", main.decl.pos
                )
            for io in self.unit.ast.io:
                if io.kind == "sec ram":
                    for addr, t in io.slots:
                        ty = self.resolve_type(t)
                        self.env.notes.setdefault("sec_ram", []).append(
                            f"sec ram[{addr}]: {show(ty)}"
                        )
                elif io.type is not None:
                    self.resolve_type(io.type)
        calls: dict[str, list[tuple[str, Pos]]] = {}
        for sig in self.env.fns.values():
            if sig.decl.body is None or not _active(sig.decl.attrs):
                continue
            body = BodyChecker(self, sig)
            body.check()
            calls[sig.name] = body.local_calls
        self.recursion(calls)
        while self.pending and not self.diags.errors:
            inst = self.pending.pop(0)
            if len(self.instances) > MAX_INSTANCES:
                self.diags.error(
                    f"more than {MAX_INSTANCES} instances of size-generic functions", inst.decl.pos
                )
                break
            BodyChecker(self, inst).check()
            self.env.build.append(inst)
        for alias, dotted in self.env.aliases.items():
            if alias not in self.used_aliases:
                use = next(u for u in self.unit.ast.uses if u.dotted == dotted)
                self.diags.warning(f"unused import '{dotted}'", use.pos)
        self.diags.raise_if_any()
        return self.env


def check_module(unit: ModuleUnit, loaded: dict[str, ModuleEnv]) -> ModuleEnv:
    """Check one module (after all modules it may reference, in ``loaded``) and return its
    symbol table, the bodies annotated for the builder.

    Raises:
        FrontendError: every name, type, item and control error of this module (spec §9).
    """
    return ModuleChecker(unit, loaded).run()
