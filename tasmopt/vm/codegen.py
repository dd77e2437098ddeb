"""Code generation for the simulator (`codegen`): per-instruction handlers and compiled hot blocks.

Two tiers, both generated from the templates of `tasmopt.vm.instructions`:

* **Handlers.** Each instruction *shape* (mnemonic, small argument, variant) is compiled once
  per process into a closure factory; decoding a program calls the factory with the site's
  placeholder values. Decoding therefore never invokes the Python compiler, which keeps
  short-lived programs (the verifier's candidates) cheap.
* **Blocks.** A straight-line run from an instruction index up to the first control-flow
  instruction (inclusive), the end of the program, or `MAX_BLOCK` instructions, compiled into
  one function once execution has entered it `HOT_THRESHOLD` times (counted across runs).

Everything is cached on the Program (``Program._cache``). Static per-instruction data comes
from the instruction table: the stack length below which TooShallow fires (from
``stack_delta``) and the table rows (op stack, RAM, Hash; Triton VM spec §7).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from functools import cache, lru_cache
from typing import Any, NamedTuple

from tasmopt.errors import IsaError
from tasmopt.isa import IsaVariant, P, instruction_set
from tasmopt.tasm.program import Program
from tasmopt.vm import xfield
from tasmopt.vm.instructions import PLACEHOLDERS, Shape, shape_lines
from tasmopt.vm.state import ExternalCall

__all__ = [
    "Step",
    "Block",
    "Decoded",
    "Fail",
    "decoded",
    "pack_rows",
    "unpack_rows",
    "MAX_BLOCK",
    "MIN_STACK",
    "HOT_THRESHOLD",
    "ROW_SHIFT",
    "static_facts",
]

#: The op stack never gets shorter than this (Triton VM spec §3, §4).
MIN_STACK = 16
#: Longest straight-line run compiled into one function (bounds compile time per block).
MAX_BLOCK = 512
#: Entries into a block start (over all runs of a program) before it is compiled. Compiling
#: costs roughly as much as interpreting the block ~30-50 times.
HOT_THRESHOLD = 40

_CACHE_KEY = "vm.decoded"
_BINDINGS = (("ram", "ram = vm.ram"), ("js", "js = vm.js"), ("u32add", "u32add = vm.u32.add"))
_PLACEHOLDER_RE = re.compile(r"\b(" + "|".join(PLACEHOLDERS) + r")\b")

_GLOBALS: dict[str, Any] = {
    "P": P,
    "xmul": xfield.mul,
    "xinv": xfield.inv,
    "ExternalCall": ExternalCall,
}


class Fail(Exception):  # noqa: N818 - internal control flow, never escapes the simulator
    """Raised by generated code: ``args = (k, kind, detail)``; ``k`` = offset in the block
    (0 for a handler), so the failing instruction is the entry ip + ``k``."""


_GLOBALS["Fail"] = Fail


#: Table rows are accumulated as one packed int (one addition per step instead of three):
#: ``op_stack + (ram << ROW_SHIFT) + (hash << 2 * ROW_SHIFT)``; 40 bits hold > 10^11 rows.
ROW_SHIFT = 40
_ROW_MASK = (1 << ROW_SHIFT) - 1


def pack_rows(op_stack: int, ram: int, hash_rows: int) -> int:
    """Pack (op stack, RAM, Hash) rows into one int (see `ROW_SHIFT`)."""
    return op_stack + (ram << ROW_SHIFT) + (hash_rows << (2 * ROW_SHIFT))


def unpack_rows(rows: int) -> tuple[int, int, int]:
    """Inverse of `pack_rows`."""
    return rows & _ROW_MASK, (rows >> ROW_SHIFT) & _ROW_MASK, rows >> (2 * ROW_SHIFT)


#: A compiled handler or block: ``fn(stk, vm, cyc) -> next ip`` (``-1`` after ``halt``).
Handler = Callable[[list[int], Any, int], int]


class Step(NamedTuple):
    """One decoded instruction.

    Attributes:
        fn: handler ``fn(stk, vm, cyc) -> next ip`` (``-1`` after ``halt``).
        need: smallest op-stack length that does not fail TooShallow (spec §4).
        rows: packed table rows of one execution (op stack, RAM, Hash; spec §7).
        terminates: it is a control-flow instruction (ends a straight-line run).
    """

    fn: Handler
    need: int
    rows: int
    terminates: bool


class Block(NamedTuple):
    """A compiled straight-line run.

    Attributes:
        fn: ``fn(stk, vm, cyc) -> next ip``; raises `Fail` with the offset of the failing
            instruction.
        n: instructions in the block (= clock cycles when it completes).
        need: smallest op-stack length at entry for which no instruction fails TooShallow.
        rows: packed table rows of one complete execution.
    """

    fn: Handler
    n: int
    need: int
    rows: int


def _filler(values: dict[str, Any]) -> Callable[[re.Match[str]], str]:
    def fill(m: re.Match[str]) -> str:
        return repr(values[m.group(1)])

    return fill


def _uses(text: str, name: str) -> bool:
    return re.search(rf"\b{name}\b", text) is not None


def _bindings(text: str) -> list[str]:
    return [line for name, line in _BINDINGS if _uses(text, name)]


@cache
def _shape_text(variant: IsaVariant, shape: Shape) -> str:
    """Source of one instruction shape, with placeholders, ending in a ``return``."""
    spec = instruction_set(variant)[shape.name]
    lines = shape_lines(shape, spec)
    if not shape.terminates:
        lines.append("return NEXT")
    return "\n".join(lines)


@cache
def _factory(variant: IsaVariant, shape: Shape) -> Callable[..., Handler]:
    """``make(NEXT, SKIP, TARGET, A, EID, SYM) -> handler`` for one shape (compiled once)."""
    text = _shape_text(variant, shape).replace("Fail(K,", "Fail(0,").replace("cyc + K", "cyc")
    body = _bindings(text) + text.split("\n")
    src = (
        f"def make({', '.join(p for p in PLACEHOLDERS if p != 'K')}):\n"
        "    def handler(stk, vm, cyc):\n"
        + "".join(f"        {line}\n" for line in body)
        + "    return handler\n"
    )
    namespace = dict(_GLOBALS)
    exec(compile(src, f"<tasm handler {shape.name}>", "exec"), namespace)  # noqa: S102
    make: Callable[..., Handler] = namespace["make"]  # generated just above
    return make


class _Kind(NamedTuple):
    """Everything about an instruction shape that does not depend on where it sits."""

    make: Callable[..., Handler]
    delta: int
    need: int
    rows: int
    terminates: bool


@cache
def static_facts(variant: IsaVariant, name: str, arg: int | None) -> tuple[int, int, int]:
    """``(stack delta, TooShallow bound, packed rows)`` of one instruction with small argument
    ``arg`` (None for ``push``/``addi``/``call`` and argument-free instructions), from the
    instruction table: the shortest op stack it does not fail on (spec §4) and the op-stack,
    RAM and Hash rows of one execution (spec §7, `pack_rows`).

    Raises:
        IsaError: ``arg`` is outside the instruction's range.
    """
    spec = instruction_set(variant)[name]
    allowed = spec.arg_range()
    if allowed is not None and arg not in allowed:
        raise IsaError(f"{name}: argument {arg!r} out of range {allowed}")
    delta = spec.stack_delta(arg)
    rows = spec.table_rows(arg)
    packed = pack_rows(rows["op_stack"], rows["ram"], rows["hash"])
    return delta, MIN_STACK - delta if delta < 0 else 0, packed


@cache
def _kind(variant: IsaVariant, shape: Shape) -> _Kind:
    """Factory and instruction-table data of a shape: stack delta, TooShallow bound, rows."""
    delta, need, rows = static_facts(variant, shape.name, shape.arg)
    return _Kind(_factory(variant, shape), delta, need, rows, shape.terminates)


@lru_cache(maxsize=1 << 16)
def _decode_one(
    variant: IsaVariant,
    name: str,
    arg: int | str | None,
    error_id: int | None,
    ip: int,
    last: bool,
    target: int | None,
) -> tuple[Step, Shape, tuple[Any, ...]]:
    """The `Step`, `Shape` and placeholder values of instruction ``name arg`` at index ``ip``
    (``last``: a ``skiz`` with nothing after it; ``target``: a label argument's resolved
    index, None when the label is not in the program). A pure function of its arguments, and
    the handlers it makes keep no state, so decoded steps are shared between programs: the
    block search decodes a new program for each of hundreds of thousands of proposals that
    differ from the last one in one instruction (`Decoded.__init__` was a third of its time).

    Raises:
        IsaError: an argument of the wrong kind or out of range.
    """
    arg_kind = instruction_set(variant)[name].arg_kind
    imm = sym = None
    small: int | None = None
    tag = ""
    if arg_kind is None:
        if last:
            tag = "last"
    elif arg_kind == "field_element":
        imm = int(arg) % P  # type: ignore[arg-type]  # push/addi arguments are ints (parser)
    elif arg_kind == "label":
        if target is None:
            tag, sym = "external", arg
    else:
        if not isinstance(arg, int):
            raise IsaError(f"{name}: argument {arg!r} is not an int")
        small = arg
    shape = Shape(name, small, tag)
    kind = _kind(variant, shape)
    vals = (ip + 1, ip + 2, target, imm, error_id, sym)
    return Step(kind.make(*vals), kind.need, kind.rows, kind.terminates), shape, vals


class Decoded:
    """A decoded program: one `Step` per instruction, plus the lazily compiled hot blocks.

    Attributes:
        steps: handlers, indexed by instruction index.
        blocks: compiled blocks by start index (filled as blocks get hot).
        hot: entries per block start, across runs.
    """

    def __init__(self, program: Program) -> None:
        variant = program.isa
        isa = instruction_set(variant)
        labels = program.labels
        instructions = program.instructions
        n_instr = len(instructions)
        steps: list[Step] = []
        shapes: list[Shape] = []
        values: list[tuple[Any, ...]] = []
        for ip, ins in enumerate(instructions):
            name, arg = ins.name, ins.arg
            target = labels.get(arg) if isa[name].arg_kind == "label" else None  # type: ignore[arg-type]  # a call argument is a label name (parser)
            step, shape, vals = _decode_one(
                variant, name, arg, ins.error_id, ip, name == "skiz" and ip + 1 >= n_instr, target
            )
            steps.append(step)
            shapes.append(shape)
            values.append(vals)
        self.variant = variant
        self.steps: tuple[Step, ...] = tuple(steps)
        self.shapes = shapes
        self.values = values
        self.blocks: dict[int, Block] = {}
        self.hot: dict[int, int] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.steps)

    def prefix_rows(self, start: int, k: int) -> int:
        """Packed table rows of instructions ``start .. start+k-1``."""
        return sum(step.rows for step in self.steps[start : start + k])

    def compile_block(self, start: int) -> Block:
        """Compile (once) and register the block starting at ``start`` (``< len(self)``)."""
        blk = self.blocks.get(start)
        if blk is not None:
            return blk
        body: list[str] = []
        need = depth = rows = 0  # depth: stack length change since block entry
        ip, k = start, 0
        terminated = False
        while ip < len(self.steps) and k < MAX_BLOCK:
            step, shape = self.steps[ip], self.shapes[ip]
            delta = _kind(self.variant, shape).delta
            if delta < 0:
                need = max(need, MIN_STACK - depth - delta)
            depth += delta
            rows += step.rows
            values = dict(zip(PLACEHOLDERS, (*self.values[ip], k), strict=True))
            text = _shape_text(self.variant, shape)
            if not shape.terminates:
                text = text[: text.rindex("\n") + 1] if "\n" in text else ""  # drop "return"
            body += _PLACEHOLDER_RE.sub(_filler(values), text).split("\n")
            k += 1
            ip += 1
            if shape.terminates:
                terminated = True
                break
        body = [line for line in body if line]
        if not terminated:
            body.append(f"return {ip}")
        src = "def block(stk, vm, cyc):\n" + "".join(
            f"    {line}\n" for line in _bindings("\n".join(body)) + body
        )
        namespace = dict(_GLOBALS)
        exec(compile(src, f"<tasm block {start}+{k}>", "exec"), namespace)  # noqa: S102
        fn: Handler = namespace["block"]  # generated just above
        fn.source = src  # type: ignore[attr-defined]  # kept for debugging: print(decoded(p).compile_block(0).fn.source)
        blk = Block(fn, k, need, rows)
        with self._lock:
            return self.blocks.setdefault(start, blk)


def decoded(program: Program) -> Decoded:
    """The (cached) `Decoded` form of ``program``."""
    dec = program._cache.get(_CACHE_KEY)
    if isinstance(dec, Decoded):
        return dec
    fresh = Decoded(program)
    program._cache.setdefault(_CACHE_KEY, fresh)
    stored: Decoded = program._cache[_CACHE_KEY]  # another thread may have been first
    return stored
