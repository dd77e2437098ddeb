"""The Triton VM instruction table: loaded once from `data/triton_isa.json`.

This is the only instruction table in tasmopt. The TASM parser, the simulator, the cost
tables, the model vocabulary and the grammar mask all derive what they need from it.
Source: Triton VM spec §5 (`spec/triton_isa.json`, a copy of which ships as package data).

Two instruction-set variants exist (spec §0, §12.1):

* ``"release"`` (default): Triton VM v0.42 .. v7.0.0, with ``xx_dot_step`` (opcode 80)
  and ``xb_dot_step`` (opcode 88). This is what the Trident lowering targets.
* ``"head"``: the unreleased snapshot, with ``b_horner_step`` / ``x_horner_step`` at the
  same opcodes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Literal

from tasmopt.errors import IsaError

__all__ = [
    "P",
    "ISA_VARIANTS",
    "IsaVariant",
    "Instruction",
    "InstructionSet",
    "instruction_set",
    "raw_table",
]

IsaVariant = Literal["release", "head"]
ISA_VARIANTS: tuple[IsaVariant, ...] = ("release", "head")

#: The Goldilocks prime p = 2^64 - 2^32 + 1 (Triton VM spec §1).
P = 0xFFFFFFFF00000001

#: Argument kinds as named in the table's ``arg`` column.
ARG_KINDS = ("field_element", "n_1_5", "stack_index", "label")

_TABLES = ("processor", "jump_stack", "op_stack", "ram", "hash")


def _count(value: int | str, arg: int | None, what: str, name: str) -> int:
    """Evaluate a count from the table: an int, or ``"n"``, ``"-n"``, ``"n+1"`` in the argument."""
    if isinstance(value, int):
        return value
    if arg is None:
        raise IsaError(f"{name}: {what} depends on the argument, but none was given")
    expr = value.replace(" ", "")
    if expr == "n":
        return arg
    if expr == "-n":
        return -arg
    if expr == "n+1":
        return arg + 1
    raise IsaError(f"{name}: cannot evaluate {what} expression {value!r}")


@dataclass(frozen=True)
class Instruction:
    """One row of the instruction table.

    Attributes:
        name: mnemonic, e.g. ``"read_mem"``.
        opcode: 7-bit opcode (spec §5.1).
        size: words in program memory (1, or 2 with an argument).
        arg_kind: ``None`` or one of ``field_element``, ``n_1_5``, ``stack_index``, ``label``.
        group: instruction class from the table (``stack``, ``control``, ``u32``, ...).
        u32_inputs: stack positions (before execution) that must hold u32 values.
        failures: failure descriptions, in check order.
        in_place_writes: deeper registers modified in place.
        ip_update: how the instruction pointer moves (``+size`` falls through).
    """

    name: str
    opcode: int
    size: int
    arg_kind: str | None
    group: str
    u32_inputs: tuple[int, ...]
    failures: tuple[str, ...]
    in_place_writes: tuple[str, ...]
    semantics: str
    ip_update: str
    _pops: int | str = field(repr=False)
    _pushes: int | str = field(repr=False)
    _delta: int | str = field(repr=False)
    _rows: tuple[tuple[str, int | str], ...] = field(repr=False)
    _u32_entries: tuple[tuple[str, str, str], ...] = field(repr=False)
    _permutations: int = field(repr=False, default=0)

    @property
    def has_arg(self) -> bool:
        return self.arg_kind is not None

    def arg_range(self) -> range | None:
        """Legal small-integer arguments (``n_1_5``: 1..=5, ``stack_index``: 0..=15), else None."""
        if self.arg_kind == "n_1_5":
            return range(1, 6)
        if self.arg_kind == "stack_index":
            return range(0, 16)
        return None

    def pops(self, arg: int | None = None) -> int:
        """Operands consumed from the top (spec §5.1 pops→pushes)."""
        return _count(self._pops, arg, "pops", self.name)

    def pushes(self, arg: int | None = None) -> int:
        """Results placed on top."""
        return _count(self._pushes, arg, "pushes", self.name)

    def stack_delta(self, arg: int | None = None) -> int:
        """Net change of the op stack length; the reference ``op_stack_size_influence``."""
        return _count(self._delta, arg, "stack_delta", self.name)

    def table_rows(self, arg: int | None = None) -> dict[str, int]:
        """Rows one execution adds to processor, jump_stack, op_stack, ram and hash tables."""
        return {t: _count(v, arg, f"table_rows.{t}", self.name) for t, v in self._rows}

    @property
    def tip5_permutations(self) -> int:
        """Tip5 permutations one execution performs (each adds 6 hash rows, feeds cascade)."""
        return self._permutations

    @property
    def u32_entries(self) -> tuple[tuple[str, str, str], ...]:
        """U32 table keys ``(instruction, lhs, rhs)`` one execution records (symbolic names)."""
        return self._u32_entries

    @property
    def is_control_flow(self) -> bool:
        """True if the instruction can move the instruction pointer anywhere but to the next
        instruction (``skiz``, ``call``, ``return``, ``recurse``, ``recurse_or_return``) or
        ends execution (``halt``): from the table's ``ip_update`` (spec §5)."""
        return self.ip_update != "+size"

    @property
    def may_skip_next(self) -> bool:
        """True if the *next* instruction can be skipped, so that control reaches the one
        after it without falling through (``skiz``): from the table's ``ip_update``."""
        return "size(next instruction" in self.ip_update

    @property
    def is_u32_flagged(self) -> bool:
        return bool(self.opcode & 4)


