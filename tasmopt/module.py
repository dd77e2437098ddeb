"""A lowered module as text: which lines belong to which function, and who calls whom.

The optimizer needs the same view of two texts: our own lowering (whose structure the
lowerer records) and the client's ``baseline_tasm`` (which it recovers from label lines).
A function's *closure* is its own sections plus those of every function it calls in this
module, transitively: that is what a harness program needs to run the function.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tasmopt.errors import TasmSyntaxError
from tasmopt.isa import IsaVariant
from tasmopt.lower.triton import Lowering
from tasmopt.tasm.program import Program
from tasmopt.vm.equivalence import harness

__all__ = ["FunctionText", "ModuleText", "label_lines", "line_kind"]

_CALL = re.compile(r"^\s*call\s+(\S+)")


@dataclass
class FunctionText:
    """The lines of one function in a module text.

    Attributes:
        name: function name; label: its TASM label.
        sections: half-open line ranges owned by the function (main + deferred blocks).
        callees: names of functions of this module it calls.
    """

    name: str
    label: str
    sections: list[tuple[int, int]] = field(default_factory=list)
    callees: set[str] = field(default_factory=set)


@dataclass
class ModuleText:
    """Lines of a module and their ownership by function."""

    lines: list[str]
    functions: dict[str, FunctionText]

    @classmethod
    def from_lowering(cls, low: Lowering) -> ModuleText:
        fns = {
            f.name: FunctionText(f.name, f.label, list(f.sections)) for f in low.functions if f.name
        }
        mod = cls(list(low.lines), fns)
        mod._link()
        return mod

    @classmethod
    def from_text(cls, text: str, labels: dict[str, str]) -> ModuleText:
        """Split a client text at the label lines of known functions.

        Args:
            text: TASM as upstream prints it (labels flush left).
            labels: function name -> label, e.g. ``{"main": "__main"}``.

        A function's section runs from its label line to the next function label line;
        deferred ``__then__k``/``__loop__k`` labels stay with the function before them.
        Lines before the first function label belong to no function (the entry stub), and so
        do unreachable instruction lines right before a function label that follow a
        ``return`` or ``halt`` (an entry stub ``call __main; halt`` emitted between two
        functions, spec/tir.md §3.5).
        """
        lines = text.split("\n")
        by_label = {lab: name for name, lab in labels.items()}
        fns: dict[str, FunctionText] = {}
        current: str | None = None
        for i, line in enumerate(lines):
            stripped = line.strip()
            if stripped.endswith(":") and not line[:1].isspace():
                owner = by_label.get(stripped[:-1].strip())
                if owner is not None and owner not in fns:
                    if current is not None:
                        start = fns[current].sections[0][0]
                        fns[current].sections[0] = (start, _before_stub(lines, start, i))
                    current = owner
                    fns[owner] = FunctionText(owner, labels[owner], [(i, len(lines))])
        mod = cls(lines, fns)
        mod._link()
        return mod

    def _link(self) -> None:
        by_label = {f.label: f.name for f in self.functions.values()}
        for fn in self.functions.values():
            for line in self.section_lines(fn.name):
                m = _CALL.match(line)
                if m and m.group(1) in by_label and by_label[m.group(1)] != fn.name:
                    fn.callees.add(by_label[m.group(1)])

    def section_lines(self, name: str) -> list[str]:
        fn = self.functions[name]
        return [line for a, b in fn.sections for line in self.lines[a:b]]

    def closure(self, name: str) -> list[str]:
        """Names of ``name`` and every function it reaches by calls, ``name`` first."""
        order, todo = [name], [name]
        while todo:
            for callee in sorted(self.functions[todo.pop()].callees):
                if callee not in order:
                    order.append(callee)
                    todo.append(callee)
        return order

    def closure_text(
        self, name: str, override: dict[str, Sequence[str]] | None = None
    ) -> tuple[str, list[int]]:
        """The closure's lines joined, and for each joined line its index in `lines`
        (-1 for lines taken from ``override``, which replaces some functions' lines)."""
        out: list[str] = []
        where: list[int] = []
        for fname in self.closure(name):
            if override and fname in override:
                out.extend(override[fname])
                where.extend([-1] * len(override[fname]))
                continue
            for a, b in self.functions[fname].sections:
                out.extend(self.lines[a:b])
                where.extend(range(a, b))
        return "\n".join(out), where

    def harness(
        self, name: str, isa: IsaVariant, override: dict[str, Sequence[str]] | None = None
    ) -> Program:
        """A program that calls function ``name`` once and halts (see
        `tasmopt.vm.equivalence.harness`).

        Raises:
            TasmSyntaxError: positioned in this module's text (1-based line of `lines`).
        """
        text, where = self.closure_text(name, override)
        try:
            return harness(text, self.functions[name].label, isa)
        except TasmSyntaxError as exc:
            k = exc.line - 3  # the harness adds two lines before the text
            line = where[k] + 1 if 0 <= k < len(where) and where[k] >= 0 else exc.line
            raise TasmSyntaxError(exc.reason, line, exc.column, exc.source_line) from None


def _before_stub(lines: Sequence[str], start: int, end: int) -> int:
    """``end``, or where an unreachable trailing run of instruction lines begins: a run after
    the section's last ``return``/``halt`` and before ``end`` with no label in between."""
    from tasmopt.isa import names_where

    ends = names_where(lambda i: i.ends_frame)

    def kind(k: int) -> str | None:
        return line_kind(lines[k])

    k = end - 1
    while k > start and kind(k) is None:
        k -= 1
    run_start = k + 1
    while k > start and kind(k) not in (None, ":"):
        run_start = k
        k -= 1
    if run_start > end - 1 or kind(run_start) is None:
        return end
    while k > start and kind(k) is None:
        k -= 1
    return run_start if k > start and kind(k) in ends else end


def line_kind(line: str) -> str | None:
    """``":"`` for a label line (flush left, ending in ``:``), the mnemonic for an
    instruction line, None for blank and comment lines."""
    text = line.split("//", 1)[0].strip()
    if not text:
        return None
    if text.endswith(":") and not line[:1].isspace():
        return ":"
    return text.split()[0]


def label_lines(lines: Iterable[str]) -> list[str]:
    """Names of the labels defined in ``lines`` (flush-left ``name:`` lines)."""
    return [
        ln.strip()[:-1].strip() for ln in lines if ln.strip().endswith(":") and not ln[:1].isspace()
    ]
