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
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, Literal

from tasmopt.errors import IsaError

__all__ = [
    "P",
    "ISA_VARIANTS",
    "IsaVariant",
    "Instruction",
    "InstructionSet",
    "instruction_set",
    "raw_table",
    "all_instructions",
    "names_where",
    "SlotFlow",
    "slot_flow",
    "swap_chain",
]

IsaVariant = Literal["release", "head"]
ISA_VARIANTS: tuple[IsaVariant, ...] = ("release", "head")

#: The Goldilocks prime p = 2^64 - 2^32 + 1 (Triton VM spec §1).
P = 0xFFFFFFFF00000001

#: Argument kinds as named in the table's ``arg`` column.
ARG_KINDS = ("field_element", "n_1_5", "stack_index", "label")

_TABLES = ("processor", "jump_stack", "op_stack", "ram", "hash")

#: Facts the JSON table carries only in prose, kept here and nowhere else.
#: Binary instructions (two single-word operands, one result) whose operands may be swapped:
#: the semantics column reads ``push(st0 op st1)`` with a symmetric ``op`` (spec §5.6, §5.7).
#: `tests/test_isa_facts.py` checks each against the simulator.
_COMMUTATIVE = frozenset({"add", "mul", "eq", "and", "xor"})
#: Deeper reads the table states only in its semantics: ``assert_vector`` compares st0..4
#: with st5..9 before popping five (spec §5.5).
_EXTRA_READS = {"assert_vector": 10, "recurse_or_return": 7}  # the latter compares st5, st6
#: Instructions an ``error_id <i128>`` may follow (spec §10, assertion context).
_TAKES_ERROR_ID = frozenset({"assert", "assert_vector"})
_ST = re.compile(r"st(\d+)")
_RAM_WRITE = re.compile(r"RAM\[[^\]]*\]\s*=(?!=)")
#: The pointer a RAM-word instruction leaves on st0 (the table's "then push p+n" / "p-n").
_POINTER_LEFT = re.compile(r"push p([+-])n\b")


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
    _ram_rows: int | str = field(repr=False, default=0)

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
    def ends_frame(self) -> bool:
        """True if control never reaches the next instruction of the current frame: ``return``
        (pops the jump stack) and ``halt`` (ends execution), from ``ip_update``."""
        return "execution ends" in self.ip_update or "popped pair" == self.ip_update[-11:]

    @property
    def ends_section(self) -> bool:
        """True if control never falls through to the next instruction of the current frame:
        ``return`` and ``halt`` (`ends_frame`), ``recurse`` (jumps to the frame's start) and
        ``recurse_or_return`` (one or the other): from the table's ``ip_update``."""
        return self.ends_frame or "top pair" in self.ip_update or "st5==st6" in self.ip_update

    @property
    def pushes_boolean(self) -> bool:
        """Pushes a result that is 0 or 1 (``eq``, ``lt``): the table's semantics read
        ``push(1 if ... else 0)``."""
        return "push(1 if" in self.semantics and "else 0)" in self.semantics

    @property
    def halts(self) -> bool:
        """Ends execution (``halt``): from the table's ``ip_update``."""
        return "execution ends" in self.ip_update

    @property
    def may_return(self) -> bool:
        """May leave the current frame to the caller's return address (``return``, and
        ``recurse_or_return`` when st5 == st6): ``ip_update`` takes the origin ``o`` of the
        jump stack's top pair."""
        return self.is_control_flow and self.ip_update[:1] == "o"

    @property
    def may_recurse(self) -> bool:
        """May jump back to the current frame's start (``recurse``, and
        ``recurse_or_return`` when st5 != st6): ``ip_update`` takes the destination ``d`` of
        the jump stack's *top* pair (``call`` pushes a new pair instead)."""
        return "d of top pair" in self.ip_update or "else d" in self.ip_update

    @property
    def may_skip_next(self) -> bool:
        """True if the *next* instruction can be skipped, so that control reaches the one
        after it without falling through (``skiz``): from the table's ``ip_update``."""
        return "size(next instruction" in self.ip_update

    @property
    def is_u32_flagged(self) -> bool:
        """The opcode's u32 flag (bit 2, spec §5.1): the instruction records U32 table rows."""
        return bool(self.opcode & 4)

    # --- effects outside the op stack, all derived from the table's columns ----------------

    @property
    def accesses_ram(self) -> bool:
        """Reads or writes RAM (a non-zero ``table_rows.ram``)."""
        return self._ram_rows != 0

    @property
    def writes_ram(self) -> bool:
        """Stores to RAM (the semantics assign ``RAM[..] = ..``: ``write_mem``)."""
        return self.accesses_ram and bool(_RAM_WRITE.search(self.semantics))

    @property
    def reads_ram(self) -> bool:
        """Loads from RAM without storing (``read_mem``, the ``*_mem`` and dot/horner steps)."""
        return self.accesses_ram and not self.writes_ram

    @property
    def pointer_step(self) -> int:
        """Per word moved, how ``read_mem n`` / ``write_mem n`` move the RAM pointer they
        leave on st0: +1 (``write_mem``: cells ``p..p+n-1``, leaves ``p+n``), -1
        (``read_mem``: cells ``p..p-n+1``, leaves ``p-n``); 0 for every other instruction.
        From the table's semantics (spec/triton-vm.md §5)."""
        if not (self.accesses_ram and self.arg_kind == "n_1_5"):
            return 0
        m = _POINTER_LEFT.search(self.semantics)
        return 0 if m is None else (1 if m.group(1) == "+" else -1)

    @property
    def reads_public_input(self) -> bool:
        """Consumes public input (``read_io``)."""
        return "public input" in self.semantics

    @property
    def writes_public_output(self) -> bool:
        """Appends to public output (``write_io``)."""
        return "public output" in self.semantics

    @property
    def reads_secret_input(self) -> bool:
        """Consumes non-deterministic input: secret tokens (``divine``) or secret digests
        (``merkle_step``)."""
        return "secret" in self.semantics

    @property
    def uses_sponge(self) -> bool:
        """Reads or replaces the Tip5 sponge state (``sponge_*``)."""
        return "sponge" in self.semantics

    @property
    def has_side_effect(self) -> bool:
        """Has an effect outside the op stack (RAM, I/O, secret input, sponge): such
        instructions keep their relative order and are never dropped."""
        return (
            self.accesses_ram
            or self.reads_public_input
            or self.writes_public_output
            or self.reads_secret_input
            or self.uses_sponge
        )

    @property
    def can_fail(self) -> bool:
        """Can fail for a reason other than a too-shallow op stack (u32 checks, zero checks,
        assertions, empty inputs, an empty jump stack): from the ``failures`` column."""
        return any(not f.startswith("TooShallow") for f in self.failures)

    @property
    def is_guarded(self) -> bool:
        """Pure (no side effect, no control flow) but can fail (``lt``, ``invert``,
        ``assert``, ...): a rewrite may move it but never drop it."""
        return self.can_fail and not self.has_side_effect and not self.is_control_flow

    @property
    def commutative(self) -> bool:
        """A binary instruction whose two operands may be swapped (``add``, ``mul``, ``eq``,
        ``and``, ``xor``)."""
        return self.name in _COMMUTATIVE

    @property
    def is_stack_shuffle(self) -> bool:
        """Only moves, copies, drops or pushes constant words (``group`` ``stack``, no
        secret input): ``push``, ``pop``, ``dup``, ``swap``, ``pick``, ``place``."""
        return self.group == "stack" and not self.reads_secret_input

    @property
    def takes_error_id(self) -> bool:
        """An ``error_id`` annotation may follow it in TASM text (``assert``,
        ``assert_vector``; spec §10)."""
        return self.name in _TAKES_ERROR_ID

    @property
    def reads_jump_stack(self) -> bool:
        """Reads the jump stack and fails when it is empty (``return``, ``recurse``,
        ``recurse_or_return``): from the ``failures`` column."""
        return any(f.startswith("JumpStackIsEmpty") for f in self.failures)

    @property
    def has_field_argument(self) -> bool:
        """Its argument is a field element (``push``, ``addi``), printed in signed form."""
        return self.arg_kind == "field_element"

    def reads_depth(self, arg: int | None = None) -> int:
        """Op stack words the instruction reads or rewrites, counted from st0: the largest of
        pops, the stack-index argument + 1, the u32 operands and the in-place writes (the
        latter two from the table), and the prose-only deeper reads (``assert_vector``)."""
        pops, pushes = self.pops(arg), self.pushes(arg)
        depth = max(pops, _EXTRA_READS.get(self.name, 0))
        if self.arg_kind == "stack_index" and arg is not None:
            depth = max(depth, arg + 1)
        if self.u32_inputs:
            depth = max(depth, max(self.u32_inputs) + 1)
        for write in self.in_place_writes:
            shift = (pushes - pops) if "(after)" in write else 0
            for k in _ST.findall(write):
                depth = max(depth, int(k) - shift + 1)
        return depth


