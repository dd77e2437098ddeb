"""Syntax tree of a Trident file (spec/trident-language.md §2.1, §3, §5).

Nodes are plain mutable dataclasses: the parser fills the syntax, the checker
(`tasmopt.frontend.checker`) adds the annotations the builder needs (``ty`` on every
expression, resolved references), so the builder takes all widths from checked types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tasmopt.frontend.lexer import AsmBody
from tasmopt.frontend.source import Pos

__all__ = [
    "SizeExpr",
    "SizeLit",
    "SizeName",
    "SizeBin",
    "TypeExpr",
    "PrimT",
    "ArrayT",
    "TupleT",
    "NamedT",
    "Expr",
    "IntLit",
    "BoolLit",
    "Wildcard",
    "PathExpr",
    "CallExpr",
    "StructLit",
    "TupleExpr",
    "ArrayExpr",
    "IndexExpr",
    "BinExpr",
    "Stmt",
    "LetStmt",
    "AssignStmt",
    "IfStmt",
    "ForStmt",
    "ReturnStmt",
    "EventStmt",
    "MatchArm",
    "MatchStmt",
    "AsmStmt",
    "ExprStmt",
    "Block",
    "Attribute",
    "Param",
    "FieldDecl",
    "ConstItem",
    "StructItem",
    "EventItem",
    "FnItem",
    "Use",
    "IoDecl",
    "File",
]


# -- sizes and types ---------------------------------------------------------------------------


@dataclass
class SizeLit:
    value: int
    pos: Pos


@dataclass
class SizeName:
    """A size parameter (``N``) or an integer constant's name."""

    name: str
    pos: Pos


@dataclass
class SizeBin:
    op: str  # "+" or "*"
    lhs: SizeExpr
    rhs: SizeExpr
    pos: Pos


SizeExpr = SizeLit | SizeName | SizeBin


@dataclass
class PrimT:
    name: str  # Field, XField, Bool, U32, Digest
    pos: Pos


@dataclass
class ArrayT:
    elem: TypeExpr
    size: SizeExpr
    pos: Pos


@dataclass
class TupleT:
    elems: list[TypeExpr]
    pos: Pos


@dataclass
class NamedT:
    path: tuple[str, ...]  # ("S",) or ("alias", "S")
    pos: Pos


TypeExpr = PrimT | ArrayT | TupleT | NamedT


# -- expressions --------------------------------------------------------------------------------


@dataclass
class _ExprBase:
    pos: Pos
    #: checked type (a `tasmopt.frontend.types.Ty`), set by the checker
    ty: Any = field(default=None, init=False, repr=False, compare=False)


@dataclass
class IntLit(_ExprBase):
    value: int = 0


@dataclass
class BoolLit(_ExprBase):
    value: bool = False


@dataclass
class Wildcard(_ExprBase):
    """``_`` inside a tuple-assignment target."""


@dataclass
class PathExpr(_ExprBase):
    """``a`` or ``a.b.c``: variable, field chain or constant (resolved by the checker:
    ``ref`` is a `tasmopt.frontend.checker.VarRef` or ``ConstRef``)."""

    segments: tuple[str, ...] = ()
    ref: Any = field(default=None, init=False, repr=False, compare=False)

    @property
    def dotted(self) -> str:
        return ".".join(self.segments)


@dataclass
class CallExpr(_ExprBase):
    """``path<sizes>(args)``; the checker sets ``target`` (user function or intrinsic)."""

    segments: tuple[str, ...] = ()
    generics: list[SizeExpr] = field(default_factory=list)
    args: list[Expr] = field(default_factory=list)
    target: Any = field(default=None, init=False, repr=False, compare=False)

    @property
    def dotted(self) -> str:
        return ".".join(self.segments)


@dataclass
class StructLit(_ExprBase):
    """``S { f: e, ... }``; ``fields`` as written; the checker sets ``ordered`` (the values
    in declaration order)."""

    segments: tuple[str, ...] = ()
    fields: list[tuple[str, Expr, Pos]] = field(default_factory=list)
    ordered: list[Expr] = field(default_factory=list, init=False, repr=False, compare=False)


@dataclass
class TupleExpr(_ExprBase):
    elems: list[Expr] = field(default_factory=list)


@dataclass
class ArrayExpr(_ExprBase):
    elems: list[Expr] = field(default_factory=list)


@dataclass
class IndexExpr(_ExprBase):
    base: Expr | None = None
    index: Expr | None = None
    #: the index value when it is a compile-time constant (set by the checker)
    const_index: int | None = field(default=None, init=False, repr=False, compare=False)


@dataclass
class BinExpr(_ExprBase):
    op: str = ""
    lhs: Expr | None = None
    rhs: Expr | None = None


