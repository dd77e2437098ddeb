"""The instructions each flat TIR op lowers to, and the label rules (spec/tir.md §3.2–§3.9).

One table shared by the Triton lowering (`tasmopt.lower.triton`) and the stack-effect
analysis (`tasmopt.lower.effects`), so the effect of an op is always the ISA effect of exactly
the text we emit. Ops with bodies or layout of their own (IfElse, IfOnly, Loop, FnStart,
FnEnd, Entry, Comment, ProofBlock) are not flat; the lowering handles them itself.
"""

from __future__ import annotations

from tasmopt.tir.ops import Op

__all__ = [
    "NOT_FLAT",
    "SINGLE",
    "OR_FIXED",
    "SHR_FIXED",
    "SHR_UPSTREAM",
    "label_of",
    "call_target",
    "expand",
    "split_instruction",
]

#: Ops the lowering lays out itself (labels, deferred subroutines, comments).
NOT_FLAT = frozenset(
    {"IfElse", "IfOnly", "Loop", "FnStart", "FnEnd", "Entry", "Comment", "ProofBlock"}
)

#: Payload-free ops that lower to a fixed instruction sequence (spec/tir.md §1, §3.8).
SINGLE: dict[str, tuple[str, ...]] = {
    "Return": ("return",),
    "Halt": ("halt",),
    "Add": ("add",),
    "Sub": ("push -1", "mul", "add"),  # st1 + (-1)·st0 = st1 - st0
    "Mul": ("mul",),
    "Neg": ("push -1", "mul"),
    "Invert": ("invert",),
    "Eq": ("eq",),
    "Lt": ("lt",),
    "And": ("and",),
    "Xor": ("xor",),
    "PopCount": ("pop_count",),
    "Split": ("split",),
    "DivMod": ("div_mod",),
    "Shl": ("push 2", "pow", "mul"),  # st1 · 2^st0 (pow: base st0, exponent st1)
    "Log2": ("log_2_floor",),
    "Pow": ("pow",),
    "SpongeInit": ("sponge_init",),
    "SpongeAbsorb": ("sponge_absorb",),
    "SpongeSqueeze": ("sponge_squeeze",),
    "SpongeLoad": ("sponge_absorb_mem",),
    "MerkleStep": ("merkle_step",),
    "MerkleLoad": ("merkle_step_mem",),
    "ExtMul": ("xb_mul",),
    "ExtInvert": ("x_invert",),
    "FoldExt": ("xx_dot_step",),
    "FoldBase": ("xb_dot_step",),
}

#: u32 OR, which Triton VM lacks: (a ^ b) + (a & b) == a | b because the two share no bits.
#: ``_ a b`` -> ``_ a b a b`` -> ``_ a b (a^b)`` -> ``_ (a^b) b a`` -> ``_ (a^b) (a&b)`` -> sum.
OR_FIXED: tuple[str, ...] = ("dup 1", "dup 1", "xor", "swap 2", "and", "add")

#: Right shift st1 >> st0: ``_ a b`` -> ``_ a 2^b`` -> ``_ 2^b a`` -> div_mod (numerator st0,
#: denominator st1) -> ``_ (a div 2^b) (a mod 2^b)`` -> drop the remainder.
#: Domain: a u32 and 0 <= b < 32 (2^b must be u32 for div_mod), else FailedU32Conversion.
SHR_FIXED: tuple[str, ...] = ("push 2", "pow", "swap 1", "div_mod", "pop 1")

#: What upstream emits for Shr: leaves (2^st0 mod st1), not a right shift (spec/tir.md §1).
SHR_UPSTREAM: tuple[str, ...] = ("push 2", "pow", "div_mod", "swap 1", "pop 1")

_N_KINDS = {
    "Pop": "pop",
    "Hint": "divine",
    "ReadIo": "read_io",
    "WriteIo": "write_io",
    "ReadMem": "read_mem",
    "WriteMem": "write_mem",
    "Dup": "dup",
    "Swap": "swap",
}


def label_of(name: str) -> str:
    """Label of ``FnStart``/``Entry``/``Loop.label``: ``__`` prepended unless already there
    (spec/tir.md §3.2)."""
    return name if name.startswith("__") else "__" + name


def call_target(name: str) -> str:
    """Target of ``Call``: unchanged if it starts with ``__`` or ``@``, else ``__`` + name
    (spec/tir.md §3.2)."""
    return name if name.startswith(("__", "@")) else "__" + name


def expand(op: Op, *, upstream_bugs: bool = False) -> tuple[str, ...]:
    """The instruction texts (unindented) a flat op lowers to in place.

    Args:
        op: any op whose kind is not in `NOT_FLAT`.
        upstream_bugs: emit upstream's ``or`` and wrong ``Shr`` (spec/tir.md §1 #23, #29)
            instead of the correct sequences.

    Texts are emitted as upstream would even where they are not valid TASM (``dup 24``,
    ``pop 0``); `tasmopt.lower.validate.find_unlowerable` reports those.

    Raises:
        ValueError: ``op`` is not flat.
    """
    kind = op.kind
    if kind in SINGLE:
        return SINGLE[kind]
    if kind in _N_KINDS:
        return (f"{_N_KINDS[kind]} {op.value}",)
    if kind == "Push":
        return (f"push {op.value}",)
    if kind == "Call":
        return (f"call {call_target(str(op.value))}",)
    if kind == "Or":
        return ("or",) if upstream_bugs else OR_FIXED
    if kind == "Shr":
        return SHR_UPSTREAM if upstream_bugs else SHR_FIXED
    if kind == "Assert":
        return ("assert",) if op.value == 1 else ("assert_vector",)
    if kind == "Hash":
        return ("hash",)  # width ignored (spec/tir.md §1 #37)
    if kind == "Reveal":
        return (f"push {op.get('tag')}",) + ("write_io 1",) * (1 + op.get("field_count"))
    if kind == "Seal":
        pad = max(0, 9 - op.get("field_count"))
        return ("push 0",) * pad + (f"push {op.get('tag')}", "hash", "write_io 5")
    if kind == "RamRead":
        return (f"read_mem {op.get('width')}", "pop 1")
    if kind == "RamWrite":
        return (f"write_mem {op.get('width')}", "pop 1")
    if kind == "Asm":
        return tuple(s.strip() for s in op.get("lines") if s.strip())
    raise ValueError(f"{kind} is not a flat op; the lowering lays it out itself")


def split_instruction(text: str) -> tuple[str, str | None]:
    """``"dup 24"`` -> ``("dup", "24")``; ``"add"`` -> ``("add", None)``. No range checks."""
    parts = text.split(None, 1)
    return parts[0], (parts[1].strip() if len(parts) > 1 else None)