def _make(entry: dict[str, Any]) -> Instruction:
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
            _ram_rows=rows["ram"],
        )
    except KeyError as exc:  # pragma: no cover - only a corrupted data file gets here
        raise IsaError(f"instruction table entry {entry.get('name')!r} lacks {exc}") from exc


@cache
def raw_table() -> dict[str, Any]:
    """The parsed `triton_isa.json` (package data), loaded once per process."""
    try:
        text = resources.files("tasmopt").joinpath("data/triton_isa.json").read_text()
    except FileNotFoundError as exc:  # pragma: no cover
        raise IsaError("package data tasmopt/data/triton_isa.json is missing") from exc
    table: dict[str, Any] = json.loads(text)
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
        self.instructions: tuple[Instruction, ...] = tuple(
            sorted(instructions, key=lambda i: i.opcode)
        )

    def __getitem__(self, name: str) -> Instruction:
        try:
            return self._by_name[name]
        except KeyError:
            raise IsaError(f"unknown instruction {name!r} in the {self.variant} ISA") from None

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[Instruction]:
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


@cache
def all_instructions() -> tuple[Instruction, ...]:
    """Every instruction of either variant (the dot steps of release and the horner steps of
    head both included), in opcode order, release first where both define an opcode."""
    seen: dict[str, Instruction] = {}
    for variant in ISA_VARIANTS:
        for ins in instruction_set(variant):
            seen.setdefault(ins.name, ins)
    return tuple(seen.values())


