"""Loops whose body becomes one RAM-step instruction under a change of layout: what the
``absorb`` (`tasmopt.optimizer.absorb`) and ``dots`` (`tasmopt.optimizer.dots`) passes share.

Such a pass proves, for one loop ``L: B  recurse_or_return``, a layout change ``T`` (code run
before each ``call L``, and before the ``skiz`` that guards it), its inverse ``T^-1`` (run
after the call) and a new body ``B'``; this module finds the call sites where ``T`` can go,
writes the rewrite and runs the pass over a module, and proves the one obligation every such
pass shares (`guarded_enter_ok`: ``T`` written for a guarded site is ``T``); the other proofs
stay with the passes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tasmopt.errors import TasmSyntaxError
from tasmopt.isa import IsaVariant
from tasmopt.module import ModuleText, line_kind
from tasmopt.optimizer.inline import INDENT, _reoptimize, _Run, apply_edits, deeper
from tasmopt.optimizer.loops import _at
from tasmopt.optimizer.state import FunctionState, VerifyBackend
from tasmopt.report import CompileOptions
from tasmopt.sources import SourceSet
from tasmopt.tasm.parser import parse_instructions
from tasmopt.tasm.program import Instr
from tasmopt.vm.expr import ExprContext
from tasmopt.vm.symbolic import SymbolicRun, run_symbolic

__all__ = [
    "Conjugated",
    "parsed",
    "call_sites",
    "guarded_enter_ok",
    "conjugate",
    "conjugate_stage",
]


@dataclass(frozen=True)
class Conjugated:
    """A loop and the code proven for it.

    Attributes:
        label: ``L``. start, end: the section's line range (label line first).
        sites: line index of each ``call L`` with True where ``skiz`` guards it
            (`call_sites`).
        enter: ``T`` for an unguarded and for a guarded site (the condition back on top).
        leave: ``T^-1`` (none: nothing after the call). body: ``B'`` without the loop's
            ``recurse_or_return``; None keeps ``B``.
        note: what the adoption note says of the rewrite, e.g. ``xx_dot_step``.
        tail: code put before the loop's ``recurse_or_return``, after the body.
    """

    label: str
    start: int
    end: int
    sites: tuple[tuple[int, bool], ...]
    enter: tuple[tuple[str, ...], tuple[str, ...]]
    leave: tuple[str, ...]
    body: tuple[str, ...] | None
    note: str
    tail: tuple[str, ...] = field(default=(), kw_only=True)


def _before(lines: Sequence[str], i: int) -> int | None:
    """Index of the last non-blank line before line ``i`` (a label counts), None if none."""
    return next((j for j in range(i - 1, -1, -1) if line_kind(lines[j])), None)


def _quiet(run: SymbolicRun) -> bool:
    """No effect but RAM reads, no failure guard, no unsupported instruction."""
    return (
        run.unsupported is None
        and not run.outputs
        and not run.ram
        and run.sponge is None
        and not any(run.consumed.values())
        and not run.guards
    )


def parsed(lines: Sequence[str], isa: IsaVariant) -> list[Instr]:
    """Instruction text (one per item) parsed, for the passes' symbolic runs."""
    return parse_instructions("\n".join(lines), isa)


def guarded_enter_ok(enter: Sequence[str], guarded: Sequence[str], isa: IsaVariant) -> bool:
    """``guarded`` is ``enter`` (``T``) for a site whose ``skiz`` condition lies on top: it
    leaves the condition (st0) on top, and ``guarded; pop 1`` (the call taken: ``skiz``
    pops the condition) equals ``pop 1; enter`` on every state (symbolic run, exact), both
    with no effect and no failure. The pass's own proof covers ``enter``; without this, a
    guarded site would run code nobody proved (and a ``skiz`` could pop the wrong value)."""
    ctx = ExprContext()
    try:
        g = run_symbolic(parsed(guarded, isa), ctx, isa)
        a = run_symbolic(parsed([*guarded, "pop 1"], isa), ctx, isa)
        b = run_symbolic(parsed(["pop 1", *enter], isa), ctx, isa)
    except (TasmSyntaxError, ValueError):
        return False
    if not (_quiet(g) and _quiet(a) and _quiet(b)) or a.delta != b.delta:
        return False
    if _at(g, 0) is not ctx.var("s", 0):
        return False  # the skiz would pop something else
    depth = max(a.base, b.base) + abs(a.delta) + 1
    return all(_at(a, k) is _at(b, k) for k in range(depth))


