"""Function-level pass ``inline``: small straight-line callees inlined into their callers, and
the runs they merge into optimized again (issue 11, calls).

A callee qualifies when its main section (from its label to the next label) ends in its only
``return`` and holds no ``recurse``, ``recurse_or_return`` or ``halt`` (they act on the
current call frame, which inlining changes) — in our lowering *and* in the reference's text
— and it is small (`INLINE_MAX_INSTRUCTIONS` in the main section) or called from one place in
the module. Its helper sections (branch and loop subroutines, entered by ``call``, each in a
frame of its own) are copied after the caller under labels suffixed with the caller's name. A call
site qualifies unless the instruction before it may skip it (``skiz; call g`` skips the call,
but would skip only the first instruction of an inlined body). Every qualifying call of the
callee in the caller is inlined; the callee itself stays (other modules may call it).

Proof. Executing ``call g`` where g's main section is ``g: R; return`` (R with no other
return and nothing that acts on g's own frame) runs exactly R, its calls returning into R,
and continues after the call: the only differences are the jump stack (not observable,
design §2), clock cycles and table heights (measured, not assumed); renaming labels that
only R and the copied helpers use changes nothing. So the caller's reference with the same
calls replaced by the *reference's* body of g (the *normalized reference*) has the caller's
observable behaviour, and `check_aligned` proves the candidate against it: same control
skeleton (the calls are gone from both), every differing run proven by `check_block`. The
candidate is also run against the untouched reference on the function's witnesses
(`check_function`: equivalence and the costs we report). It is kept only when both pass, it
takes fewer cycles than the function's best so far, no table that grows with execution is
taller than the reference's, and the padded height is no larger than the reference's, the
function's so far, or any caller's so far (`_Run.taller_caller`; the program may grow, issue
11 item 5, within `INLINE_GROWTH_PER_CYCLE` words per cycle saved).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

from tasmopt.errors import TasmSyntaxError
from tasmopt.isa import IsaVariant, instruction_set, names_where
from tasmopt.module import ModuleText, line_kind
from tasmopt.optimizer.candidates import build_checks, propose
from tasmopt.optimizer.state import (
    FunctionState,
    VerifyBackend,
    adopt,
    out_of_time,
    refusal,
    rewritable,
    verify_within,
)
from tasmopt.report import CompileOptions
from tasmopt.sources import BlockTask, SourceSet
from tasmopt.tasm.parser import parse_instructions
from tasmopt.tasm.program import Program
from tasmopt.vm.equivalence import (
    FunctionVerdict,
    check_aligned,
    check_function,
    no_taller,
    padded_height,
)

__all__ = [
    "INLINE_MAX_INSTRUCTIONS",
    "INLINE_GROWTH_PER_CYCLE",
    "straight_body",
    "apply_edits",
    "inline_parts",
    "inline_calls",
    "inline_stage",
    "run_memo",
]

log = logging.getLogger(__name__)

#: Callees up to this many instructions (``return`` not counted) are inlined at every
#: qualifying call site; larger ones only where the module calls them once.
INLINE_MAX_INSTRUCTIONS = 16
#: Code growth allowed per clock cycle saved (per call of the caller): an inlined version whose
#: static instructions grow by more than this times the cycles it saves is not kept (the
#: callee stays in the module for its other callers, so inlining duplicates code).
INLINE_GROWTH_PER_CYCLE = 4
#: Never inline a body longer than this (proof time).
INLINE_LIMIT = 400
INDENT = "    "


class _HasLabel(Protocol):
    """What a function-level pass finds in a function: a loop or section, by its label."""

    @property
    def label(self) -> str: ...


_Labelled = TypeVar("_Labelled", bound=_HasLabel)

_CALL = re.compile(r"^\s*call\s+(\S+)\s*(//.*)?$")


def straight_body(lines: Sequence[str], isa: IsaVariant = "release") -> list[str] | None:
    """The instruction lines between a function's label and its final ``return`` when its
    whole text is ``label:``, straight-line instructions, ``return``; else None (the
    `inline_parts` of a function with no helper and no control flow)."""
    table = instruction_set(isa)
    parts = inline_parts(lines, "", isa)
    if parts is None or parts[1]:
        return None
    body = parts[0]
    for ln in body:
        n = line_kind(ln)
        if n is None or n not in table or table[n].is_control_flow or table[n].may_skip_next:
            return None
    return body


#: Instructions that act on the current call frame: a main section holding one (besides its
#: final ``return``) is not inlined.
_FRAME = names_where(
    lambda i: i.is_control_flow and not i.may_skip_next and i.arg_kind != "label"
)  # return, recurse, recurse_or_return, halt: every control flow but call and skiz


def inline_parts(
    lines: Sequence[str], suffix: str, isa: IsaVariant = "release"
) -> tuple[list[str], list[str]] | None:
    """(main body, helper sections) of a function's text for inlining (module docstring), the
    helper labels renamed ``<label>__<suffix>`` in both; None if it does not qualify."""
    table = instruction_set(isa)
    named = [(ln, n) for ln in lines if (n := line_kind(ln)) is not None]
    if len(named) < 2 or named[0][1] != ":":
        return None
    end = next((k for k in range(1, len(named)) if named[k][1] == ":"), len(named))
    main, helpers = named[1:end], named[end:]
    if not main or main[-1][1] != "return":
        return None
    if any(n in _FRAME or (n != ":" and n not in table) for _, n in main[:-1]):
        return None
    labels = {ln.split("//", 1)[0].strip()[:-1].strip() for ln, n in helpers if n == ":"}

    def fix(ln: str, n: str) -> str:
        text = ln.split("//", 1)[0].strip()
        if n == ":":
            return f"{text[:-1].strip()}__{suffix}:"
        parts = text.split()
        if len(parts) == 2 and parts[1] in labels:
            text = f"{parts[0]} {parts[1]}__{suffix}"
        return INDENT + text

    body = [fix(ln, n) for ln, n in main[:-1]]
    rest: list[str] = []
    for ln, n in helpers:
        if n == ":":
            rest.append("")
        rest.append(fix(ln, n))
    return body, rest


def inline_calls(
    lines: Sequence[str], bodies: dict[str, list[str]], isa: IsaVariant = "release"
) -> tuple[list[str], list[tuple[int, int]], dict[str, int]]:
    """Replace each ``call L`` with ``L`` in ``bodies`` by the body, except where the
    instruction before it may skip it.

    Returns:
        (new lines, ``(start, end)`` of each inlined body in them, call sites per label).
    """
    table = instruction_set(isa)
    out: list[str] = []
    spans: list[tuple[int, int]] = []
    sites: dict[str, int] = {}
    prev: str | None = None
    for ln in lines:
        m = _CALL.match(ln)
        skipping = prev is not None and prev in table and table[prev].may_skip_next
        if m and m.group(1) in bodies and not skipping:
            start = len(out)
            out.extend(bodies[m.group(1)])
            spans.append((start, len(out)))
            sites[m.group(1)] = sites.get(m.group(1), 0) + 1
        else:
            out.append(ln)
        n = line_kind(ln)
        if n is not None:
            prev = n
    return out, spans, sites


def _count(lines: Sequence[str]) -> int:
    """Static instructions (labels, blanks and comments not counted)."""
    return sum(1 for ln in lines if line_kind(ln) not in (None, ":"))


def _trim(lines: list[str]) -> list[str]:
    out = list(lines)
    while out and not out[-1].strip():
        out.pop()
    return out


def _module_with(text: ModuleText, override: dict[str, list[str]]) -> ModuleText:
    """A module of ``text``'s functions, some with other lines; links (callees) from the new
    lines, so a callee no longer called leaves the closure."""
    lines: list[str] = []
    for name in text.functions:
        lines.extend(override.get(name, text.section_lines(name)))
        lines.append("")
    labels = {n: f.label for n, f in text.functions.items()}
    return ModuleText.from_text("\n".join(lines), labels)


def _runs(lines: Sequence[str], isa: IsaVariant) -> list[tuple[int, int]]:
    """Maximal straight-line runs ``(start, end)`` of line indices (labels, control flow and
    the instruction a ``skiz`` may skip end them)."""
    table = instruction_set(isa)
    out: list[tuple[int, int]] = []
    start: int | None = None
    after_skip = False
    for i, ln in enumerate(lines):
        n = line_kind(ln)
        if n is None:
            continue
        control = n == ":" or n not in table or table[n].is_control_flow or after_skip
        if control:
            if start is not None:
                out.append((start, i))
            start = None
        elif start is None:
            start = i
        after_skip = n != ":" and n in table and table[n].may_skip_next
    if start is not None:
        out.append((start, len(lines)))
    return out


def called_labels(texts: Sequence[Sequence[str]]) -> frozenset[str]:
    """Every label a ``call`` line of these texts (each a list of lines) targets."""
    called: set[str] = set()
    for lines in texts:
        for ln in lines:
            if line_kind(ln) == "call":
                words = ln.split("//", 1)[0].split()
                called.update(words[1:2])
    return frozenset(called)


def apply_edits(
    lines: Sequence[str], edits: Sequence[tuple[int, int, list[str]]]
) -> tuple[list[str], list[tuple[int, int]]]:
    """``lines`` with every ``(start, end, new)`` edit applied (``lines[start:end] = new``;
    the edits must not overlap; an insertion has ``start == end``), and where each edit's
    new lines ended up, as ``(start, end)`` spans in the result (an empty replacement leaves
    the empty span at its place), sorted."""
    out = list(lines)
    spans: list[tuple[int, int]] = []
    for a, b, new in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        out[a:b] = new
        shift = len(new) - (b - a)
        spans = [(x + shift, y + shift) if x >= b else (x, y) for x, y in spans]
        spans.append((a, a + len(new)))
    return out, sorted(spans)


#: Search budget of a loop body's run, in multiples of the request's per-block budget (a
#: body runs once per iteration: `tasmopt.optimizer.hot`).
HOT_FACTOR = 4


def deeper(options: CompileOptions) -> CompileOptions:
    """``options`` with `HOT_FACTOR` times the search budget (seconds, converted to states by
    the block search), for the runs of loop bodies."""
    return replace(options, search_budget_s=options.search_budget_s * HOT_FACTOR)


#: The straight-line runs `_reoptimize` already worked on in this compile (`run_memo`):
#: ``(isa, sources, search budget, witnesses, seed, instructions)`` -> the shortest proven
#: replacement's lines, or None where none beat the run. Passes re-optimize the same merged
#: run many times (one callee inlined at many sites, a plan tried again with fewer callees):
#: 102 runs but 25 distinct texts in keccak256's inline stage.
_RUN_MEMO: ContextVar[dict[tuple[object, ...], list[str] | None] | None] = ContextVar(
    "tasmopt_run_memo", default=None
)


@contextmanager
def run_memo() -> Iterator[None]:
    """Within the block, `_reoptimize` answers a run it has already optimized from memory
    (one compile: `tasmopt.optimizer.compile` opens it). A straight-line run's proof is
    context-free (`check_block` on the run alone), so the answer holds wherever the run
    occurs; results computed while the deadline had expired are not kept (they may be cut
    short)."""
    token = _RUN_MEMO.set({})
    try:
        yield
    finally:
        _RUN_MEMO.reset(token)


def _reoptimize(
    f: FunctionState,
    lines: list[str],
    spans: list[tuple[int, int]],
    options: CompileOptions,
    sources: SourceSet,
    verify: VerifyBackend,
) -> list[str]:
    """Rewrite the straight-line runs that contain an inlined body with the block sources
    (not the model: no TIR for a merged run), each candidate proven by `check_block`; a run
    met before in this compile is answered from `run_memo`."""
    runs = [r for r in _runs(lines, options.isa) if any(r[0] <= a < r[1] for a, _ in spans)]
    if not runs:
        return lines
    no_model = replace(options, sources=tuple(n for n in options.sources if n != "model"))
    salt = (options.isa, no_model.sources, options.search_budget_s, options.witnesses, options.seed)
    memo = _RUN_MEMO.get()
    found: dict[tuple[object, ...], list[str] | None] = {}
    keys: list[tuple[object, ...]] = []
    tasks: list[BlockTask] = []
    task_keys: list[tuple[object, ...]] = []
    for a, b in runs:
        text = "\n".join(ln for ln in lines[a:b] if line_kind(ln) is not None)
        instrs = tuple(parse_instructions(text, options.isa))
        key: tuple[object, ...] = (*salt, instrs)
        keys.append(key)
        if memo is not None and key in memo:
            found[key] = memo[key]
        elif key not in found:
            found[key] = None
            k = len(tasks)
            task_keys.append(key)
            tasks.append(
                BlockTask(f.name, -1000 - k, f"{f.name}.inlined[{k}]", (), instrs, 0, 0, "")
            )
    if tasks:
        checks, owners = build_checks(tasks, propose(tasks, no_model, sources), options)
        best: dict[int, list[str]] = {}
        for (k, src), chk, v in zip(
            owners, checks, verify_within(verify, checks, options), strict=False
        ):
            if src and v.equivalent and len(chk.candidate) < len(best.get(k, chk.baseline)):
                best[k] = list(chk.candidate)
        keep = memo is not None and out_of_time(options) is None
        for k, tkey in enumerate(task_keys):
            found[tkey] = best.get(k)
            if keep and memo is not None:
                memo[tkey] = found[tkey]
    out = list(lines)
    for (a, b), key in sorted(zip(runs, keys, strict=True), reverse=True):
        new = found[key]
        if new is not None:
            out[a:b] = [INDENT + t for t in new]
    return out


def inline_stage(
    fns: list[FunctionState],
    ours: ModuleText,
    client: ModuleText | None,
    options: CompileOptions,
    sources: SourceSet,
    verify: VerifyBackend,
) -> None:
    """Try inlining in every function worked on in this run (module docstring), callees
    before their callers (a callee is inlined as it will be returned, its own inlining
    included); a function keeps its result so far unless an inlined version is proven and
    takes fewer cycles with every callee at its returned code."""
    run = _Run(fns, ours, client, options, sources, verify)
    for f in run.workable(_callees_first(fns, ours)):
        run.function(f)


def _callees_first(fns: list[FunctionState], ours: ModuleText) -> list[FunctionState]:
    by_name = {f.name: f for f in fns}
    order: list[FunctionState] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen or name not in ours.functions:
            return
        seen.add(name)
        for callee in sorted(ours.functions[name].callees):
            visit(callee)
        if name in by_name:
            order.append(by_name[name])

    for f in fns:
        visit(f.name)
    return order


@dataclass(frozen=True)
class _Callee:
    """A callee that qualifies: (body, helpers) as returned and in its reference."""

    ours: tuple[list[str], list[str]]
    ref: tuple[list[str], list[str]]
    straight: bool
    once: bool  # the module calls it from one place


class _Run:
    """The inline pass over one module."""

    def __init__(
        self,
        fns: list[FunctionState],
        ours: ModuleText,
        client: ModuleText | None,
        options: CompileOptions,
        sources: SourceSet,
        verify: VerifyBackend,
    ) -> None:
        self.ours, self.client, self.options = ours, client, options
        self.sources, self.verify = sources, verify
        self.state = {f.name: f for f in fns}
        self.by_label = {fn.label: name for name, fn in ours.functions.items()}
        self.calls = dict.fromkeys(self.by_label, 0)
        for ln in ours.lines:
            m = _CALL.match(ln)
            if m and m.group(1) in self.calls:
                self.calls[m.group(1)] += 1
        #: normalized reference text of each function rewritten by this pass
        self.norm: dict[str, list[str]] = {}

    def returned(self, name: str) -> list[str]:
        """A function's lines as they will be returned (so far)."""
        g = self.state.get(name)
        if g is not None and g.new_lines is not None:
            return list(g.new_lines)
        return self.ours.section_lines(name)

    def reference(self, name: str, ref_text: ModuleText) -> list[str]:
        """A function's reference lines, with the same control skeleton as `returned`."""
        return self.norm.get(name) or ref_text.section_lines(name)

    def ref_text(self, f: FunctionState) -> ModuleText:
        client = self.client
        return client if (client is not None and f.reference_is_client) else self.ours

    def function(self, f: FunctionState) -> None:
        isa = self.options.isa
        ref_text = self.ref_text(f)
        cur = self.returned(f.name)
        found: dict[str, _Callee] = {}
        for ln in cur:
            m = _CALL.match(ln)
            g = self.by_label.get(m.group(1)) if m else None
            if g is None or g == f.name or m is None or m.group(1) in found:
                continue
            gs = self.state.get(g)
            if gs is None or gs.passthrough or gs.cached is not None:
                continue
            if g not in ref_text.functions:
                continue
            suffix = f"in_{f.name}"
            mine = inline_parts(self.returned(g), suffix, isa)
            theirs = inline_parts(self.reference(g, ref_text), suffix, isa)
            if mine is None or theirs is None or len(mine[0]) > INLINE_LIMIT:
                continue
            once = self.calls[m.group(1)] == 1
            if len(mine[0]) > INLINE_MAX_INSTRUCTIONS and not once:
                continue
            found[m.group(1)] = _Callee(mine, theirs, not mine[1], once)
        # most to least ambitious; the first plan that is proven and cheaper is kept
        plans: list[list[str]] = []
        for keep in (
            lambda c: True,
            lambda c: c.straight,
            lambda c: c.once,
            lambda c: c.straight and c.once,
        ):
            plan = sorted(lab for lab, c in found.items() if keep(c))
            if plan and plan not in plans:
                plans.append(plan)
        best_so_far: int | None = None
        for plan in plans:
            if out_of_time(self.options) is not None:
                return
            if best_so_far is None:
                best_so_far = self.measure(f, cur)
                if best_so_far is None:
                    return
            if self.attempt(f, cur, {lab: found[lab] for lab in plan}, best_so_far):
                return

    def untried(
        self, f: FunctionState, find: Callable[[list[str], frozenset[str]], Sequence[_Labelled]]
    ) -> Iterator[tuple[list[str], _Labelled]]:
        """``(lines, found)`` for each thing ``find(lines, others_call)`` finds in ``f``'s
        current lines (``others_call``: the labels other functions call), the first one not
        tried yet each time, ``lines`` as they stand after the previous ones were kept or
        refused; until nothing new is found or the request's deadline: a pass's loop over
        one function's loops. Stop early with ``break``."""
        others = called_labels(self.others(f))
        tried: set[str] = set()
        while out_of_time(self.options) is None:
            cur = self.returned(f.name)
            found = [x for x in find(cur, others) if x.label not in tried]
            if not found:
                return
            tried.add(found[0].label)
            yield cur, found[0]

    def workable(self, order: Iterable[FunctionState]) -> Iterator[FunctionState]:
        """The functions of ``order`` a function-level pass may rewrite (`rewritable`), until
        the request's deadline (`out_of_time`): a pass's loop over the module."""
        for f in order:
            if out_of_time(self.options) is not None:
                return
            if rewritable(f):
                yield f

    def others(self, f: FunctionState) -> list[list[str]]:
        """Every other function's lines as they will be returned (so far)."""
        return [self.returned(g) for g in self.ours.functions if g != f.name]

    def context(self, f: FunctionState) -> dict[str, list[str]]:
        """Every other function's returned lines (for harnesses)."""
        return {
            n: list(g.new_lines)
            for n, g in self.state.items()
            if n != f.name and g.new_lines is not None
        }

    def taller_caller(self, f: FunctionState, lines: list[str], v: FunctionVerdict) -> str | None:
        """With ``lines`` as ``f``'s code (measured by ``v``), the first function calling
        ``f`` (directly or not) whose padded height would exceed what it has now, or that
        cannot be measured with them, as a refusal note; None if none would. The program's
        words feed tables of every caller's program too (program, hash, and the cascade
        through the attestation's Tip5 traces), so a rewrite that lengthens ``f`` past
        design §2's rule (`no_taller`) is measured in its callers as well (issue 11 item
        7); one within that rule is not (None)."""
        if no_taller(v.heights, v.baseline_heights):
            return None
        for g in self.state.values():
            now = g.report.padded_height
            if g is f or not now or g.reference is None or g.passthrough:
                continue
            if f.name not in self.ours.closure(g.name)[1:]:
                continue
            try:
                prog = _module_with(self.ours, {**self.context(g), f.name: lines}).harness(
                    g.name, self.options.isa
                )
            except TasmSyntaxError:
                return f"not kept: {g.name} does not assemble with it"
            v = self.check(g, prog)
            if not v.equivalent:
                return f"not kept: {g.name} not measured with it ({v.reason})"
            if padded_height(v.heights) > now:
                return f"not kept: padded height of its caller {g.name} {padded_height(v.heights)}, {now} without"
        return None

    def measure(self, f: FunctionState, cur: list[str]) -> int | None:
        """Cycles of ``f`` as it stands, its callees at their returned code."""
        ctx = self.context(f)
        if not (set(self.ours.closure(f.name)[1:]) & set(ctx)):
            return f.report.cycles if f.report.halted else None
        v = self.run_function(f, cur)
        return v.cycles if v is not None and v.equivalent else None

    def harness(self, f: FunctionState, lines: list[str]) -> Program | None:
        """``f`` with ``lines``, every other function at its returned code, as a harness
        program; None if they do not assemble."""
        try:
            return _module_with(self.ours, {**self.context(f), f.name: lines}).harness(
                f.name, self.options.isa
            )
        except TasmSyntaxError as exc:  # our own text: be safe anyway
            log.warning("a rewrite of %s does not assemble: %s", f.name, exc)
            return None

    def run_function(self, f: FunctionState, lines: list[str]) -> FunctionVerdict | None:
        """``f`` with ``lines`` (every other function at its returned code) run against its
        reference on the function witnesses (`check_function`; one seed for every version
        of ``f``, so their cycles compare); None if ``lines`` do not assemble."""
        prog = self.harness(f, lines)
        return None if prog is None else self.check(f, prog)

    def keep(
        self,
        f: FunctionState,
        lines: list[str],
        best: int,
        what: str,
        done: str,
        *,
        tie_if_smaller: bool = False,
        longer: bool = False,
    ) -> bool:
        """Run ``lines`` (a rewritten ``f``) against its reference (`run_function`) and adopt
        them if they are equivalent there, take fewer cycles than ``best`` (or as many, with
        ``tie_if_smaller``, when they are fewer instructions than ``f`` now: design §2 ranks
        ties by the other tables, then size) and raise no table (with ``longer``, a rewrite
        that lengthens the program to save cycles: no table that grows with execution, nor
        the padded height, `refusal`); else note why. ``what``:
        the subject of the note (``"loops __L"``), ``done``: the note on adoption. True if
        adopted."""
        v = self.run_function(f, lines)
        if v is None:
            return False
        if not v.equivalent and v.witness >= 0:
            log.error("%s of %s changed its behaviour: %s", what, f.name, v.reason)
        smaller = tie_if_smaller and _count(lines) < _count(self.returned(f.name))
        why = refusal(v, best, tie=smaller, longer=longer, current_padded=f.report.padded_height)
        if why is None and longer:
            why = self.taller_caller(f, lines, v)
        if why is not None:
            f.report.notes.append(f"{what} {why}")
            return False
        adopt(f, lines, best, v, done)
        return True

    def check(self, f: FunctionState, prog: Program) -> FunctionVerdict:
        """`run_function` for a harness already built."""
        assert f.reference is not None
        return check_function(
            f.reference,
            prog,
            witnesses=self.options.witnesses,
            seed=self.options.seed + 2,
            deadline=self.options.deadline,
            private_cells=f.private,
        )

    def attempt(
        self, f: FunctionState, cur: list[str], plan: dict[str, _Callee], best: int
    ) -> bool:
        """Inline the callees of ``plan`` into ``f``; True if the result was kept."""
        isa, ref_text = self.options.isa, self.ref_text(f)
        cand, spans, sites = inline_calls(cur, {lab: c.ours[0] for lab, c in plan.items()}, isa)
        if not spans:
            return False
        norm, _, ref_sites = inline_calls(
            self.reference(f.name, ref_text), {lab: c.ref[0] for lab, c in plan.items()}, isa
        )
        if ref_sites != sites:
            return False  # the reference calls them elsewhere: the skeletons would differ
        cand = _trim(cand) + [ln for c in plan.values() for ln in c.ours[1]]
        norm = _trim(norm) + [ln for c in plan.values() for ln in c.ref[1]]
        cand = _reoptimize(f, cand, spans, self.options, self.sources, self.verify)
        if not self.prove(f, cand, norm, sites, best, _count(cand) - _count(cur)):
            return False
        self.norm[f.name] = norm
        return True

    def prove(
        self,
        f: FunctionState,
        cand_lines: list[str],
        norm_lines: list[str],
        sites: dict[str, int],
        best: int,
        growth: int = 0,
    ) -> bool:
        """Prove and measure one inlined version of ``f`` (``growth``: static instructions it
        adds); keep it (True) if it is better."""
        assert f.reference is not None
        options, ref_text = self.options, self.ref_text(f)
        dl = options.deadline
        norm_ctx = {n: lines for n, lines in self.norm.items() if n != f.name}
        cand = self.harness(f, cand_lines)
        if cand is None:
            return False
        try:
            norm = _module_with(ref_text, {**norm_ctx, f.name: norm_lines}).harness(
                f.name, options.isa
            )
        except TasmSyntaxError as exc:  # our own text: be safe anyway
            log.warning("inlined %s does not assemble: %s", f.name, exc)
            return False
        v = self.check(f, cand)
        rep = f.report
        names = ", ".join(f"{lab} ({n}x)" for lab, n in sorted(sites.items()))
        if not v.equivalent and v.witness >= 0:
            log.error("inlining into %s changed its behaviour: %s", f.name, v.reason)
        # issue 11 item 5: inlined code may lengthen the program, not the padded height
        why = refusal(v, best, longer=True, current_padded=rep.padded_height)
        if why is None and growth > INLINE_GROWTH_PER_CYCLE * (best - v.cycles):
            why = (
                f"not kept: {growth} more instructions for {best - v.cycles} cycles saved per call"
            )
        if why is None:
            why = self.taller_caller(f, cand_lines, v)
        if why is not None:
            rep.notes.append(f"inlining {names} {why}")
            return False
        proof = check_aligned(
            norm,
            cand,
            witnesses=options.witnesses,
            seed=options.seed,
            deadline=dl,
            private_cells=f.private,
        )
        if not proof.equivalent:
            rep.notes.append(f"inlining {names} not proven: {proof.reason}")
            return False
        adopt(f, cand_lines, best, v, f"inlined {names}")
        return True
