"""Function-level pass ``conditions``: branches that the branches before them decide
(issue 11, across blocks).

A ``match`` or an ``if``/``else if`` chain lowers to nested subroutines, each testing again:
upstream's ``sha256.k`` tests ``i == 0`` sixty-four times, once per nested ``else``, so the
first test decides all the others (every one after it is false on the path that reaches it),
yet every call walks the whole chain. A compiler calls this jump threading on known
conditions; an expert never writes the chain.

The pass explores every path through one function symbolically (`tasmopt.vm.symbolic`, from
an unknown entry state, the function's own sections entered by their ``call`` and by falling
through, ``return`` back to the caller's next instruction). Each ``skiz`` pops a condition
``c``; the path's *facts* are the earlier conditions with their outcomes and the guards the
path has passed (``assert``: the value was zero; ``invert``: nonzero). `tasmopt.vm.facts.decide`
proves ``c`` zero or nonzero from the facts (syntactically, else by z3 with every operation it
cannot express left unconstrained), or forks both ways. A ``skiz`` whose outcome is the same
on *every* path that reaches it is rewritten:

* always taken (``c != 0``): ``skiz`` -> ``pop 1``;
* never taken (``c == 0``): ``skiz; X`` -> ``pop 1`` (``X`` is reached only through that
  ``skiz``: the instruction before it cannot skip it, and ``X`` is in the same section).

Sections nothing reaches any more are removed, the straight-line runs around the rewritten
lines go back to the block search (each candidate proven by `check_block`), and calls of
sections reduced to ``call G; return`` are forwarded to ``G`` (`tasmopt.optimizer.shortcuts`;
one-instruction sections stay called until the ``shortcuts`` pass, last, so that the
``branches`` pass still sees the if/else idiom).

Soundness: each rewrite keeps the behaviour of every execution that reaches the ``skiz``
(``pop 1`` pops what ``skiz`` popped and does what the decided outcome did), and the paths
explored include every execution of the function: exploration gives up (no rewrite) on
anything it cannot follow — ``recurse``, ``recurse_or_return``, a ``call`` out of the
function, a section another function calls, a budget of paths or steps — and a path that an
execution would leave by failing is still explored (more outcomes only ever forbid a
rewrite). The rewritten function is also run against its reference on the verifier's
witnesses (`check_function`) and kept only when equivalent there, cheaper in cycles (or
equal and smaller) and with no taller table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tasmopt.deadline import Deadline
from tasmopt.errors import TasmSyntaxError
from tasmopt.isa import IsaVariant, instruction_set
from tasmopt.module import ModuleText, line_kind
from tasmopt.optimizer.inline import INDENT, _reoptimize, _Run
from tasmopt.optimizer.loops import _TERMINATORS, _instrs, _sections, called_labels
from tasmopt.optimizer.shortcuts import shortcut_calls
from tasmopt.optimizer.state import FunctionState, VerifyBackend
from tasmopt.report import CompileOptions
from tasmopt.sources import SourceSet
from tasmopt.tasm.program import Instr
from tasmopt.vm.expr import ExprContext
from tasmopt.vm.facts import Fact, decide
from tasmopt.vm.symbolic import SymbolicRun, continue_symbolic

__all__ = ["known_branches", "fold_branches", "condition_stage"]

#: Most complete paths explored per function (beyond: no rewrite).
MAX_PATHS = 4096
#: Most instructions executed symbolically per function, all paths together.
MAX_STEPS = 200_000
#: Most nested calls on one path.
MAX_DEPTH = 64
#: Most z3 queries per function (`decide` asks two at most); past them conditions the
#: syntactic check cannot decide fork.
MAX_SMT = 200
#: Shortcut rounds after folding (each resolves one level of a ``call G; return`` chain
#: everywhere at once).
SHORTCUT_ROUNDS = 16

_POP1 = Instr("pop", 1)


@dataclass
class _Path:
    run: SymbolicRun
    facts: tuple[Fact, ...]
    sec: int  # section index
    pos: int  # instruction index in the section
    ret: tuple[tuple[int, int], ...]  # return points (section, instruction index)


def _guard_facts(run: SymbolicRun) -> tuple[Fact, ...]:
    """The guards the path has passed, as facts (an execution that reaches a later
    instruction satisfied them)."""
    by_id = run.ctx._by_id
    return tuple(
        (by_id[g[1]], g[0] == "zero") for g in sorted(run.guards) if g[0] in ("zero", "nonzero")
    )


def known_branches(
    lines: Sequence[str],
    isa: IsaVariant = "release",
    others_call: frozenset[str] = frozenset(),
    deadline: Deadline | None = None,
) -> dict[int, bool] | None:
    """Line index of every ``skiz`` of ``lines`` (one function's sections) that every path
    reaching it decides the same way -> True (always taken: ``c != 0``) or False (never);
    None when the exploration cannot cover every execution (module docstring).
    ``others_call``: labels other functions call."""
    table = instruction_set(isa)
    sections = _sections(lines)
    if not sections or any(lab in others_call for lab, _, _ in sections[1:]):
        return None
    labels = {lab: k for k, (lab, _, _) in enumerate(sections)}
    try:
        code = [_instrs(lines, s + 1, e, isa) for _, s, e in sections]
    except (TasmSyntaxError, ValueError):
        return None
    ctx = ExprContext()
    outcomes: dict[int, set[bool]] = {}
    work = [_Path(SymbolicRun(ctx), (), 0, 0, ())]
    steps = paths = smt = 0
    while work:
        p = work.pop()
        while True:
            steps += 1
            if steps > MAX_STEPS:
                return None
            if deadline is not None and steps % 512 == 0 and deadline.expired:
                return None
            if p.pos >= len(code[p.sec]):  # falls through into the next section
                if p.sec + 1 >= len(sections):
                    return None
                p.sec, p.pos = p.sec + 1, 0
                continue
            li, ins = code[p.sec][p.pos]
            spec = table[ins.name]
            if not spec.is_control_flow:
                continue_symbolic(p.run, [ins], isa)
                if p.run.unsupported is not None:
                    return None
                p.pos += 1
                continue
            if spec.may_skip_next:
                if p.pos + 1 >= len(code[p.sec]):
                    return None  # what it skips lies in the next section: not followed
                cond = p.run.peek(0)
                continue_symbolic(p.run, [_POP1], isa)
                facts = p.facts + _guard_facts(p.run)
                got = decide(ctx, facts, cond) if smt < MAX_SMT else decide(ctx, (), cond)
                smt += 0 if cond.is_const else 1
                seen = outcomes.setdefault(li, set())
                if got is None:
                    seen.update((True, False))
                    skip = _Path(p.run.fork(), p.facts + ((cond, True),), p.sec, p.pos + 2, p.ret)
                    work.append(skip)
                    p.facts += ((cond, False),)
                    p.pos += 1
                else:
                    seen.add(got)
                    p.pos += 1 if got else 2
                continue
            if ins.name == "call":
                if not isinstance(ins.arg, str) or ins.arg not in labels:
                    return None  # another function: its effect is not followed
                if len(p.ret) >= MAX_DEPTH:
                    return None
                p.ret += ((p.sec, p.pos + 1),)
                p.sec, p.pos = labels[ins.arg], 0
                continue
            if spec.halts:
                break
            if spec.ends_frame:  # return
                if not p.ret:
                    break
                (p.sec, p.pos), p.ret = p.ret[-1], p.ret[:-1]
                continue
            return None  # recurse, recurse_or_return: loops are not followed
        paths += 1
        if paths > MAX_PATHS:
            return None
    return {li: next(iter(s)) for li, s in outcomes.items() if len(s) == 1}


def _reachable(lines: Sequence[str], sections: Sequence[tuple[str, int, int]]) -> set[int]:
    """Sections reached from the first by calls and by falling through."""
    labels = {lab: k for k, (lab, _, _) in enumerate(sections)}
    seen: set[int] = set()
    todo = [0] if sections else []
    while todo:
        k = todo.pop()
        if k in seen:
            continue
        seen.add(k)
        _, s, e = sections[k]
        kinds = []
        for ln in lines[s + 1 : e]:
            kind = line_kind(ln)
            if kind is None:
                continue
            kinds.append(kind)
            if kind == "call":
                words = ln.split("//", 1)[0].split()
                if len(words) == 2 and words[1] in labels:
                    todo.append(labels[words[1]])
        ends = bool(kinds) and kinds[-1] in _TERMINATORS
        if not ends and k + 1 < len(sections):
            todo.append(k + 1)
    return seen


def fold_branches(
    lines: Sequence[str],
    isa: IsaVariant = "release",
    others_call: frozenset[str] = frozenset(),
    deadline: Deadline | None = None,
) -> tuple[list[str], list[int]] | None:
    """``lines`` with every decided ``skiz`` rewritten (module docstring) and the sections
    no longer reached removed, and the indices (into the result) of the rewritten lines;
    None when no ``skiz`` is decided."""
    decided = known_branches(lines, isa, others_call, deadline)
    if not decided:
        return None
    table = instruction_set(isa)
    sections = _sections(lines)
    where: dict[int, tuple[int, int]] = {}
    code = [_instrs(lines, s + 1, e, isa) for _, s, e in sections]
    for k, instrs in enumerate(code):
        for pos, (li, _) in enumerate(instrs):
            where[li] = (k, pos)
    out: list[str | None] = list(lines)
    changed: set[int] = set()
    for li in sorted(decided):
        if out[li] is None:
            continue  # skipped by a never-taken skiz before it: removed
        k, pos = where[li]
        taken = decided[li]
        if not taken:
            before = code[k][pos - 1][1] if pos > 0 else None
            if before is not None and table[before.name].may_skip_next:
                continue  # the next instruction is also reached when this skiz is skipped
            out[code[k][pos + 1][0]] = None
        out[li] = INDENT + "pop 1"
        changed.add(li)
    if not changed:
        return None
    kept_lines = [ln for ln in out if ln is not None]
    index = [i for i, ln in enumerate(out) if ln is not None]
    marks = [i in changed for i in index]
    spans = _live_lines(kept_lines)
    return [kept_lines[i] for i in spans], [n for n, i in enumerate(spans) if marks[i]]


def _live_lines(lines: Sequence[str]) -> list[int]:
    """Indices of the lines of ``lines`` outside sections nothing reaches (`_reachable`)."""
    secs = _sections(lines)
    live = _reachable(lines, secs)
    spans = list(range(secs[0][1] if secs else len(lines)))
    for k, (_, s, e) in enumerate(secs):
        if k in live:
            spans.extend(range(s, e))
    return spans


def condition_stage(
    fns: list[FunctionState],
    ours: ModuleText,
    client: ModuleText | None,
    options: CompileOptions,
    sources: SourceSet,
    verify: VerifyBackend,
) -> None:
    """Fold the decided branches of every function worked on in this run; a function keeps
    its result so far unless the folded one is equivalent on the verifier's witnesses, takes
    fewer cycles (or as many, and is smaller) and raises no table."""
    run = _Run(fns, ours, client, options, sources, verify)
    isa = options.isa
    for f in run.workable(fns):
        cur = run.returned(f.name)
        others = called_labels([run.returned(g) for g in ours.functions if g != f.name])
        found = fold_branches(cur, isa, others, options.deadline)
        if found is None:
            continue
        cand, at = found
        cand = _reoptimize(f, cand, [(i, i + 1) for i in at], options, sources, verify)
        for _ in range(SHORTCUT_ROUNDS):
            short = shortcut_calls(cand, isa, others, forward_only=True)
            if short is None:
                break
            cand = short[0]
        cand = [cand[i] for i in _live_lines(cand)]  # no other function calls into f
        best = run.measure(f, cur)
        if best is None:
            continue
        n = len(at)
        run.keep(
            f,
            cand,
            best,
            f"conditions ({n} decided branches)",
            f"conditions: {n} branches decided by earlier ones folded",
            tie_if_smaller=True,
        )