def names_where(predicate: Callable[[Instruction], bool]) -> frozenset[str]:
    """Mnemonics (of either variant) whose instruction satisfies ``predicate``, e.g.
    ``names_where(lambda i: i.has_side_effect)``: how every module derives a name set."""
    return frozenset(i.name for i in all_instructions() if predicate(i))


# -- slot flow of one instruction (the model's grammar mask and input graph use it) --------


@dataclass(frozen=True)
class SlotFlow:
    """How one instruction moves and reads op-stack slots (top first, index 0 = st0).

    The stack after the instruction is ``new + old[consumed:]`` where ``new[i]`` is
    ``old[src[i]]`` when ``src[i] >= 0`` (a value moved or copied) and a fresh value when
    ``src[i] == -1``.

    Attributes:
        src: per new top slot, the old slot it comes from, or -1 for a fresh value.
        consumed: old top slots replaced by ``src`` (``len(src) - consumed`` = stack delta).
        reads: old slots whose values the instruction reads (a ``swap`` reads both ends).
    """

    src: tuple[int, ...]
    consumed: int
    reads: tuple[int, ...]

    @property
    def delta(self) -> int:
        return len(self.src) - self.consumed


_SLOT_RANGE = re.compile(r"st(\d+)(?:\.\.st(\d+))?")


def _index_flow(name: str, arg: int) -> SlotFlow:
    # the stack-index instructions, by their definition (Triton VM spec §5.2)
    if name == "dup":
        return SlotFlow((arg,), 0, (arg,))
    if name == "swap":
        src = (arg,) + tuple(range(1, arg)) + (0,) if arg else (0,)
        return SlotFlow(src, arg + 1, (0, arg))
    if name == "pick":
        return SlotFlow((arg,) + tuple(range(arg)), arg + 1, (arg,))
    if name == "place":
        return SlotFlow(tuple(range(1, arg + 1)) + (0,), arg + 1, (0,))
    raise IsaError(f"no slot flow defined for {name}")


@cache
def slot_flow(name: str, arg: int | None = None, isa: IsaVariant = "release") -> SlotFlow:
    """`SlotFlow` of ``name arg`` from the table (pops, pushes, in-place writes, read depth);
    the four stack instructions ``dup``/``swap``/``pick``/``place`` by their definition.

    Raises:
        IsaError: unknown mnemonic.
    """
    ins = instruction_set(isa)[name]
    if ins.arg_kind == "stack_index":
        if arg is None:
            raise IsaError(f"{name} needs a stack index")
        return _index_flow(name, arg)
    small = arg if ins.arg_kind == "n_1_5" else None
    pushes, delta = ins.pushes(small), ins.stack_delta(small)

    fresh = set(range(pushes))
    for write in ins.in_place_writes:
        after = "(after)" in write
        for m in _SLOT_RANGE.finditer(write):
            lo = int(m.group(1))
            hi = int(m.group(2)) if m.group(2) else lo
            fresh.update(k if after else k + delta for k in range(lo, hi + 1))
    length = max(fresh) + 1 if fresh else 0
    src = tuple(-1 if i in fresh else i - delta for i in range(length))
    depth = ins.reads_depth(small)
    return SlotFlow(src, length - delta, tuple(range(depth)))


def swap_chain(args: Sequence[int | None]) -> tuple[str, int, int] | None:
    """The ``pick``/``place`` that a run of ``swap`` arguments at the start of ``args`` is:
    ``swap 1; swap 2; ..; swap k`` is ``pick k`` and ``swap k; ..; swap 2; swap 1`` is
    ``place k`` (k >= 2; Triton VM spec, instructions ``pick``/``place``); ``None`` items end
    the run (not a swap). Returns (mnemonic, k, instructions used), or None when the run is
    no such chain."""
    if not args or args[0] is None:
        return None
    step = 1 if args[0] == 1 else -1
    n = 1
    while n < len(args):
        nxt, prev = args[n], args[n - 1]
        if nxt is None or prev is None or nxt != prev + step or not 1 <= nxt <= 15:
            break
        n += 1
    if n < 2:
        return None
    if step == 1:
        return "pick", n, n
    return ("place", args[0], n) if args[n - 1] == 1 else None
