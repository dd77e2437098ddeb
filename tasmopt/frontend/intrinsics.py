"""Trident intrinsics and builtins: bare-name signatures and the TIR each one emits after
its arguments (spec/trident-language.md §3.1), with the CF fixes B19 (``pow`` operand
order), B20 (``as_u32`` keeps the low word and asserts the high one is 0), B21 (no bogus
pass-through calls), B24 (RAM operand order) and B25 (true effects of ``sponge_squeeze``,
``sponge_absorb_mem``, ``merkle_step_mem``, the dot steps).
"""

from __future__ import annotations

from dataclasses import dataclass

from tasmopt.frontend.types import (
    BOOL,
    DIGEST,
    FIELD,
    U32,
    UNIT,
    XFIELD,
    ArrayTy,
    TupleTy,
    Ty,
    width,
)
from tasmopt.tir.ops import Op

__all__ = ["Intrinsic", "INTRINSICS"]


@dataclass(frozen=True)
class Intrinsic:
    """One intrinsic.

    Attributes:
        name: the intrinsic name (``#[intrinsic(name)]``; also the builtin's bare name).
        params: bare-name parameter types (a ``vm/`` wrapper's declared ones are used when
            called through the wrapper; their total width must equal ``in_width``).
        ret: bare-name result type.
        ops: TIR emitted after the arguments are pushed (left to right).
    """

    name: str
    params: tuple[Ty, ...]
    ret: Ty
    ops: tuple[Op, ...]

    @property
    def in_width(self) -> int:
        return sum(width(t) for t in self.params)

    @property
    def out_width(self) -> int:
        return width(self.ret)


def _ops(*spec: str | tuple) -> tuple[Op, ...]:
    out = []
    for s in spec:
        if isinstance(s, str):
            out.append(Op(s))
        elif s[0] in ("Hash", "RamRead", "RamWrite"):
            out.append(Op(s[0], fields=(("width", s[1]),)))
        else:
            out.append(Op(s[0], s[1]))
    return tuple(out)


def _tuple(*elems: Ty) -> TupleTy:
    return TupleTy(tuple(elems))


_F = FIELD
_INTRINSICS = [
    Intrinsic("pub_read", (), _F, _ops(("ReadIo", 1))),
    Intrinsic("pub_read2", (), _tuple(_F, _F), _ops(("ReadIo", 2))),
    Intrinsic("pub_read3", (), _tuple(_F, _F, _F), _ops(("ReadIo", 3))),
    Intrinsic("pub_read4", (), _tuple(_F, _F, _F, _F), _ops(("ReadIo", 4))),
    Intrinsic("pub_read5", (), DIGEST, _ops(("ReadIo", 5))),
    Intrinsic("pub_write", (_F,), UNIT, _ops(("WriteIo", 1))),
    *(Intrinsic(f"pub_write{n}", (_F,) * n, UNIT, _ops(("WriteIo", n))) for n in range(2, 6)),
    Intrinsic("divine", (), _F, _ops(("Hint", 1))),
    Intrinsic("divine3", (), _tuple(_F, _F, _F), _ops(("Hint", 3))),
    Intrinsic("divine5", (), DIGEST, _ops(("Hint", 5))),
    Intrinsic("assert", (BOOL,), UNIT, _ops(("Assert", 1))),
    Intrinsic("assert_eq", (_F, _F), UNIT, _ops("Eq", ("Assert", 1))),
    Intrinsic("assert_digest", (DIGEST, DIGEST), UNIT, _ops(("Assert", 5), ("Pop", 5))),
    Intrinsic("field_add", (_F, _F), _F, _ops("Add")),
    Intrinsic("field_mul", (_F, _F), _F, _ops("Mul")),
    Intrinsic("sub", (_F, _F), _F, _ops("Sub")),
    Intrinsic("neg", (_F,), _F, _ops("Neg")),
    Intrinsic("inv", (_F,), _F, _ops("Invert")),
    Intrinsic("split", (_F,), _tuple(U32, U32), _ops("Split")),
    Intrinsic("log2", (U32,), U32, _ops("Log2")),
    # B19: `pow` is base st0, exponent st1: bring the base (pushed first) to the top.
    Intrinsic("pow", (U32, U32), U32, _ops(("Swap", 1), "Pow")),
    Intrinsic("popcount", (U32,), U32, _ops("PopCount")),
    # B20: keep the low word, assert the high word is 0.
    Intrinsic("as_u32", (_F,), U32, _ops("Split", ("Swap", 1), ("Push", 0), "Eq", ("Assert", 1))),
    Intrinsic("as_field", (U32,), _F, ()),
    Intrinsic("hash", (_F,) * 10, DIGEST, _ops(("Hash", 5))),
    Intrinsic("sponge_init", (), UNIT, _ops("SpongeInit")),
    Intrinsic("sponge_absorb", (_F,) * 10, UNIT, _ops("SpongeAbsorb")),
    # B25: `sponge_absorb_mem` overwrites st1..st4 and leaves p + 10: give it four zeros
    # under the pointer and drop all five afterwards.
    Intrinsic(
        "sponge_absorb_mem",
        (_F,),
        UNIT,
        _ops(
            ("Push", 0),
            ("Push", 0),
            ("Push", 0),
            ("Push", 0),
            ("Swap", 4),
            "SpongeLoad",
            ("Pop", 5),
        ),
    ),
    Intrinsic("sponge_squeeze", (), ArrayTy(_F, 10), _ops("SpongeSqueeze")),
    Intrinsic("merkle_step", (U32, _F, _F, _F, _F, _F), _tuple(U32, DIGEST), _ops("MerkleStep")),
    # B25: ISA layout `_ p f i [c; 5] -> _ (p+5) f (i div 2) [h; 5]`.
    Intrinsic(
        "merkle_step_mem", (_F, _F, U32, DIGEST), _tuple(_F, _F, U32, DIGEST), _ops("MerkleLoad")
    ),
    Intrinsic("ram_read", (_F,), _F, _ops(("RamRead", 1))),
    # B24: RAM[addr + j] = word 4 - j (what the block write stores), read back from addr + 4.
    Intrinsic("ram_read_block", (_F,), DIGEST, _ops(("Push", 4), "Add", ("RamRead", 5))),
    Intrinsic("ram_write", (_F, _F), UNIT, _ops(("Swap", 1), ("RamWrite", 1))),
    Intrinsic("ram_write_block", (_F, DIGEST), UNIT, _ops(("Dup", 5), ("RamWrite", 5), ("Pop", 1))),
    Intrinsic("xfield", (_F, _F, _F), XFIELD, ()),
    Intrinsic("xinvert", (XFIELD,), XFIELD, _ops("ExtInvert")),
    # B25: ISA layout `_ acc(3) b a -> _ acc' (b+3) (a+3|a+1)`.
    Intrinsic("xx_dot_step", (XFIELD, _F, _F), _tuple(XFIELD, _F, _F), _ops("FoldExt")),
    Intrinsic("xb_dot_step", (XFIELD, _F, _F), _tuple(XFIELD, _F, _F), _ops("FoldBase")),
]

#: Every intrinsic by name (also the builtins callable by bare name).
INTRINSICS: dict[str, Intrinsic] = {i.name: i for i in _INTRINSICS}
