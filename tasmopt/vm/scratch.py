"""Private scratch cells: which RAM cells of a request are not observable (design §2).

The compiler's scratch regions (the temp region from 2^29 and the spill region from 2^30,
spec/tir.md §5.5–5.6) hold values a function parks in RAM for itself. The observable-
behaviour contract (design §2; `tasmopt.vm.equivalence`) excludes a scratch cell from what
equivalence preserves only where this module *proves*, on the request's own text, that the
cell is **private** to one function and **dead** at the point in question:

* **Constant addresses only.** A scratch access is ``push A`` immediately followed by
  ``read_mem n`` / ``write_mem n`` (the pointer is the constant; the ``push`` is not the
  instruction a ``skiz`` may skip). A constant in ``[SCRATCH_BASE, SCRATCH_END)`` anywhere
  else (a ``push`` used as a value, an ``addi``) is an *escaped* scratch address: it may
  become a pointer by arithmetic (the temp region's runtime-indexed arrays do exactly that),
  so no cell of the request is private.
* **One owner.** Every constant access to the cell lies in the sections of one function.
* **No pointer in the owner.** The owner performs no memory access at a computed address
  (a ``read_mem``/``write_mem`` without the constant, ``sponge_absorb_mem``,
  ``merkle_step_mem``, the dot and Horner steps: ISA table ``accesses_ram``).
* **Dead.** A private cell is dead after a straight-line run when every read of it in the
  program lies in that run and the run writes it before its first read of it: whatever path
  leaves the run, the value there is never read again (a later execution of the run writes
  it first). Every private cell is dead at the function's return.

Premise of the contract, stated rather than proven: a pointer computed at run time (from
input or arithmetic on non-scratch constants) never lands in the compiler's scratch region.
The scratch allocators are private to one compilation unit (another unit's allocator hands
out the same addresses), so no calling convention can rely on another function's scratch
contents; upstream's own dead-spill elimination (spec/tir.md §4, pass 4) rests on the same
premise. Everything else above is checked on the text, per request, never assumed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tasmopt.isa import IsaVariant, instruction_set, names_where
from tasmopt.tasm.program import Instr, Label, Program

__all__ = [
    "SCRATCH_BASE",
    "SCRATCH_END",
    "RAM_WORDS",
    "Access",
    "Item",
    "items_of_lines",
    "items_of_program",
    "constant_accesses",
    "ScratchAnalysis",
    "private_cells",
    "dead_after",
    "Liveness",
    "runs",
    "control_points",
]

#: First address of the compiler's scratch regions: the temp region (2^29), below the spill
#: region (2^30); spec/tir.md §5.5–5.6.
SCRATCH_BASE = 2**29
#: End (exclusive) of the addresses treated as scratch: any constant in
#: ``[SCRATCH_BASE, SCRATCH_END)`` is a potential scratch pointer.
SCRATCH_END = 2**32

#: ``read_mem n`` / ``write_mem n``: RAM words at the pointer on st0 (ISA table: accesses RAM,
#: argument 1..5).
RAM_WORDS = names_where(lambda i: i.accesses_ram and i.arg_kind == "n_1_5")
#: Instructions whose argument is a field element (``push``, ``addi``): where a scratch
#: address can appear in the text.
FIELD_IMMEDIATE = names_where(lambda i: i.arg_kind == "field_element")

#: One program element: ``("label", name)`` or ``(mnemonic, argument or None)``.
Item = tuple[str, int | str | None]


@dataclass(frozen=True)
class Access:
    """A memory access at a constant address.

    Attributes:
        index: position of the memory instruction in the item list.
        write: ``write_mem`` (True) or ``read_mem`` (False).
        cells: the addresses it touches (``write_mem n`` at A: A..A+n-1; ``read_mem n`` at
            A: A-n+1..A; Triton VM spec, instructions ``read_mem``/``write_mem``).
    """

    index: int
    write: bool
    cells: tuple[int, ...]


def items_of_lines(lines: Iterable[str]) -> list[Item]:
    """TASM lines as items (comments and blanks dropped; arguments as written, ``push``
    arguments as canonical field elements where they parse)."""
    from tasmopt.isa import P

    out: list[Item] = []
    for line in lines:
        text = line.split("//", 1)[0].strip()
        if not text:
            continue
        if text.endswith(":") and not line[:1].isspace():
            out.append(("label", text[:-1].strip()))
            continue
        parts = text.split()
        arg: int | str | None = None
        if len(parts) > 1:
            try:
                arg = int(parts[1]) % P if parts[0] in FIELD_IMMEDIATE else int(parts[1])
            except ValueError:
                arg = parts[1]
        out.append((parts[0], arg))
    return out


def items_of_program(program: Program) -> list[Item]:
    """A parsed program's items (labels and instructions, in order)."""
    out: list[Item] = []
    for it in program.items:
        if isinstance(it, Label):
            out.append(("label", it.name))
        elif isinstance(it, Instr):
            out.append((it.name, it.arg))
    return out


def _scratch(x: object) -> bool:
    return isinstance(x, int) and SCRATCH_BASE <= x < SCRATCH_END


