"""TIR -> TASM: the Trident compiler's Triton lowering (spec/tir.md §3), minus its bugs.

The text is upstream's, byte for byte (4-space indent, flush-left labels, the four-space
``FnEnd`` line, breadth-first deferred flush with one shared ``fresh()`` counter), except
where upstream emits code that is not valid TASM or does not do what the op means. Those
differences, each covered by a simulator test in ``tests/lower/test_lower_triton_vm.py``:

1. ``Loop`` (spec §3.4): upstream emits the loop subroutine *in place*, right after the
   builder's ``Dup, Call(L), Pop(1)``, so execution falls through into it a second time
   and its ``recurse``/``return`` act on the enclosing function. We emit the same text
   (label, ``dup 0 push 0 eq skiz return push -1 add``, body, ``recurse``, ``""``) as a
   deferred block at the next flush, so ``Call(L)`` runs the body exactly n times and
   execution continues after the ``Pop(1)``.
2. ``Or`` (spec §1 #23): upstream emits ``or``, which is not a Triton VM instruction. We
   emit ``dup 1 dup 1 xor swap 2 and add``: (a ^ b) + (a & b) = a | b for u32 a, b.
3. ``Shr`` (spec §1 #29): upstream's ``push 2 pow div_mod swap 1 pop 1`` leaves
   2^st0 mod st1. We emit ``push 2 pow swap 1 div_mod pop 1`` = st1 div 2^st0, a right
   shift for u32 st1 and 0 <= st0 < 32 (larger shifts fail FailedU32Conversion).
4. Final flush (spec §3.3): upstream only flushes deferred blocks at ``FnEnd``; a list
   that ends with blocks pending (no ``FnEnd`` after the last conditional) leaves
   ``call __then__N`` dangling. We flush them at the end (no four-space line).

Ops whose upstream text is not valid TASM for reasons of their payload (``dup 24``,
``pop 0``, ``Seal`` with more than 9 fields, ``Assert(3)``, ...;
`tasmopt.lower.validate.find_unlowerable`) are emitted exactly as upstream would and reported
in `LoweredFunction.unlowerable`; the optimizer passes those functions through untouched.
``lower(..., upstream_bugs=True)`` reproduces the Rust lowering exactly (1-4 included).

Checked against the ISA and kept as upstream: the if/else flag protocol (``push 1 swap 1
skiz call T skiz call E``, then-block bracketed by ``pop 1``/``push 0``), ``IfOnly``,
``Sub``/``Neg`` (``push -1 mul``), ``Shl`` (st1 · 2^st0 in the field), ``Reveal``, ``Seal``
(9 fields or fewer), ``RamRead``/``RamWrite`` (``read_mem``/``write_mem`` then ``pop 1``),
``Entry``, ``ProofBlock``. Not changed either: a nested ``FnStart`` (the builder's ``match``
arms, spec/tir.md §5.6) is emitted in place, so execution falls through into it; that is a
builder bug in the TIR, reported as unlowerable for the enclosing function.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from tasmopt.isa import IsaVariant
from tasmopt.lower.blocks import blocks as tir_blocks
from tasmopt.lower.expansion import NOT_FLAT, expand, label_of
from tasmopt.lower.validate import find_unlowerable
from tasmopt.tir.ops import Op

__all__ = ["INDENT", "LOOP_HEADER", "LoweredBlock", "LoweredFunction", "Lowering", "lower"]

log = logging.getLogger(__name__)

#: Instruction-line indent (spec/tir.md §0).
INDENT = "    "
#: The counted-loop header after the loop label (spec/tir.md §3.4).
LOOP_HEADER = ("dup 0", "push 0", "eq", "skiz", "return", "push -1", "add")


@dataclass
class LoweredBlock:
    """One straight-line block and the lines it lowered to.

    Attributes:
        function: enclosing FnStart name (``""`` for top-level code).
        index: block index within the function (as `tasmopt.lower.blocks.blocks`).
        path: TIR path of the first op.
        ops: the block's ops (comments dropped).
        start, end: half-open range into `Lowering.lines` holding exactly this block's lines
            (comment lines between its ops included).
        entry_depth, net_effect: see `tasmopt.lower.blocks.Block`.
    """

    function: str
    index: int
    path: str
    ops: tuple[Op, ...]
    start: int
    end: int
    entry_depth: int
    net_effect: int


@dataclass
class LoweredFunction:
    """One function of the lowered list.

    Attributes:
        name: FnStart name (``""`` for top-level code, e.g. ``Entry``).
        label: its TASM label (``"__main"``; ``""`` for top-level code).
        sections: line ranges of the function: its main section (split around a nested
            function, if any) and every deferred section (then/else/loop) it produced.
        blocks: its straight-line blocks with their line ranges.
        unlowerable: ``"path: reason"`` for each op whose lowering is not valid TASM.
    """

    name: str
    label: str
    sections: list[tuple[int, int]] = field(default_factory=list)
    blocks: list[LoweredBlock] = field(default_factory=list)
    unlowerable: list[str] = field(default_factory=list)


@dataclass
class Lowering:
    """The result of `lower`: the lines and the structure the optimizer needs."""

    lines: list[str]
    functions: list[LoweredFunction]
    isa: IsaVariant

    def text(self) -> str:
        """The lines joined with ``"\\n"``, like upstream. (The compiler's output files add
        one trailing ``"\\n"``.)"""
        return "\n".join(self.lines)

    def function(self, name: str) -> LoweredFunction:
        """The first function of that name. Raises KeyError."""
        for fn in self.functions:
            if fn.name == name:
                return fn
        raise KeyError(name)


@dataclass
class _Deferred:
    label: str
    ops: tuple[Op, ...]
    base: str  # path of the body list
    kind: str  # "then" (clears the if/else flag), "else", "only", "loop"
    owner: int


@dataclass
class _Fn:
    name: str
    start: int  # index of its FnStart in the top-level list
    end: int | None = None  # index of its FnEnd
    sections: list[tuple[int, int]] = field(default_factory=list)


class _Lowerer:
    def __init__(self, upstream_bugs: bool) -> None:
        self.upstream = upstream_bugs
        self.lines: list[str] = []
        self.deferred: list[_Deferred] = []
        self.counter = 0
        self.op_lines: dict[str, tuple[int, int]] = {}
        self.fns: list[_Fn] = [_Fn("", -1)]  # 0: top-level code
        self.stack: list[int] = []  # open functions (indices into fns)
        self.owner = 0  # who owns lines emitted now
        self.seg: tuple[int, int] | None = (0, 0)  # (owner, start) of the open section
        self.dropped: list[tuple[int, str]] = []  # (owner, label) never emitted

    # -- sections -------------------------------------------------------------------------
    def switch(self, owner: int | None) -> None:
        if self.seg is not None:
            who, start = self.seg
            if len(self.lines) > start:
                self.fns[who].sections.append((start, len(self.lines)))
        self.seg = None if owner is None else (owner, len(self.lines))

    def emit(self, *texts: str) -> None:
        self.lines.extend(INDENT + t for t in texts)

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"__{prefix}__{self.counter}"

    # -- ops ------------------------------------------------------------------------------
    def body(self, ops: Sequence[Op], base: str, top: bool = False) -> None:
        for i, op in enumerate(ops):
            path = f"{base}[{i}]"
            start = len(self.lines)
            self.op(op, path, i if top else None)
            self.op_lines[path] = (start, len(self.lines))

    def op(self, op: Op, path: str, top_index: int | None) -> None:
        kind = op.kind
        if kind not in NOT_FLAT:
            self.emit(*expand(op, upstream_bugs=self.upstream))
        elif kind == "FnStart":
            self.fns.append(_Fn(str(op.value), top_index if top_index is not None else -1))
            self.stack.append(len(self.fns) - 1)
            self.owner = len(self.fns) - 1
            self.switch(self.owner)
            self.lines.append(label_of(str(op.value)) + ":")
        elif kind == "FnEnd":
            self.lines.append(INDENT)
            closing = self.stack.pop() if self.stack else None
            if closing is not None and top_index is not None:
                self.fns[closing].end = top_index
            self.switch(None)
            self.flush()
            self.owner = self.stack[-1] if self.stack else 0
            self.switch(self.owner)
        elif kind == "Entry":
            self.emit(f"call {label_of(str(op.value))}", "halt")
            self.lines.append("")
        elif kind == "Comment":
            self.emit(f"// {op.value}")
        elif kind == "ProofBlock":
            self.emit(f"// proof_block {op.get('program_hash')}")
            self.body(op.get("body"), f"{path}.ProofBlock.body")
            self.emit("// end proof_block")
        elif kind == "IfElse":
            then, other = self.fresh("then"), self.fresh("else")
            self.emit("push 1", "swap 1", "skiz", f"call {then}", "skiz", f"call {other}")
            self.deferred.append(
                _Deferred(then, op.get("then_body"), f"{path}.IfElse.then_body", "then", self.owner)
            )
            self.deferred.append(
                _Deferred(
                    other, op.get("else_body"), f"{path}.IfElse.else_body", "else", self.owner
                )
            )
        elif kind == "IfOnly":
            then = self.fresh("then")
            self.emit("skiz", f"call {then}")
            self.deferred.append(
                _Deferred(then, op.get("then_body"), f"{path}.IfOnly.then_body", "only", self.owner)
            )
        elif kind == "Loop":
            label = label_of(op.get("label"))
            if self.upstream:  # in place: the fall-through bug of spec §3.4
                self.loop(label, op.get("body"), f"{path}.Loop.body")
            else:
                self.deferred.append(
                    _Deferred(label, op.get("body"), f"{path}.Loop.body", "loop", self.owner)
                )
        else:  # pragma: no cover - NOT_FLAT is exhaustive above
            raise AssertionError(kind)

    def loop(self, label: str, body: Sequence[Op], base: str) -> None:
        self.lines.append(label + ":")
        self.emit(*LOOP_HEADER)
        self.body(body, base)
        self.emit("recurse")
        self.lines.append("")

    def flush(self) -> None:
        """Emit pending deferred blocks breadth-first by batches (spec/tir.md §3.3)."""
        outer = self.owner
        while self.deferred:
            batch, self.deferred = self.deferred, []
            for item in batch:
                self.owner = item.owner
                start = len(self.lines)
                if item.kind == "loop":
                    self.loop(item.label, item.ops, item.base)
                else:
                    self.lines.append(item.label + ":")
                    if item.kind == "then":
                        self.emit("pop 1")
                    self.body(item.ops, item.base)
                    if item.kind == "then":
                        self.emit("push 0")
                    self.emit("return")
                    self.lines.append("")
                self.fns[item.owner].sections.append((start, len(self.lines)))
        self.owner = outer


def lower(
    ops: Sequence[Op],
    *,
    isa: IsaVariant = "release",
    upstream_bugs: bool = False,
    strict: bool = False,
    root: str = "tir",
) -> Lowering:
    """Lower a TIR op list (a module, a program or one function) to TASM lines.

    Args:
        ops: decoded ops (validated or not; nothing here raises for odd payloads).
        isa: instruction-set variant the result is meant for; decides which ops are
            unlowerable (``FoldExt``/``FoldBase`` under ``head``) and how ``Asm`` parses.
        upstream_bugs: reproduce the Rust lowering exactly (see the module docstring).
        strict: raise `TirError` for the first unlowerable op instead of reporting it.
        root: path of ``ops`` in the request, for block paths and reports.

    Returns:
        `Lowering`: lines, and per function its sections, blocks and unlowerable ops.
    """
    problems = find_unlowerable(ops, isa=isa, upstream_bugs=upstream_bugs, strict=strict, root=root)
    low = _Lowerer(upstream_bugs)
    low.body(ops, root, top=True)
    low.switch(None)
    if low.deferred:
        if upstream_bugs:
            low.dropped = [(d.owner, d.label) for d in low.deferred]
        else:
            low.flush()
    return _assemble(low, ops, problems, isa, upstream_bugs, root)


def _assemble(
    low: _Lowerer,
    ops: Sequence[Op],
    problems: list,
    isa: IsaVariant,
    upstream_bugs: bool,
    root: str,
) -> Lowering:
    functions: list[LoweredFunction] = []
    by_name: dict[str, LoweredFunction] = {}
    for k, fn in enumerate(low.fns):
        out = LoweredFunction(fn.name, label_of(fn.name) if k else "", list(fn.sections))
        if k == 0:
            found = tir_blocks(ops, root=root, isa=isa, top_level=True)
        elif fn.start < 0:  # a FnStart inside a body (unvalidated input): no blocks
            found = []
        else:
            stop = fn.end + 1 if fn.end is not None else len(ops)
            found = tir_blocks(ops[fn.start : stop], start=fn.start, root=root, isa=isa)
        for b in found:
            if b.path not in low.op_lines:  # in a deferred body upstream never emitted
                continue
            out.blocks.append(
                LoweredBlock(
                    fn.name,
                    b.index,
                    b.path,
                    b.ops,
                    low.op_lines[b.path][0],
                    low.op_lines[b.last_path][1],
                    b.entry_depth,
                    b.net_effect,
                )
            )
        for owner, label in low.dropped:
            if owner == k:
                out.unlowerable.append(
                    f"{label}: deferred block never emitted (upstream "
                    "drops deferred blocks after the last FnEnd)"
                )
        if k == 0 and not out.sections and not out.unlowerable:
            continue
        functions.append(out)
        by_name.setdefault(fn.name, out)
    for p in problems:
        target = by_name.get(p.function)
        if target is None:
            target = LoweredFunction(p.function, label_of(p.function) if p.function else "")
            functions.append(target)
            by_name[p.function] = target
        target.unlowerable.append(str(p))
    if problems:
        log.info(
            "lowering: %d unlowerable op(s) in %d function(s)",
            len(problems),
            len({p.function for p in problems}),
        )
    return Lowering(low.lines, functions, isa)