Expr = (
    IntLit
    | BoolLit
    | Wildcard
    | PathExpr
    | CallExpr
    | StructLit
    | TupleExpr
    | ArrayExpr
    | IndexExpr
    | BinExpr
)


# -- statements ---------------------------------------------------------------------------------


@dataclass
class Block:
    stmts: list[Stmt]
    tail: Expr | None
    pos: Pos
    #: type of the block's value (tail, or a trailing value-yielding if/match), set by checker
    ty: Any = field(default=None, init=False, repr=False, compare=False)


@dataclass
class LetStmt:
    pos: Pos
    mutable: bool
    names: list[tuple[str, Pos]]  # "_" for a wildcard
    is_tuple: bool
    ann: TypeExpr | None
    value: Expr
    #: one `Var` (or None for "_") per name, set by the checker
    vars: list[Any] = field(default_factory=list, init=False, repr=False, compare=False)


@dataclass
class AssignStmt:
    pos: Pos
    targets: list[Expr]  # one PathExpr, or the names of a tuple target
    is_tuple: bool
    value: Expr
    vars: list[Any] = field(default_factory=list, init=False, repr=False, compare=False)


@dataclass
class IfStmt:
    pos: Pos
    cond: Expr
    then: Block
    els: Block | None
    ty: Any = field(default=None, init=False, repr=False, compare=False)


@dataclass
class ForStmt:
    pos: Pos
    var: str | None  # None for "_"
    var_pos: Pos
    start: Expr
    end: Expr
    bound: int | None
    body: Block
    #: the loop variable's `Var` when the body reads it, else None (set by checker)
    loop_var: Any = field(default=None, init=False, repr=False, compare=False)


@dataclass
class ReturnStmt:
    pos: Pos
    value: Expr | None


@dataclass
class EventStmt:
    pos: Pos
    kind: str  # "reveal" or "seal"
    name: str
    name_pos: Pos
    fields: list[tuple[str, Expr, Pos]]
    #: (tag, field count, values in declaration order), set by the checker
    resolved: Any = field(default=None, init=False, repr=False, compare=False)


@dataclass
class MatchArm:
    pattern: Any  # int, bool, "_" or ("struct", path, fields)
    pos: Pos
    body: Block


@dataclass
class MatchStmt:
    pos: Pos
    scrutinee: Expr
    arms: list[MatchArm]
    ty: Any = field(default=None, init=False, repr=False, compare=False)


@dataclass
class AsmStmt:
    pos: Pos
    body: AsmBody


@dataclass
class ExprStmt:
    pos: Pos
    expr: Expr


Stmt = (
    LetStmt
    | AssignStmt
    | IfStmt
    | ForStmt
    | ReturnStmt
    | EventStmt
    | MatchStmt
    | AsmStmt
    | ExprStmt
)


# -- items --------------------------------------------------------------------------------------


@dataclass
class Attribute:
    name: str
    arg: str | None  # raw token texts joined by single spaces
    pos: Pos


@dataclass
class Param:
    name: str
    type: TypeExpr
    pos: Pos


@dataclass
class FieldDecl:
    name: str
    type: TypeExpr
    pos: Pos
    pub: bool = False


@dataclass
class ConstItem:
    name: str
    type: TypeExpr
    value: Expr
    pos: Pos
    pub: bool = False
    attrs: list[Attribute] = field(default_factory=list)


@dataclass
class StructItem:
    name: str
    fields: list[FieldDecl]
    pos: Pos
    pub: bool = False
    attrs: list[Attribute] = field(default_factory=list)


@dataclass
class EventItem:
    name: str
    fields: list[FieldDecl]
    pos: Pos
    pub: bool = False
    attrs: list[Attribute] = field(default_factory=list)


@dataclass
class FnItem:
    name: str
    generics: list[tuple[str, Pos]]
    params: list[Param]
    ret: TypeExpr | None
    body: Block | None
    pos: Pos
    pub: bool = False
    attrs: list[Attribute] = field(default_factory=list)

    def attr(self, name: str) -> Attribute | None:
        return next((a for a in self.attrs if a.name == name), None)


@dataclass
class Use:
    path: tuple[str, ...]
    pos: Pos

    @property
    def dotted(self) -> str:
        return ".".join(self.path)


@dataclass
class IoDecl:
    kind: str  # "pub input", "pub output", "sec input", "sec ram"
    type: TypeExpr | None
    slots: list[tuple[int, TypeExpr]]
    pos: Pos


@dataclass
class File:
    kind: str  # "program" or "module"
    name: str  # dotted
    name_pos: Pos
    uses: list[Use]
    io: list[IoDecl]
    items: list[ConstItem | StructItem | EventItem | FnItem]