def _make(entry: dict) -> Instruction:
    try:
        rows = entry["table_rows"]
        arg = entry["arg"]
        if arg is not None and arg not in ARG_KINDS:
            raise IsaError(f"{entry['name']}: unknown argument kind {arg!r}")
        return Instruction(
            name=entry["name"],
            opcode=int(entry["opcode"]),
            size=int(entry["size"]),
            arg_kind=arg,
            group=entry.get("group", "many_in_one"),
            u32_inputs=tuple(entry.get("u32_inputs", ())),
            failures=tuple(entry.get("failures", ())),
            in_place_writes=tuple(entry.get("in_place_writes", ())),
            semantics=entry.get("semantics", ""),
            ip_update=entry.get("ip_update", "+size"),
            _pops=entry["pops"],
            _pushes=entry["pushes"],
            _delta=entry["stack_delta"],
            _rows=tuple((t, rows[t]) for t in _TABLES),
            _u32_entries=tuple(tuple(e) for e in rows.get("u32_entries", ())),
            _permutations=int(rows.get("tip5_permutations", 1 if rows.get("hash", 0) == 6 else 0)),
        )
    except KeyError as exc:  # pragma: no cover - only a corrupted data file gets here
        raise IsaError(f"instruction table entry {entry.get('name')!r} lacks {exc}") from exc


@cache
def raw_table() -> dict:
    """The parsed `triton_isa.json` (package data), loaded once per process."""
    try:
        text = resources.files("tasmopt").joinpath("data/triton_isa.json").read_text()
    except FileNotFoundError as exc:  # pragma: no cover
        raise IsaError("package data tasmopt/data/triton_isa.json is missing") from exc
    table = json.loads(text)
    if len(table["instructions"]) != table["instruction_count"]:
        raise IsaError("instruction table count mismatch")
    return table


class InstructionSet:
    """The instructions of one ISA variant, by mnemonic and by opcode.

    Iteration yields instructions in opcode order (the order of the table).
    """

    def __init__(self, variant: IsaVariant, instructions: list[Instruction]) -> None:
        self.variant = variant
        self._by_name = {i.name: i for i in instructions}
        self._by_opcode = {i.opcode: i for i in instructions}
        if len(self._by_name) != len(instructions) or len(self._by_opcode) != len(instructions):
            raise IsaError("duplicate mnemonic or opcode in the instruction table")
        self.instructions: tuple[Instruction, ...] = tuple(sorted(instructions, key=lambda i: i.opcode))

    def __getitem__(self, name: str) -> Instruction:
        try:
            return self._by_name[name]
        except KeyError:
            raise IsaError(f"unknown instruction {name!r} in the {self.variant} ISA") from None

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self):
        return iter(self.instructions)

    def __len__(self) -> int:
        return len(self.instructions)

    def by_opcode(self, opcode: int) -> Instruction:
        try:
            return self._by_opcode[opcode]
        except KeyError:
            raise IsaError(f"invalid opcode {opcode}") from None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.instructions)

    def __repr__(self) -> str:
        return f"InstructionSet({self.variant!r}, {len(self)} instructions)"


@cache
def instruction_set(variant: IsaVariant = "release") -> InstructionSet:
    """The instruction set of ``variant`` (``"release"`` default, or ``"head"``).

    Raises:
        IsaError: unknown variant.
    """
    table = raw_table()
    head = [_make(e) for e in table["instructions"]]
    if variant == "head":
        return InstructionSet("head", head)
    if variant == "release":
        released = [_make(e) for e in table["released_versions_only"]]
        replaced = {i.opcode for i in released}
        return InstructionSet("release", [i for i in head if i.opcode not in replaced] + released)
    raise IsaError(f"unknown ISA variant {variant!r}; expected one of {ISA_VARIANTS}")
