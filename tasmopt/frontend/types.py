"""Checked Trident types and their stack widths (spec/trident-language.md §4).

A multi-element value occupies consecutive stack slots, first component deepest; nested
aggregates are flattened. Struct types carry their fields (so widths are real, B1 fixed).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "Ty",
    "Prim",
    "ArrayTy",
    "TupleTy",
    "StructTy",
    "FIELD",
    "XFIELD",
    "BOOL",
    "U32",
    "DIGEST",
    "UNIT",
    "ERROR",
    "width",
    "width_or",
    "show",
    "same_type",
    "returns_as",
    "unify",
    "field_slot",
    "DIGEST_WIDTH",
    "EXT_DEGREE",
]

#: Triton digest width and extension degree (spec/tir.md §0).
DIGEST_WIDTH = 5
EXT_DEGREE = 3


@dataclass(frozen=True)
class Prim:
    """``Field``, ``XField``, ``Bool``, ``U32``, ``Digest``, or ``()`` (unit)."""

    name: str


@dataclass(frozen=True)
class ArrayTy:
    """``[elem; size]``; ``size`` is an int, or a string for an opaque size expression of a
    generic function body."""

    elem: Ty
    size: int | str


@dataclass(frozen=True)
class TupleTy:
    elems: tuple[Ty, ...]


@dataclass(frozen=True, eq=False)
class StructTy:
    """A struct, identified by its qualified name (``module.Name``)."""

    qualname: str
    name: str
    fields: tuple[tuple[str, Ty], ...] = field(default=(), repr=False)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StructTy) and other.qualname == self.qualname

    def __hash__(self) -> int:
        return hash(self.qualname)

    def field_type(self, name: str) -> Ty | None:
        return next((t for f, t in self.fields if f == name), None)


Ty = Prim | ArrayTy | TupleTy | StructTy

FIELD = Prim("Field")
XFIELD = Prim("XField")
BOOL = Prim("Bool")
U32 = Prim("U32")
DIGEST = Prim("Digest")
UNIT = Prim("()")
#: The type of an expression that already produced an error (matches everything).
ERROR = Prim("<error>")

_PRIM_WIDTH = {
    "Field": 1,
    "Bool": 1,
    "U32": 1,
    "XField": EXT_DEGREE,
    "Digest": DIGEST_WIDTH,
    "()": 0,
    "<error>": 1,
}


def width(ty: Ty) -> int:
    """Stack width in field elements. Raises ValueError for an opaque (generic) size."""
    w = width_or(ty, None)
    if w is None:
        raise ValueError(f"width of {show(ty)} depends on a size parameter")
    return w


def width_or(ty: Ty, default: int | None) -> int | None:
    """`width`, or ``default`` when it depends on a size parameter (a generic body)."""
    if isinstance(ty, Prim):
        return _PRIM_WIDTH[ty.name]
    parts: list[int | None]
    if isinstance(ty, ArrayTy):
        elem = width_or(ty.elem, default)
        if not isinstance(ty.size, int) or elem is None:
            return default
        return ty.size * elem
    if isinstance(ty, TupleTy):
        parts = [width_or(t, default) for t in ty.elems]
    else:
        parts = [width_or(t, default) for _, t in ty.fields]
    return None if None in parts else sum(parts)  # type: ignore[arg-type]  # no part is None on this branch


def show(ty: Ty | None) -> str:
    """Source spelling of a type (``[Field; 3]``, ``(U32, Digest)``, ``std.x.Point``)."""
    if ty is None:
        return "?"
    if isinstance(ty, Prim):
        return ty.name
    if isinstance(ty, ArrayTy):
        return f"[{show(ty.elem)}; {ty.size}]"
    if isinstance(ty, TupleTy):
        return "(" + ", ".join(show(t) for t in ty.elems) + ")"
    return ty.name


def same_type(a: Ty, b: Ty) -> bool:
    """Exact type equality (spec §6: no implicit conversions); `ERROR` matches anything."""
    return a == b or a == ERROR or b == ERROR


def returns_as(declared: Ty, actual: Ty) -> bool:
    """``actual`` may be returned as (or passed, bound, assigned to) ``declared``: equal,
    or a tuple of exactly five Fields where ``Digest`` is expected (spec §6 allows it for
    returns; CF extends it to arguments, ``let`` annotations, assignments and struct
    fields: the layout is the same)."""
    if same_type(declared, actual):
        return True
    if declared == DIGEST:
        return actual == TupleTy((FIELD,) * DIGEST_WIDTH)
    if isinstance(declared, TupleTy) and isinstance(actual, TupleTy):
        return len(declared.elems) == len(actual.elems) and all(
            returns_as(d, a) for d, a in zip(declared.elems, actual.elems, strict=True)
        )
    if isinstance(declared, ArrayTy) and isinstance(actual, ArrayTy):
        return declared.size == actual.size and returns_as(declared.elem, actual.elem)
    return False


def field_slot(sty: StructTy, name: str) -> tuple[int, int, Ty] | None:
    """``(offset from the struct's top element, width, type)`` of a field: offset = struct
    width - widths of the preceding fields - own width (spec §4)."""
    total = width(sty)
    before = 0
    for fname, fty in sty.fields:
        w = width(fty)
        if fname == name:
            return total - before - w, w, fty
        before += w
    return None


def unify(a: Ty, b: Ty) -> Ty | None:
    """The type of a value that is ``a`` on one branch and ``b`` on another (Digest absorbs a
    five-Field tuple; `ERROR` absorbs anything), or None if they differ."""
    if a == ERROR:
        return b
    if b == ERROR or a == b:
        return a
    if returns_as(a, b):
        return a
    if returns_as(b, a):
        return b
    return None
