"""TIR ops: the 54 variants of the Rust `TIROp` enum as one small immutable Python type.

The variant table (`VARIANTS`) is the single description of every op: its enum index (the
neural one-hot index), its tier and the shape of its payload. The JSON codec, validation,
stack effects, lowering and graph features all read it. Source: spec/tir.md §1, §2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Op", "Variant", "VARIANTS", "VARIANT_NAMES", "STRUCTURE_KINDS", "BODY_FIELDS"]


@dataclass(frozen=True, slots=True)
class Variant:
    """One `TIROp` variant.

    Attributes:
        name: variant name, case-sensitive (``"Push"``).
        index: enum declaration index, 0..53 (spec/tir.md §1; the encoder's one-hot index).
        tier: 0 structure, 1 universal, 2 provable, 3 recursion.
        payload: ``"unit"``; ``"u64"``, ``"u32"``, ``"str"`` for newtype variants; ``"struct"``.
        fields: for struct variants, ``(field name, kind)`` in declaration order, kind one of
            ``"u32"``, ``"u64"``, ``"i32"``, ``"str"``, ``"body"`` (a list of ops),
            ``"lines"`` (a list of strings).
    """

    name: str
    index: int
    tier: int
    payload: str
    fields: tuple[tuple[str, str], ...] = ()


def _v(
    name: str,
    index: int,
    tier: int,
    payload: str = "unit",
    fields: tuple[tuple[str, str], ...] = (),
) -> Variant:
    return Variant(name, index, tier, payload, fields)


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        # tier 0: structure
        _v("Call", 0, 0, "str"),
        _v("Return", 1, 0),
        _v("Halt", 2, 0),
        _v("IfElse", 3, 0, "struct", (("then_body", "body"), ("else_body", "body"))),
        _v("IfOnly", 4, 0, "struct", (("then_body", "body"),)),
        _v("Loop", 5, 0, "struct", (("label", "str"), ("body", "body"))),
        _v("FnStart", 6, 0, "str"),
        _v("FnEnd", 7, 0),
        _v("Entry", 8, 0, "str"),
        _v("Comment", 9, 0, "str"),
        _v("Asm", 10, 0, "struct", (("lines", "lines"), ("effect", "i32"))),
        # tier 1: universal
        _v("Push", 11, 1, "u64"),
        _v("Pop", 12, 1, "u32"),
        _v("Dup", 13, 1, "u32"),
        _v("Swap", 14, 1, "u32"),
        _v("Add", 15, 1),
        _v("Sub", 16, 1),
        _v("Mul", 17, 1),
        _v("Neg", 18, 1),
        _v("Invert", 19, 1),
        _v("Eq", 20, 1),
        _v("Lt", 21, 1),
        _v("And", 22, 1),
        _v("Or", 23, 1),
        _v("Xor", 24, 1),
        _v("PopCount", 25, 1),
        _v("Split", 26, 1),
        _v("DivMod", 27, 1),
        _v("Shl", 28, 1),
        _v("Shr", 29, 1),
        _v("Log2", 30, 1),
        _v("Pow", 31, 1),
        _v("ReadIo", 32, 1, "u32"),
        _v("WriteIo", 33, 1, "u32"),
        _v("ReadMem", 34, 1, "u32"),
        _v("WriteMem", 35, 1, "u32"),
        _v("Assert", 36, 1, "u32"),
        _v("Hash", 37, 1, "struct", (("width", "u32"),)),
        _v("Reveal", 38, 1, "struct", (("name", "str"), ("tag", "u64"), ("field_count", "u32"))),
        _v("Seal", 39, 1, "struct", (("name", "str"), ("tag", "u64"), ("field_count", "u32"))),
        _v("RamRead", 40, 1, "struct", (("width", "u32"),)),
        _v("RamWrite", 41, 1, "struct", (("width", "u32"),)),
        # tier 2: provable
        _v("Hint", 42, 2, "u32"),
        _v("SpongeInit", 43, 2),
        _v("SpongeAbsorb", 44, 2),
        _v("SpongeSqueeze", 45, 2),
        _v("SpongeLoad", 46, 2),
        _v("MerkleStep", 47, 2),
        _v("MerkleLoad", 48, 2),
        # tier 3: recursion
        _v("ExtMul", 49, 3),
        _v("ExtInvert", 50, 3),
        _v("FoldExt", 51, 3),
        _v("FoldBase", 52, 3),
        _v("ProofBlock", 53, 3, "struct", (("program_hash", "str"), ("body", "body"))),
    )
}

VARIANT_NAMES: tuple[str, ...] = tuple(VARIANTS)
assert [v.index for v in VARIANTS.values()] == list(range(54))

#: Ops that end a straight-line block (design §2): control and structure.
STRUCTURE_KINDS = frozenset(
    {
        "Call",
        "Return",
        "Halt",
        "IfElse",
        "IfOnly",
        "Loop",
        "FnStart",
        "FnEnd",
        "Entry",
        "Asm",
        "ProofBlock",
    }
)

#: Struct fields that hold nested op lists, per variant.
BODY_FIELDS: dict[str, tuple[str, ...]] = {
    name: tuple(f for f, kind in v.fields if kind == "body")
    for name, v in VARIANTS.items()
    if any(kind == "body" for _, kind in v.fields)
}


@dataclass(frozen=True, slots=True)
class Op:
    """One TIR op.

    Attributes:
        kind: variant name (a key of `VARIANTS`).
        value: payload of a newtype variant (``Push`` -> int, ``Call`` -> str), else None.
        fields: payload of a struct variant as ``((name, value), ...)`` in declaration order;
            bodies are tuples of `Op`, ``Asm.lines`` a tuple of str.

    Examples: ``Op("Add")``, ``Op("Push", 5)``,
    ``Op("IfElse", fields=(("then_body", (...)), ("else_body", (...))))``.
    """

    kind: str
    value: int | str | None = None
    fields: tuple[tuple[str, Any], ...] = ()

    @property
    def variant(self) -> Variant:
        return VARIANTS[self.kind]

    def get(self, name: str) -> Any:
        """A struct field by name. Raises KeyError if the variant has no such field."""
        for key, val in self.fields:
            if key == name:
                return val
        raise KeyError(f"{self.kind} has no field {name!r}")

    @property
    def bodies(self) -> tuple[tuple[str, tuple[Op, ...]], ...]:
        """Nested op lists as ``((field name, ops), ...)``; empty for non-nesting ops."""
        return tuple((f, self.get(f)) for f in BODY_FIELDS.get(self.kind, ()))

    @property
    def is_structure(self) -> bool:
        """True if the op ends a straight-line block (design §2)."""
        return self.kind in STRUCTURE_KINDS

    def replace_bodies(self, **bodies: tuple[Op, ...]) -> Op:
        """A copy with some body fields replaced."""
        return Op(self.kind, self.value, tuple((k, bodies.get(k, v)) for k, v in self.fields))

    def __repr__(self) -> str:
        if self.fields:
            inner = ", ".join(f"{k}={v!r}" for k, v in self.fields)
            return f"{self.kind}({inner})"
        if self.value is not None:
            return f"{self.kind}({self.value!r})"
        return self.kind