def call_sites(lines: Sequence[str], label: str) -> tuple[tuple[int, bool], ...]:
    """Each ``call label`` with whether one ``skiz`` guards it; empty if the label is used
    any other way, or if a label (a jump target) or a second ``skiz`` stands right before a
    site: ``T`` would not run on every path into the call."""
    out = []
    for i, ln in enumerate(lines):
        words = ln.split("//", 1)[0].split()
        if label not in words[1:]:
            continue  # the label line itself has one word
        if line_kind(ln) != "call" or len(words) != 2:
            return ()
        before = _before(lines, i)
        if before is not None and line_kind(lines[before]) == ":":
            return ()
        guarded = before is not None and line_kind(lines[before]) == "skiz"
        if guarded and before is not None:
            earlier = _before(lines, before)
            if earlier is None or line_kind(lines[earlier]) in ("skiz", ":"):
                return ()
        out.append((i, guarded))
    return tuple(out)


def conjugate(
    lines: Sequence[str], loop: Conjugated, *, search_body: bool = False
) -> tuple[list[str], list[tuple[int, int]]]:
    """``lines`` with ``T`` before every site, ``T^-1`` after it, ``B'`` as the body and the
    tail before the loop's last instruction, and the spans of the new lines for the block
    sources: the call sites' and the tail's; the new body's too with ``search_body`` (a
    body that replaces ``B`` is otherwise not searched again)."""
    edits: list[tuple[int, int, list[str]]] = []
    for i, guarded in loop.sites:
        at = _before(lines, i) if guarded else i
        assert at is not None  # a guarded site has its skiz before it
        edits.append((at, at, [INDENT + x for x in loop.enter[int(guarded)]]))
        if loop.leave:
            edits.append((i + 1, i + 1, [INDENT + x for x in loop.leave]))
    ret = next(
        j for j in range(loop.end - 1, loop.start, -1) if line_kind(lines[j]) not in (None, ":")
    )
    if loop.body is not None:
        edits.append((loop.start + 1, ret, [INDENT + x for x in (*loop.body, *loop.tail)]))
    elif loop.tail:
        edits.append((ret, ret, [INDENT + x for x in loop.tail]))
    out, spans = apply_edits(lines, edits)
    if search_body:
        return out, spans
    head = f"{loop.label}:"
    return out, [(a, b) for a, b in spans if out[a - 1].split("//", 1)[0].strip() != head]


def conjugate_stage(
    fns: list[FunctionState],
    ours: ModuleText,
    client: ModuleText | None,
    options: CompileOptions,
    sources: SourceSet,
    verify: VerifyBackend,
    find: Callable[[Sequence[str], IsaVariant, frozenset[str]], Sequence[Conjugated]],
    name: str,
    *,
    deep: bool = False,
) -> None:
    """Rewrite every loop ``find(lines, isa, others_call)`` returns in every function worked
    on in this run (the call sites searched again by the block sources); a function keeps
    its result so far unless the rewritten one is equivalent on the verifier's witnesses,
    takes fewer cycles and raises no table that grows with execution nor the padded height,
    its own or a caller's (``T`` and ``T^-1`` lengthen the program: `refusal` with
    ``longer``). Notes read ``<name> <label> ...``. With ``deep``, the new code is searched
    with a loop body's budget (`deeper`: it runs once per iteration)."""
    run = _Run(fns, ours, client, options, sources, verify)
    isa = options.isa
    search = deeper(options) if deep else options
    for f in run.workable(fns):
        for cur, loop in run.untried(f, lambda lines, others: find(lines, isa, others)):
            best = run.measure(f, cur)
            if best is None:
                break
            cand, sites = conjugate(cur, loop)
            cand = _reoptimize(f, cand, sites, search, sources, verify)
            what = f"{name} {loop.label}"
            run.keep(f, cand, best, what, f"{what} ({loop.note})", longer=True)
