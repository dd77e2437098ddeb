"""The in-memory form of a TASM program: instructions, labels, and a program that resolves them.

A `Program` is what the parser produces, the simulator runs and the printer prints. Instruction
arguments are canonical: field elements as integers in ``[0, p)``, small arguments as ints,
``call`` targets as label names (Triton VM spec §10).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from tasmopt.isa import IsaVariant, P, instruction_set, names_where

#: Instructions whose argument is a field element, printed signed (ISA table).
_FIELD_ARGUMENT = names_where(lambda i: i.has_field_argument)

__all__ = ["Instr", "Label", "Item", "Program", "format_field", "EXTERNAL_PREFIX"]

#: Call targets starting with this character are symbols of another module (the Trident
#: linker's convention, spec/tir.md §3.2). They are not defined in the program; the simulator
#: treats a call to one as an opaque external call.
EXTERNAL_PREFIX = "@"


def format_field(value: int) -> str:
    """Print a canonical field element the way the reference prints it, without zero padding:
    ``-(p - v)`` when ``v >= p - 256``, else decimal (Triton VM spec §1)."""
    if value >= P - 256:
        return f"-{P - value}"
    return str(value)


@dataclass(frozen=True, slots=True)
class Instr:
    """One instruction.

    Attributes:
        name: mnemonic from the instruction table.
        arg: ``None``; an int (canonical field element for ``push``/``addi``, 1..5 or 0..15
            otherwise); or a label name for ``call``.
        error_id: the ``error_id`` annotation of ``assert`` / ``assert_vector``, if any.
    """

    name: str
    arg: int | str | None = None
    error_id: int | None = None

    def __str__(self) -> str:
        if self.arg is None:
            text = self.name
        elif self.name in _FIELD_ARGUMENT:
            text = f"{self.name} {format_field(self.arg)}"  # type: ignore[arg-type]  # push/addi arguments are ints (parser)
        else:
            text = f"{self.name} {self.arg}"
        if self.error_id is not None:
            text += f" error_id {self.error_id}"
        return text


@dataclass(frozen=True, slots=True)
class Label:
    """A label: names the instruction that follows it (or the end of the program)."""

    name: str

    def __str__(self) -> str:
        return f"{self.name}:"


Item = Instr | Label


@dataclass(frozen=True)
class Program:
    """A TASM program: items in order, with labels resolved to instruction indices.

    Attributes:
        items: labels and instructions in source order.
        isa: instruction-set variant the program was parsed for.
    """

    items: tuple[Item, ...]
    isa: IsaVariant = "release"
    _cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False, hash=False)

    @classmethod
    def from_items(cls, items: Iterable[Item], isa: IsaVariant = "release") -> Program:
        return cls(tuple(items), isa)

    @cached_property
    def instructions(self) -> tuple[Instr, ...]:
        """The instructions, without labels. ``ip`` in the simulator indexes this tuple."""
        return tuple(i for i in self.items if isinstance(i, Instr))

    @cached_property
    def labels(self) -> dict[str, int]:
        """Label name -> index into `instructions` of the next instruction (``len`` if none)."""
        out: dict[str, int] = {}
        n = 0
        for item in self.items:
            if isinstance(item, Label):
                out[item.name] = n
            else:
                n += 1
        return out

    @cached_property
    def word_addresses(self) -> tuple[int, ...]:
        """Word address of each instruction (2-word instructions take two addresses)."""
        isa = instruction_set(self.isa)
        out, addr = [], 0
        for ins in self.instructions:
            out.append(addr)
            addr += isa[ins.name].size
        return tuple(out)

    @cached_property
    def length_words(self) -> int:
        """``L``: program length in words (spec §3)."""
        isa = instruction_set(self.isa)
        return sum(isa[i.name].size for i in self.instructions)

    @cached_property
    def external_symbols(self) -> tuple[str, ...]:
        """Call targets that start with ``@`` and are not defined here, in first-use order."""
        seen: dict[str, None] = {}
        for ins in self.instructions:
            if ins.name == "call" and isinstance(ins.arg, str) and ins.arg not in self.labels:
                seen[ins.arg] = None
        return tuple(seen)

    def words(self) -> list[int]:
        """The word encoding (spec §8): opcode, then the argument if any; labels -> addresses.

        External symbols have no address; they encode as 0 (such a program is not linkable,
        but its digest is still well defined for our own bookkeeping).
        """
        isa = instruction_set(self.isa)
        addrs = self.word_addresses
        out: list[int] = []
        for ins in self.instructions:
            spec = isa[ins.name]
            out.append(spec.opcode)
            if spec.has_arg:
                if spec.arg_kind == "label":
                    idx = self.labels.get(ins.arg)  # type: ignore[arg-type]  # a call argument is a label name (parser)
                    out.append(
                        0
                        if idx is None
                        else (addrs[idx] if idx < len(addrs) else self.length_words)
                    )
                else:
                    out.append(int(ins.arg))  # type: ignore[arg-type]  # a non-call argument is an int (parser)
        return out

    def text(self, indent: str = "    ") -> str:
        """Print one item per line: labels flush left, instructions indented."""
        lines = [str(i) if isinstance(i, Label) else indent + str(i) for i in self.items]
        return "\n".join(lines) + ("\n" if lines else "")

    def __len__(self) -> int:
        return len(self.instructions)


def instructions_text(instrs: Sequence[Instr], indent: str = "    ") -> list[str]:
    """Lines for a straight-line fragment."""
    return [indent + str(i) for i in instrs]