def constant_accesses(
    items: Sequence[Item], isa: IsaVariant = "release"
) -> tuple[list[Access], list[int], list[int]]:
    """(constant scratch accesses, indices of escaped scratch constants, indices of memory
    accesses at computed addresses) of an item list."""
    table = instruction_set(isa)
    accesses: list[Access] = []
    escapes: list[int] = []
    dynamic: list[int] = []
    used_push: set[int] = set()
    for i, (name, arg) in enumerate(items):
        if name == "label" or name not in table:
            continue
        spec = table[name]
        if not spec.accesses_ram:
            continue
        prev = items[i - 1] if i > 0 else ("label", "")
        before = items[i - 2] if i > 1 else ("label", "")
        skippable = before[0] in table and table[before[0]].may_skip_next
        n = arg if isinstance(arg, int) else 1
        if name in RAM_WORDS and prev[0] == "push" and isinstance(prev[1], int) and not skippable:
            a = prev[1]
            if _scratch(a):
                cells = tuple(sorted(a + spec.pointer_step * k for k in range(n)))
                accesses.append(Access(i, spec.writes_ram, cells))
                used_push.add(i - 1)
            continue  # a constant address outside the scratch regions: observable RAM
        dynamic.append(i)
    for i, (name, arg) in enumerate(items):
        if name in FIELD_IMMEDIATE and _scratch(arg) and i not in used_push:
            escapes.append(i)
    return accesses, escapes, dynamic


@dataclass(frozen=True)
class ScratchAnalysis:
    """Result of `private_cells`.

    Attributes:
        owner: private cell -> the function that owns it.
        reason: why no cell is private (an escaped scratch address), else None.
    """

    owner: Mapping[int, str]
    reason: str | None = None

    def cells(self, functions: Iterable[str] | None = None) -> frozenset[int]:
        """Private cells (of ``functions`` only, if given)."""
        if functions is None:
            return frozenset(self.owner)
        fs = set(functions)
        return frozenset(c for c, f in self.owner.items() if f in fs)


def private_cells(
    functions: Mapping[str, Sequence[str]],
    other_lines: Sequence[str] = (),
    isa: IsaVariant = "release",
) -> ScratchAnalysis:
    """Which scratch cells of a request are private to one function (module docstring).

    Args:
        functions: every function of the request: name -> its lines (own sections).
        other_lines: lines that belong to no function (entry stub, preamble).
    """
    _, esc, _ = constant_accesses(items_of_lines(other_lines), isa)
    if esc:
        return ScratchAnalysis({}, "a scratch address is used outside a memory access")
    seen: dict[int, str | None] = {}
    for name, lines in functions.items():
        acc, esc, dyn = constant_accesses(items_of_lines(lines), isa)
        if esc:
            return ScratchAnalysis(
                {}, f"function {name!r} uses a scratch address outside a memory access"
            )
        for a in acc:
            for c in a.cells:
                prev = seen.get(c, name)
                seen[c] = name if (prev == name and not dyn) else None
    return ScratchAnalysis({c: f for c, f in sorted(seen.items()) if f is not None})


def control_points(items: Sequence[Item], isa: IsaVariant = "release") -> list[int]:
    """Indices of the items where straight-line code cannot continue through: labels,
    control-flow instructions, unknown mnemonics and the instruction a ``skiz`` may skip
    (the control skeleton `tasmopt.vm.equivalence.check_aligned` aligns)."""
    table = instruction_set(isa)
    out: list[int] = []
    after_skip = False
    for k, (name, _) in enumerate(items):
        known = name != "label" and name in table
        if not known or table[name].is_control_flow or after_skip:
            out.append(k)
        after_skip = known and table[name].may_skip_next
    return out


def runs(items: Sequence[Item], isa: IsaVariant = "release") -> list[tuple[int, int]]:
    """The straight-line runs ``(start, end)`` of an item list: control enters a run only at
    its start (each `control_points` item is a run of its own; the item after each starts a
    new run)."""
    out: list[tuple[int, int]] = []
    start = 0
    for k in control_points(items, isa):
        if start < k:
            out.append((start, k))
        out.append((k, k + 1))
        start = k + 1
    if start < len(items):
        out.append((start, len(items)))
    return out


class Liveness:
    """Which private cells are dead after a straight-line range of one program (module
    docstring), with the program's accesses and runs analysed once: a cell the range writes
    whose value never crosses a run boundary — every run of the program that reads the cell
    writes it first — and that the rest of the run the range ends in does not read first.
    Whatever path leaves the range, the next read of such a cell comes after a write in the
    same run. ``private`` must come from `private_cells` on a request that contains this
    program's code."""

    def __init__(
        self, items: Sequence[Item], private: frozenset[int], isa: IsaVariant = "release"
    ) -> None:
        self.private = private
        self.accesses = constant_accesses(items, isa)[0] if private else []
        self.bounds = runs(items, isa) if self.accesses else []
        run_of: dict[int, int] = {}
        for r, (a, b) in enumerate(self.bounds):
            for k in range(a, b):
                run_of[k] = r
        first: dict[tuple[int, int], bool] = {}  # (run, cell) -> its first access there writes
        for acc in self.accesses:
            r = run_of[acc.index]
            for c in acc.cells:
                if c in private and (r, c) not in first:
                    first[(r, c)] = acc.write
        #: cells some run reads before writing: their values cross run boundaries
        self.carried = frozenset(c for (_, c), w in first.items() if not w)

    def dead_after(self, start: int, end: int) -> frozenset[int]:
        """Private cells dead after ``items[start:end]``."""
        if not self.accesses:
            return frozenset()
        tail_end = next((b for a, b in self.bounds if a < end <= b), end)
        later: dict[int, bool] = {}
        here: set[int] = set()
        for acc in self.accesses:
            if end <= acc.index < tail_end:
                for c in acc.cells:
                    later.setdefault(c, acc.write)
            elif start <= acc.index < end and acc.write:
                here.update(c for c in acc.cells if c in self.private)
        return frozenset(c for c in here if c not in self.carried and later.get(c, True))


def dead_after(
    items: Sequence[Item],
    start: int,
    end: int,
    private: frozenset[int],
    isa: IsaVariant = "release",
) -> frozenset[int]:
    """`Liveness.dead_after` for one range (analyses the program each call: for many ranges
    of one program, build one `Liveness`)."""
    return Liveness(items, private, isa).dead_after(start, end)
