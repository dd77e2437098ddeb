"""Function-level pass ``inline``: small straight-line callees inlined into their callers, and
the runs they merge into optimized again (issue 11, calls).

A callee qualifies when its whole text is ``label:``, straight-line instructions (no label, no
control flow, nothing that skips), ``return`` — in our lowering *and* in the reference's text
— and it is small (`INLINE_MAX_INSTRUCTIONS`) or called from one place in the module. A call
site qualifies unless the instruction before it may skip it (``skiz; call g`` skips the call,
but would skip only the first instruction of an inlined body). Every qualifying call of the
callee in the caller is inlined; the callee itself stays (other modules may call it).

Proof. Executing ``call g`` where g's text is ``g: R; return`` runs exactly R and continues
after the call: the only differences are the jump stack (not observable, design §2), clock
cycles and table heights (measured, not assumed). So the caller's reference with the same
calls replaced by the *reference's* body of g (the *normalized reference*) has the caller's
observable behaviour, and `check_aligned` proves the candidate against it: same control
skeleton (the calls are gone from both), every differing run proven by `check_block`. The
candidate is also run against the untouched reference on the function's witnesses
(`check_function`: equivalence and the costs we report). It is kept only when both pass, it
takes fewer cycles than the function's best so far, and no table is taller than the
reference's (so the program table bounds code growth: inlining a callee with other callers
in the closure must pay for itself).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from tasmopt.errors import TasmSyntaxError
from tasmopt.isa import IsaVariant, instruction_set
from tasmopt.module import ModuleText
from tasmopt.optimizer.state import FunctionState, VerifyBackend, out_of_time, verify_within
from tasmopt.report import CompileOptions
from tasmopt.sources import BlockTask, SourceSet
from tasmopt.tasm.parser import parse_instructions
from tasmopt.vm.equivalence import (
    BlockCheck,
    check_aligned,
    check_function,
    no_taller,
    padded_height,
)

__all__ = ["INLINE_MAX_INSTRUCTIONS", "straight_body", "inline_calls", "inline_stage"]

log = logging.getLogger(__name__)

#: Callees up to this many instructions (``return`` not counted) are inlined at every
#: qualifying call site; larger ones only where the module calls them once.
INLINE_MAX_INSTRUCTIONS = 16
#: Never inline a body longer than this (proof time).
INLINE_LIMIT = 400
INDENT = "    "
_CALL = re.compile(r"^\s*call\s+(\S+)\s*(//.*)?$")


def _name(line: str) -> str | None:
    """``":"`` for a label line, the mnemonic for an instruction, None for blanks/comments."""
    text = line.split("//", 1)[0].strip()
    if not text:
        return None
    if text.endswith(":") and not line[:1].isspace():
        return ":"
    return text.split()[0]


def straight_body(lines: Sequence[str], isa: IsaVariant = "release") -> list[str] | None:
    """The instruction lines between a function's label and its final ``return`` when its
    whole text is ``label:``, straight-line instructions, ``return``; else None."""
    table = instruction_set(isa)
    named = [(ln, n) for ln in lines if (n := _name(ln)) is not None]
    if len(named) < 2 or named[0][1] != ":" or named[-1][1] != "return":
        return None
    body = []
    for ln, n in named[1:-1]:
        if n == ":" or n not in table or table[n].is_control_flow or table[n].may_skip_next:
            return None
        body.append(INDENT + ln.split("//", 1)[0].strip())
    return body


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
        n = _name(ln)
        if n is not None:
            prev = n
    return out, spans, sites


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
        n = _name(ln)
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


def _reoptimize(
    f: FunctionState,
    lines: list[str],
    spans: list[tuple[int, int]],
    options: CompileOptions,
    sources: SourceSet,
    verify: VerifyBackend,
) -> list[str]:
    """Rewrite the straight-line runs that contain an inlined body with the block sources
    (not the model: no TIR for a merged run), each candidate proven by `check_block`."""
    runs = [r for r in _runs(lines, options.isa) if any(r[0] <= a < r[1] for a, _ in spans)]
    tasks = []
    for k, (a, b) in enumerate(runs):
        text = "\n".join(ln for ln in lines[a:b] if _name(ln) is not None)
        instrs = tuple(parse_instructions(text, options.isa))
        tasks.append(BlockTask(f.name, -1000 - k, f"{f.name}.inlined[{k}]", (), instrs, 0, 0, ""))
    if not tasks:
        return lines
    names = tuple(n for n in options.sources if n != "model")
    proposals: list[list[list[str]]] = [[] for _ in tasks]
    for name in names:
        src = sources.get(name)
        if src is None:
            continue
        try:
            got = src.propose(tasks, options)
        except Exception:  # a source must never break a compile
            log.exception("candidate source %r failed on inlined runs", name)
            continue
        if len(got) != len(tasks):
            continue
        for k, cands in enumerate(got):
            proposals[k].extend([str(i) for i in c] for c in cands)
    checks: list[BlockCheck] = []
    owners: list[tuple[int, list[str]]] = []
    for k, task in enumerate(tasks):
        base = tuple(str(i) for i in task.baseline)
        seen = {base}
        for cand in proposals[k]:
            if tuple(cand) in seen or len(cand) >= len(base):
                continue
            seen.add(tuple(cand))
            checks.append(
                BlockCheck(base, tuple(cand), options.isa, options.witnesses, options.seed)
            )
            owners.append((k, cand))
    best: dict[int, list[str]] = {}
    for (k, cand), v in zip(owners, verify_within(verify, checks, options), strict=False):
        if v.equivalent and (k not in best or len(cand) < len(best[k])):
            best[k] = cand
    out = list(lines)
    for k in sorted(best, reverse=True):
        a, b = runs[k]
        out[a:b] = [INDENT + t for t in best[k]]
    return out


def inline_stage(
    fns: list[FunctionState],
    ours: ModuleText,
    client: ModuleText | None,
    options: CompileOptions,
    sources: SourceSet,
    verify: VerifyBackend,
) -> None:
    """Try inlining in every function worked on in this run (module docstring); a function
    keeps its result so far unless the inlined version is proven and cheaper."""
    isa = options.isa
    by_label = {fn.label: name for name, fn in ours.functions.items()}
    calls = {lab: 0 for lab in by_label}
    for ln in ours.lines:
        m = _CALL.match(ln)
        if m and m.group(1) in calls:
            calls[m.group(1)] += 1
    state = {f.name: f for f in fns}
    for f in fns:
        if out_of_time(options) is not None:
            return
        if f.passthrough or f.reference is None or f.cached is not None or f.skipped:
            continue
        ref_text = client if (client is not None and f.reference_is_client) else ours
        cur = list(f.new_lines) if f.new_lines is not None else ours.section_lines(f.name)
        ours_bodies: dict[str, list[str]] = {}
        ref_bodies: dict[str, list[str]] = {}
        for ln in cur:
            m = _CALL.match(ln)
            g = by_label.get(m.group(1)) if m else None
            if g is None or g == f.name or m is None or m.group(1) in ours_bodies:
                continue
            gs = state.get(g)
            if gs is None or gs.passthrough or g not in ref_text.functions:
                continue
            mine = straight_body(ours.section_lines(g), isa)
            theirs = straight_body(ref_text.section_lines(g), isa)
            if mine is None or theirs is None or len(mine) > INLINE_LIMIT:
                continue
            if len(mine) > INLINE_MAX_INSTRUCTIONS and calls[m.group(1)] != 1:
                continue
            ours_bodies[m.group(1)] = mine
            ref_bodies[m.group(1)] = theirs
        if not ours_bodies:
            continue
        cand, spans, sites = inline_calls(cur, ours_bodies, isa)
        if not spans:
            continue
        norm, _, ref_sites = inline_calls(ref_text.section_lines(f.name), ref_bodies, isa)
        if ref_sites != sites:
            continue  # the reference calls them elsewhere: the skeletons would differ
        cand = _reoptimize(f, cand, spans, options, sources, verify)
        _try(f, cand, norm, sites, ours, ref_text, options)


def _try(
    f: FunctionState,
    cand_lines: list[str],
    norm_lines: list[str],
    sites: dict[str, int],
    ours: ModuleText,
    ref_text: ModuleText,
    options: CompileOptions,
) -> None:
    """Prove and measure one inlined version of ``f``; keep it if it is better."""
    assert f.reference is not None
    dl = options.deadline
    try:
        cand = _module_with(ours, {f.name: cand_lines}).harness(f.name, options.isa)
        norm = _module_with(ref_text, {f.name: norm_lines}).harness(f.name, options.isa)
    except TasmSyntaxError as exc:  # our own text: be safe anyway
        log.warning("inlined %s does not assemble: %s", f.name, exc)
        return
    v = check_function(
        f.reference,
        cand,
        witnesses=options.witnesses,
        seed=options.seed + 2,
        deadline=dl,
        private_cells=f.private,
    )
    rep = f.report
    names = ", ".join(f"{lab} ({n}x)" for lab, n in sorted(sites.items()))
    if not v.equivalent:
        if v.witness >= 0:
            log.error("inlining into %s changed its behaviour: %s", f.name, v.reason)
        rep.notes.append(f"inlining {names} not verified: {v.reason}")
        return
    if v.cycles >= rep.cycles or not no_taller(v.heights, v.baseline_heights):
        rep.notes.append(
            f"inlining {names} not kept: {v.cycles} cycles (best so far {rep.cycles}) "
            "or a taller table"
        )
        return
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
        return
    f.new_lines, f.whole = cand_lines, True
    rep.fallback, rep.reason = False, None
    if rep.source in ("compiler", "client"):
        rep.source = "rules"
    rep.notes.append(f"inlined {names}: {rep.cycles} -> {v.cycles} cycles")
    rep.cycles, rep.baseline_cycles = v.cycles, v.baseline_cycles
    rep.halted = v.halted
    rep.heights, rep.baseline_heights = v.heights, v.baseline_heights
    rep.padded_height = padded_height(v.heights)
    rep.baseline_padded_height = padded_height(v.baseline_heights)
