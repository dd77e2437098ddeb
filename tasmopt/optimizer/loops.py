"""Function-level pass ``loops``: counted loops rewritten the way experts write them, with
``recurse_or_return`` on an induction variable (issue 11, loops).

The lowering's counted loop (spec/tir.md, ``Loop``) keeps a down-counter ``c`` on top of the
op stack and tests it at the head of every iteration::

    call L                          L: dup 0  push 0  eq  skiz  return     // c == 0: leave
                                       addi -1                             // c -= 1
                                       B                                   // the body
                                       recurse

Seven cycles of every iteration are bookkeeping. When the body also counts an induction
variable ``i`` up by one and keeps a bound ``n``, and every call site starts the loop with
``c = n - i``, the counter is redundant: ``c == 0`` exactly when ``i == n``. The rewrite
drops ``c``, moves ``i`` to st5 and ``n`` to st6 (a permutation ``A`` of the top of the
stack, undone by ``U``) and lets ``recurse_or_return`` end the loop::

    A+  skiz  call L  U  push 0     L: B'  recurse_or_return

where ``A+`` is ``A`` applied under ``c`` (so ``skiz`` consumes ``c``: a loop of zero trips
is not entered), ``B' = U; push 0; B; pop 1; A`` then optimized by the block sources (each
rewrite proven by `check_block`), and ``push 0`` restores the counter's final value.

A body may branch: up to `MAX_BRANCHES` ``skiz; call X`` with X a straight-line section
ending in ``return`` (the lowering's then/else). Each fact below is then established on
every path (2^k straight-line paths, infeasible ones included: conservative), and no branch
condition may depend on the counter; the branch sections are left as they are, since ``B``
runs in the old layout inside ``B'``.

A body with no such ``i`` (or whose call sites do not start ``c`` at ``n - i``) still
qualifies when it keeps some element ``n`` (almost every body does): the rewrite then
*makes* ``i = n - c`` at the call site, in the counter's place, and the body increments it
(``B' = U; B; addi 1; A``: B never reads the slot it would keep the counter in); after the
loop ``U; pop 1; push 0``. The argument below holds with this ``i``, the call-site identity
being true by construction. When every call site's prefix proves ``c = n`` (a loop
``for _ in 0..n`` counts down from a copy of its bound), that ``i`` is ``0`` and the call
site pushes the constant instead of computing ``n - c`` (`CountedLoop.from_zero`).

Proof. Write the old loop's state as ``(R, c)``. Symbolic execution of ``B`` (exact
polynomial identities over the Goldilocks field, `tasmopt.vm.symbolic`) establishes that
``B`` neither reads nor moves ``c`` (it ends with ``s0`` on top and mentions ``s0`` nowhere
else: not in another stack element, output, RAM access, the address of a cell it reads, guard
or the sponge), that it maps
``i`` to ``i + 1`` and leaves ``n`` in place, with no net stack change; so ``B`` acts on
``R`` alone as ``B_R = push 0; B; pop 1``. Symbolic execution of each call site's
straight-line prefix establishes ``c = n - i`` at the call. By induction ``c = n - i`` before
every iteration, so the old loop runs ``B_R`` until ``i == n`` and returns ``(R_t, 0)``; the
new one runs ``A; B_R; U`` conjugates of the same steps, stops at the same ``t`` (entry
test by ``skiz`` on ``c``, later tests by ``recurse_or_return`` on ``st5 == st6``), and
``U; push 0`` leaves ``(R_t, 0)``. Failures, inputs, outputs and RAM effects happen in the
same order (no range assumption is needed: the equalities are field identities, and a loop
that never meets ``i == n`` runs forever in both). Only the jump stack (not observable,
design §2), clock cycles and table heights differ; those are measured. Every rewritten
function is then also run against the unmodified reference on the verifier's witnesses
(`check_function`) and kept only when it is equivalent there, cheaper in cycles, with no
table that grows with execution taller and no padded height larger, its own or a caller's
(the call site's set-up lengthens the program: `refusal` with ``longer``); fail closed: any
condition not proven leaves the loop as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tasmopt.errors import TasmSyntaxError
from tasmopt.isa import IsaVariant, P, instruction_set, names_where
from tasmopt.module import ModuleText, line_kind
from tasmopt.optimizer.inline import (
    INDENT,
    _reoptimize,
    _Run,
    apply_edits,
    called_labels,
    deeper,
)
from tasmopt.optimizer.state import FunctionState, VerifyBackend
from tasmopt.report import CompileOptions
from tasmopt.sources import SourceSet
from tasmopt.tasm.parser import parse_instructions
from tasmopt.tasm.program import Instr
from tasmopt.vm.expr import ExprContext, Poly
from tasmopt.vm.guards import guard_polys
from tasmopt.vm.symbolic import SymbolicRun, run_symbolic

__all__ = [
    "called_labels",
    "with_loops_rewritten",
    "CountedLoop",
    "LoopShape",
    "loop_shapes",
    "exclusive_loops",
    "find_counted_loops",
    "no_fall_through",
    "LOOP_END",
    "loop_sections",
    "loop_stage",
    "permutation_program",
    "rewrite_loops",
]

log = logging.getLogger(__name__)

#: Deepest op-stack element a ``swap``/``dup`` reaches (Triton VM spec: st0..st15).
REACH = 15
#: ``recurse_or_return`` compares these two elements (Triton VM spec).
I_SLOT, N_SLOT = 5, 6
#: Stack shuffles with no net effect (``pick``, ``place``, ``swap``: ISA table), ordered.
_PERMUTATIONS = sorted(names_where(lambda i: i.is_stack_shuffle and i.stack_delta(1) == 0))
#: Instructions after which execution never falls through to the next line (ISA table).
_TERMINATORS = names_where(lambda i: i.ends_section)
#: Longest layout change `_layouts` searches for (breadth first).
LAYOUT_MOVES = 3
#: Most ``skiz; call`` branches a loop body may have (paths: 2 ** MAX_BRANCHES).
MAX_BRANCHES = 3
#: Guard kinds whose expressions `guard_polys` lists, and those without expressions (any
#: other kind: not proven).
#: (`guard_polys` lists the expressions of the first set.)
_POLY_GUARDS = frozenset({"zero", "nonzero", "u32", "xnonzero"})
_GUARD_KINDS = _POLY_GUARDS | {"false", "sponge_initialized"}


@dataclass(frozen=True)
class CountedLoop:
    """A counted loop whose counter the induction variable can replace.

    Attributes:
        label: the loop section's label. start, end: its line range (label line first).
        body: ``B``, the instructions between the decrement and ``recurse``.
        i_depth, n_depth: depths of ``i`` and ``n`` at B's entry (the counter at depth 0);
            ``i_depth`` None: the body has no induction variable and the rewrite makes one,
            ``i = n - c``, in the counter's place (module docstring).
        sites: line indices of the ``call label`` lines (all of them in the function).
    """

    label: str
    start: int
    end: int
    body: tuple[Instr, ...]
    i_depth: int | None
    n_depth: int
    sites: tuple[int, ...]
    #: made i only: every call site starts the counter at ``n`` (``c = n``), so the made
    #: ``i = n - c`` is 0 there and is pushed as a constant
    from_zero: bool = False


def _sections(lines: Sequence[str]) -> list[tuple[str, int, int]]:
    """``(label, start, end)`` of each labelled section (label line at ``start``)."""
    heads = [
        (i, ln.split("//", 1)[0].strip()[:-1].strip())
        for i, ln in enumerate(lines)
        if line_kind(ln) == ":"
    ]
    return [
        (lab, i, heads[k + 1][0] if k + 1 < len(heads) else len(lines))
        for k, (i, lab) in enumerate(heads)
    ]


def _instrs(lines: Sequence[str], a: int, b: int, isa: IsaVariant) -> list[tuple[int, Instr]]:
    """``(line index, instruction)`` of the instruction lines in ``lines[a:b]``."""
    out = []
    for i in range(a, b):
        k = line_kind(lines[i])
        if k is None or k == ":":
            continue
        words = lines[i].split("//", 1)[0].split()
        if k == "call" and len(words) == 2:  # a label of this text, resolved by the caller
            out.append((i, Instr("call", words[1])))
            continue
        (ins,) = parse_instructions(lines[i].split("//", 1)[0], isa)
        out.append((i, ins))
    return out


def no_fall_through(lines: Sequence[str], sections: Sequence[tuple[str, int, int]], k: int) -> bool:
    """Section ``k`` of ``lines`` (`_sections`) cannot be reached by falling through from
    the section before it: that one ends in ``return``, ``recurse``, ``recurse_or_return``
    or ``halt`` (ISA table ``ends_section``). False for the first section."""
    if k == 0:
        return False
    prev = [m for m in map(line_kind, lines[sections[k - 1][1] + 1 : sections[k][1]]) if m]
    return bool(prev) and prev[-1] in _TERMINATORS


#: The instruction that ends a ``recurse_or_return`` loop: it may both return and recurse
#: (ISA table).
LOOP_END = names_where(lambda i: i.may_return and i.may_recurse)


def entered_sections(
    lines: Sequence[str], isa: IsaVariant, others_call: frozenset[str]
) -> Iterator[tuple[str, int, int, list[tuple[int, Instr]]]]:
    """``(label, start, end, instrs)`` of each section of one function's ``lines`` entered
    only by ``call`` from this function: not its first section, no other function calls it
    (``others_call``), not reached by falling through; ``instrs`` are its ``(line, Instr)``
    pairs after the label. Sections that do not parse are skipped."""
    sections = _sections(lines)
    for k, (label, start, end) in enumerate(sections):
        if k == 0 or label in others_call or not no_fall_through(lines, sections, k):
            continue
        try:
            ins = _instrs(lines, start + 1, end, isa)
        except (TasmSyntaxError, ValueError):
            continue
        yield label, start, end, ins


def loop_sections(
    lines: Sequence[str], isa: IsaVariant, others_call: frozenset[str]
) -> Iterator[tuple[str, int, int, int, list[Instr]]]:
    """``(label, start, end, ret, body)`` of each `entered_sections` section that is a loop
    ``L: B  recurse_or_return``; ``ret`` is the line of its ``recurse_or_return``, ``body``
    is ``B``."""
    for label, start, end, ins in entered_sections(lines, isa, others_call):
        if len(ins) >= 2 and ins[-1][1].name in LOOP_END:
            yield label, start, end, ins[-1][0], [x for _, x in ins[:-1]]


def _is(ins: Instr, name: str, arg: int | None = None) -> bool:
    if ins.name != name:
        return False
    return arg is None or (isinstance(ins.arg, int) and ins.arg % P == arg % P)


def _at(run: SymbolicRun, depth: int) -> Poly:
    """The value at ``depth`` after a run (materialized values, then the untouched entry
    elements below them)."""
    if depth < len(run.stack):
        return run.stack[-1 - depth]
    return run.ctx.var("s", run.base + depth - len(run.stack))


def _paths(
    body: Sequence[Instr], helpers: dict[str, list[Instr]], isa: IsaVariant
) -> list[tuple[list[Instr], list[int]]] | None:
    """Every path through ``body``: its straight-line instructions (``skiz`` as ``pop 1``,
    a taken ``call X`` as X's instructions) and the indices of the ``pop 1`` that stand for
    a ``skiz`` (its popped value is the branch condition). The only control flow allowed is
    ``skiz; call X`` with X in ``helpers`` (straight-line sections ending in ``return``);
    None otherwise, or past `MAX_BRANCHES` branches."""
    table = instruction_set(isa)
    paths: list[tuple[list[Instr], list[int]]] = [([], [])]
    k, branches = 0, 0
    while k < len(body):
        ins = body[k]
        if not table[ins.name].is_control_flow:
            for p, _ in paths:
                p.append(ins)
            k += 1
            continue
        nxt = body[k + 1] if k + 1 < len(body) else None
        if not (
            table[ins.name].may_skip_next
            and nxt is not None
            and nxt.name == "call"
            and isinstance(nxt.arg, str)
            and nxt.arg in helpers
        ):
            return None
        branches += 1
        if branches > MAX_BRANCHES:
            return None
        forked = []
        for p, conds in paths:
            skip = (p + [Instr("pop", 1)], conds + [len(p)])
            take = (p + [Instr("pop", 1), *helpers[nxt.arg]], conds + [len(p)])
            forked += [skip, take]
        paths = forked
        k += 2
    return paths


def _helpers(lines: Sequence[str], isa: IsaVariant) -> dict[str, list[Instr]]:
    """The sections of ``lines`` that are straight-line and end in ``return`` (branch
    bodies), by label, without the ``return``."""
    table = instruction_set(isa)
    out = {}
    for label, start, end in _sections(lines)[1:]:
        try:
            ins = [x for _, x in _instrs(lines, start + 1, end, isa)]
        except (TasmSyntaxError, ValueError):
            continue
        if ins and table[ins[-1].name].ends_frame and ins[-1].name != "halt":
            if not any(table[x.name].is_control_flow for x in ins[:-1]):
                out[label] = ins[:-1]
    return out


def _body_facts(
    body: Sequence[Instr], isa: IsaVariant, helpers: dict[str, list[Instr]] | None = None
) -> tuple[list[int], list[int]] | None:
    """``(incremented, kept)``: the depths (>= 1) ``body`` increments by one and those it
    keeps on *every* path (`_paths`), provided that on every path it leaves the counter (st0)
    unread and in place, no branch condition depends on it, and it has no net stack effect
    (module docstring); None if it does not."""
    paths = _paths(body, helpers or {}, isa)
    if paths is None:
        return None
    facts = [_path_facts(p, conds, isa) for p, conds in paths]
    if any(f is None for f in facts):
        return None
    incs = [d for d in range(1, REACH + 1) if all(d in f[0] for f in facts if f)]
    keeps = [d for d in range(1, REACH + 1) if all(d in f[1] for f in facts if f)]
    return incs, keeps


def _path_facts(
    body: Sequence[Instr], conds: Sequence[int], isa: IsaVariant
) -> tuple[list[int], list[int]] | None:
    """`_body_facts` of one straight-line path; ``conds``: indices of the ``pop 1`` that
    stand for a ``skiz`` (the popped value must not depend on the counter either)."""
    ctx = ExprContext()
    s0 = ctx.var("s", 0)
    (c_atom,) = ctx.atoms_of([s0])
    for k in conds:
        before = run_symbolic(body[:k], ctx, isa)
        if before.unsupported is not None or c_atom in ctx.depends_on([_at(before, 0)]):
            return None
    run = run_symbolic(body, ctx, isa)
    if run.unsupported is not None or run.delta != 0:
        return None
    if _at(run, 0) is not s0:
        return None
    others = [_at(run, d) for d in range(1, max(len(run.stack), REACH + 1))]
    others += run.outputs + [x for pair in run.ram for x in pair]
    others += list(run.sponge or ())  # what the body absorbs must not depend on c either
    if c_atom in ctx.depends_on(others):  # a cell read at an address built from c too
        return None
    if any(g[0] not in _GUARD_KINDS for g in run.guards):
        return None  # a guard this check cannot read: fail closed
    if c_atom in ctx.depends_on(guard_polys(ctx, run.guards)):
        return None
    one = ctx.one
    incs = [d for d in range(1, REACH + 1) if _at(run, d) is ctx.add(ctx.var("s", d), one)]
    keeps = [d for d in range(1, REACH + 1) if _at(run, d) is ctx.var("s", d)]
    return incs, keeps


def _unskippable(lines: Sequence[str], site: int, isa: IsaVariant) -> bool:
    """The instruction before the ``call`` at line ``site`` cannot skip it (a ``skiz`` would
    skip only the first instruction of the code that replaces the call)."""
    table = instruction_set(isa)
    before = next(
        (line_kind(lines[j]) for j in range(site - 1, -1, -1) if line_kind(lines[j])), None
    )
    return not (before is not None and before in table and table[before].may_skip_next)


_SiteRun = tuple[ExprContext, SymbolicRun] | None


def _site_ok(site: _SiteRun, i_depth: int, n_depth: int) -> bool:
    """A call site's straight-line prefix (`_site_run`) leaves ``c = n - i``."""
    if site is None:
        return False
    ctx, run = site
    return _at(run, 0) is ctx.sub(_at(run, n_depth), _at(run, i_depth))


def _site_counts_n(site: _SiteRun, n_depth: int) -> bool:
    """A call site's straight-line prefix (`_site_run`) leaves ``c = n``."""
    return site is not None and _at(site[1], 0) is _at(site[1], n_depth)


def _site_run(lines: Sequence[str], site: int, isa: IsaVariant) -> _SiteRun:
    """Symbolic run of the straight-line prefix before the ``call`` at line ``site`` (from
    the last label or control-flow instruction); None when it cannot be trusted: empty, an
    unsupported instruction, or a first instruction a ``skiz`` may skip."""
    table = instruction_set(isa)
    prefix: list[Instr] = []
    k = site - 1
    while k >= 0:
        kind = line_kind(lines[k])
        if kind == ":":
            break
        if kind is not None:
            if kind not in table:
                return None
            if table[kind].may_skip_next:
                return None  # the prefix's first instruction may be skipped: not proven
            if table[kind].is_control_flow:
                break
            (ins,) = parse_instructions(lines[k].split("//", 1)[0], isa)
            prefix.insert(0, ins)
        k -= 1
    if not prefix:
        return None
    ctx = ExprContext()
    run = run_symbolic(prefix, ctx, isa)
    if run.unsupported is not None:
        return None
    return ctx, run


@dataclass(frozen=True)
class LoopShape:
    """A section in the lowering's counted-loop shape (spec/tir.md §3.4), entered only by
    ``call`` lines of this function that no ``skiz`` may skip, whose body ``B`` (between
    the decrement and ``recurse``) leaves the counter at st0 unread and in place on every
    path (`_body_facts`).

    Attributes:
        label: the section's label. start, end: its line range (label line first).
        body: ``B``. sites: line indices of the ``call label`` lines.
        incs, keeps: the depths (>= 1) ``B`` increments by one / keeps, on every path.
    """

    label: str
    start: int
    end: int
    body: tuple[Instr, ...]
    sites: tuple[int, ...]
    incs: tuple[int, ...]
    keeps: tuple[int, ...]


def loop_shapes(lines: Sequence[str], isa: IsaVariant = "release") -> list[LoopShape]:
    """The counted loops of one function's lines (`LoopShape`), in line order."""
    out = []
    sections = _sections(lines)
    helpers = _helpers(lines, isa)
    for k, (label, start, end) in enumerate(sections):
        if k == 0:
            continue  # the function's own entry section
        try:
            ins = _instrs(lines, start + 1, end, isa)
        except (TasmSyntaxError, ValueError):
            continue
        names = [x for _, x in ins]
        if len(names) < 8 or not _is(names[-1], "recurse"):
            continue
        head = names[:5]
        if not (
            _is(head[0], "dup", 0)
            and _is(head[1], "push", 0)
            and _is(head[2], "eq")
            and _is(head[3], "skiz")
            and _is(head[4], "return")
        ):
            continue
        if _is(names[5], "addi", -1):
            body = names[6:-1]
        elif len(names) > 8 and _is(names[5], "push", -1) and _is(names[6], "add"):
            body = names[7:-1]
        else:
            # the block search moved the decrement into the body: L is `head; addi -1;
            # addi 1; B'`, so B is `addi 1; B'` (the facts below decide whether it qualifies)
            body = [Instr("addi", 1), *names[5:-1]]
        if not no_fall_through(lines, sections, k):  # entered only by call
            continue
        sites = tuple(
            i
            for i, ln in enumerate(lines)
            if line_kind(ln) == "call" and ln.split("//", 1)[0].split()[1:] == [label]
        )
        if not sites or not all(_unskippable(lines, x, isa) for x in sites):
            continue
        facts = _body_facts(body, isa, helpers)
        if facts is None:
            continue
        out.append(LoopShape(label, start, end, tuple(body), sites, *map(tuple, facts)))
    return out


def find_counted_loops(lines: Sequence[str], isa: IsaVariant = "release") -> list[CountedLoop]:
    """The loops of one function's lines (its sections) that qualify for the rewrite."""
    out = []
    for shape in loop_shapes(lines, isa):
        # the permutation's window must leave room to park the counter below it
        keeps = [n for n in shape.keeps if n < REACH - 1]
        runs = [_site_run(lines, s, isa) for s in shape.sites]
        found = next(
            (
                (i, n)
                for i in shape.incs
                for n in keeps
                if n != i and i < REACH - 1 and all(_site_ok(r, i, n) for r in runs)
            ),
            None,
        )
        where = (shape.label, shape.start, shape.end, shape.body)
        if found is not None:
            out.append(CountedLoop(*where, found[0], found[1], shape.sites))
        elif keeps:  # no induction variable to reuse: make one from the counter
            zero = next((n for n in keeps if all(_site_counts_n(r, n) for r in runs)), None)
            n = keeps[0] if zero is None else zero
            out.append(CountedLoop(*where, None, n, shape.sites, zero is not None))
    return out


def _apply(stack: list[object], op: str, k: int) -> None:
    """``pick k`` / ``place k`` / ``swap k`` on a top-first list (Triton VM spec)."""
    if op == "pick":
        stack.insert(0, stack.pop(k))
    elif op == "place":
        stack.insert(k, stack.pop(0))
    elif op == "swap":
        stack[0], stack[k] = stack[k], stack[0]
    else:
        raise ValueError(f"not a permutation instruction: {op}")


def permutation_program(current: Sequence[object], target: Sequence[object]) -> list[str]:
    """Instructions turning the top of the stack from ``current`` into ``target`` (both top
    first, the same elements, at most 16): the shortest of at most two ``pick``/``place``/
    ``swap`` instructions if one does it, else a chain of ``pick``s (raises ValueError if
    ``target`` is not a permutation of ``current``)."""
    cur, want = list(current), list(target)
    if (
        len(cur) != len(want)
        or len(cur) > REACH + 1
        or {id(x) for x in cur} != {id(x) for x in want}
    ):
        raise ValueError("not a permutation of the reachable stack")
    if all(a is b for a, b in zip(cur, want, strict=True)):
        return []
    ops = [(op, k) for op in _PERMUTATIONS for k in range(1, len(cur))]
    for first in ops:
        one = list(cur)
        _apply(one, *first)
        if all(a is b for a, b in zip(one, want, strict=True)):
            return [f"{first[0]} {first[1]}"]
    for first in ops:
        for second in ops:
            two = list(cur)
            _apply(two, *first)
            _apply(two, *second)
            if all(a is b for a, b in zip(two, want, strict=True)):
                return [f"{first[0]} {first[1]}", f"{second[0]} {second[1]}"]
    m = len(cur)
    while m > 0 and cur[m - 1] is want[m - 1]:
        m -= 1
    out = []
    for d in range(m - 1, -1, -1):
        p = next(q for q in range(len(cur)) if cur[q] is want[d])
        # every pick moves the element to the top; the last m picks leave want[:m] on top
        out.append(f"pick {p}")
        _apply(cur, "pick", p)
    return out


def _inverse(program: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
    """The program undoing ``program`` (``pick k`` and ``place k`` undo each other)."""
    undo = {"pick": "place", "place": "pick", "swap": "swap"}
    return [(undo[op], d) for op, d in reversed(program)]


def _layouts(loop: CountedLoop) -> tuple[list[object], list[object], list[str], list[str]]:
    """The top of R (old layout without the counter; with a made ``i`` on top instead of
    it) and of N (i at st5, n at st6), top first, as element tokens, with the programs
    ``A`` (R to N) and ``U`` (N to R). N is what the shortest program of at most
    `LAYOUT_MOVES` ``pick``/``place``/``swap`` makes of R with i and n in place (the order
    of the other elements is free), else R with i and n moved and the others in order."""
    if loop.i_depth is None:  # the made i sits in the counter's place, on top of R
        i_r, n_r = 0, loop.n_depth
    else:
        i_r, n_r = loop.i_depth - 1, loop.n_depth - 1
    k = max(i_r, n_r, N_SLOT) + 1
    r = [object() for _ in range(k)]
    i_tok, n_tok = r[i_r], r[n_r]
    ops = [(op, d) for op in _PERMUTATIONS for d in range(1, k)]
    frontier: list[tuple[list[object], list[tuple[str, int]]]] = [(list(r), [])]
    for _ in range(LAYOUT_MOVES):
        deeper = []
        for stack, prog in frontier:
            for op, d in ops:
                cand = list(stack)
                _apply(cand, op, d)
                if cand[I_SLOT] is i_tok and cand[N_SLOT] is n_tok:
                    a = [*prog, (op, d)]
                    return r, cand, [f"{o} {x}" for o, x in a], [f"{o} {x}" for o, x in _inverse(a)]
                deeper.append((cand, [*prog, (op, d)]))
        frontier = deeper
    others = [e for d, e in enumerate(r) if d not in (i_r, n_r)]
    n = others[:I_SLOT] + [i_tok, n_tok] + others[I_SLOT:]
    return r, n, permutation_program(r, n), permutation_program(n, r)


def rewrite_loops(
    lines: Sequence[str], loops: Sequence[CountedLoop]
) -> tuple[list[str], list[tuple[int, int]]]:
    """The function's lines with ``loops`` rewritten (module docstring), and the line spans
    of the new straight-line code (for the block sources to optimize)."""
    edits: list[tuple[int, int, list[str]]] = []  # (start, end, new lines)
    for loop in loops:
        r, _, a, u = _layouts(loop)
        b = [str(x) for x in loop.body]
        if loop.i_depth is None:
            # i = n - c beside the counter, then the counter parked below the window
            make_i = ["dup 0", "push -1", "mul", f"dup {loop.n_depth + 1}", "add", "swap 1"]
            if loop.from_zero:  # c = n at every call: i = n - c = 0
                make_i = ["push 0", "swap 1"]
            a_plus = [*make_i, f"place {len(r)}", *a, f"pick {len(r)}"]
            body = [*u, *b, "addi 1", *a]  # i stands where B keeps the counter: unread
            after = [*u, "pop 1", "push 0"]
        else:
            # the counter is on top: park it below the window, permute, fetch it
            a_plus = [f"place {len(r)}", *a, f"pick {len(r)}"] if a else []
            body = [*u, "push 0", *b, "pop 1", *a]
            after = [*u, "push 0"]
        edits.append(
            (
                loop.start + 1,
                loop.end,
                [INDENT + t for t in body] + [INDENT + "recurse_or_return"],
            )
        )
        for s in loop.sites:
            site = [*a_plus, "skiz", f"call {loop.label}", *after]
            edits.append((s, s + 1, [INDENT + t for t in site]))
    return apply_edits(lines, edits)


def exclusive_loops(
    loops: Sequence[CountedLoop], others: Sequence[Sequence[str]]
) -> list[CountedLoop]:
    """The ``loops`` no other function calls (``others``: their lines). A loop another
    function also calls (a helper shared in a client's text) keeps its layout: those call
    sites would be neither rewritten nor covered by this function's proof."""
    called = called_labels(others)
    return [lp for lp in loops if lp.label not in called]


def loop_stage(
    fns: list[FunctionState],
    ours: ModuleText,
    client: ModuleText | None,
    options: CompileOptions,
    sources: SourceSet,
    verify: VerifyBackend,
) -> None:
    """Rewrite the qualifying counted loops of every function worked on in this run; a
    function keeps its result so far unless the rewritten one is equivalent on the
    verifier's witnesses, takes fewer cycles and raises no table."""
    run = _Run(fns, ours, client, options, sources, verify)
    for f in run.workable(fns):
        cur = run.returned(f.name)
        found = with_loops_rewritten(run, f, cur, ours, options, sources, verify)
        if found is None:
            continue
        best = run.measure(f, cur)
        if best is None:
            continue
        _keep(run, f, found[0], best, found[1])


def with_loops_rewritten(
    run: _Run,
    f: FunctionState,
    lines: list[str],
    ours: ModuleText,
    options: CompileOptions,
    sources: SourceSet,
    verify: VerifyBackend,
) -> tuple[list[str], list[str]] | None:
    """``lines`` (a version of ``f``) with its qualifying counted loops rewritten and the new
    straight-line runs optimized by the block sources, and the loops' labels; None if no
    loop qualifies. Not yet measured against the reference: the caller keeps it or not."""
    try:
        loops = find_counted_loops(lines, options.isa)
    except TasmSyntaxError:
        return None
    loops = exclusive_loops(loops, run.others(f))
    if not loops:
        return None
    cand, spans = rewrite_loops(lines, loops)
    # every straight-line run that holds a new line (a span crosses the call)
    lines_touched = [(x, x + 1) for a, b in spans for x in range(a, b)]
    # the new bodies run once per iteration: searched with the hot pass's budget; the call
    # sites (run once per call) with the request's, first the bodies (later in the text,
    # so the sites' line numbers stay), or all deeply where a site is in a loop body
    where = {label: (a, b) for label, a, b in _sections(cand)}
    bodies = [where[lp.label] for lp in loops if lp.label in where]
    hot = [t for t in lines_touched if any(a <= t[0] < b for a, b in bodies)]
    cold = [t for t in lines_touched if t not in hot]
    if hot and cold and max(t[0] for t in cold) < min(t[0] for t in hot):
        cand = _reoptimize(f, cand, hot, deeper(options), sources, verify)
        cand = _reoptimize(f, cand, cold, options, sources, verify)
    else:
        cand = _reoptimize(f, cand, lines_touched, deeper(options), sources, verify)
    return cand, [lp.label for lp in loops]


def _keep(run: _Run, f: FunctionState, cand_lines: list[str], best: int, labels: list[str]) -> bool:
    """Measure ``cand_lines`` against the reference on the witnesses; keep it if better."""
    names = ", ".join(labels)
    return run.keep(
        f,
        cand_lines,
        best,
        f"loops {names}",
        f"loops {names} to recurse_or_return",
        longer=True,  # the new layout is set up at the call site: fewer cycles, more words
    )
