"""What the checker resolves and the builder consumes: variables, references, call targets,
function signatures and the per-module symbol table (spec/trident-language.md §2.3, §3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tasmopt.frontend import ast as A
from tasmopt.frontend.intrinsics import Intrinsic
from tasmopt.frontend.source import Pos, Source
from tasmopt.frontend.types import StructTy, Ty, width

__all__ = [
    "Var",
    "VarRef",
    "ConstRef",
    "CallTarget",
    "FnSig",
    "EventDef",
    "ModuleEnv",
    "call_label",
]


@dataclass(eq=False)
class Var:
    """One binding (parameter, ``let`` name, loop variable); identity is the object."""

    name: str
    ty: Ty
    mutable: bool
    pos: Pos
    used: bool = False

    @property
    def width(self) -> int:
        return width(self.ty)

    def __repr__(self) -> str:
        return f"Var({self.name})"


@dataclass
class VarRef:
    """A variable or a field path inside it: ``offset`` from the variable's top element to the
    path's top element, ``width`` of the path."""

    var: Var
    offset: int
    width: int
    ty: Ty


@dataclass
class ConstRef:
    value: int
    ty: Ty


@dataclass
class CallTarget:
    """A resolved call: a user function (``label`` as the builder emits it, spec §7.4) or an
    intrinsic (its ops, with the parameter types it was checked against)."""

    kind: str  # "user" or "intrinsic"
    label: str
    params: tuple[Ty, ...]
    ret: Ty
    intrinsic: Intrinsic | None = None
    module: str = ""
    name: str = ""


@dataclass
class FnSig:
    """A function's signature and where it lives."""

    name: str
    module: str
    params: tuple[tuple[str, Ty], ...]
    ret: Ty
    decl: A.FnItem
    intrinsic: str | None = None
    pub: bool = False
    #: size parameter names of a size-generic function (not built itself)
    generics: tuple[str, ...] = ()
    #: size parameter values of an instance of one
    bindings: dict[str, int | str] = field(default_factory=dict)

    @property
    def generic(self) -> bool:
        return bool(self.generics)


@dataclass
class EventDef:
    name: str
    tag: int
    fields: tuple[str, ...]
    decl: A.EventItem


@dataclass
class ModuleEnv:
    """The symbols of one checked module; ``pub`` ones are its exports (spec §2.3)."""

    name: str
    source: Source
    ast: A.File
    aliases: dict[str, str] = field(default_factory=dict)
    consts: dict[str, tuple[ConstRef, bool]] = field(default_factory=dict)
    structs: dict[str, tuple[StructTy, bool]] = field(default_factory=dict)
    events: dict[str, EventDef] = field(default_factory=dict)
    fns: dict[str, FnSig] = field(default_factory=dict)
    #: functions to build, in source order (cfg-active, with a body, not #[test])
    build: list[FnSig] = field(default_factory=list)
    #: extra data for the builder (e.g. ``sec ram`` comments)
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def prefix(self) -> str:
        return self.name.replace(".", "_")


def call_label(module: str, fn: str, local: bool) -> str:
    """``fn`` for a local call, ``@<module with . -> _>__fn`` across modules (spec §7.4)."""
    return fn if local else f"@{module.replace('.', '_')}__{fn}"
