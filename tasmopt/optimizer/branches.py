"""Function-level pass ``branches``: small pure branches replaced by straight-line selects
(if-conversion; issue 11, across blocks).

The lowering turns ``if c { T } else { E }`` into a branch idiom and two subroutines
(spec/tir.md §3.3)::

    push 1  swap 1  skiz  call T  skiz  call E        T: pop 1  <then>  push 0  return
                                                      E: <else>  return

and ``if c { T }`` into ``skiz  call T`` with ``T: <then>  return``. Every run pays about
ten cycles of branching plus a jump-stack row per call. Where both bodies are short,
straight-line, pure and cannot fail, and ``c`` is 0 or 1, the same effect is a select: each
op-stack slot the two paths leave different becomes ``c * (t - e) + e`` (``c * t`` when
``e`` is 0). The two paths' dataflows (`tasmopt.search.dataflow`) are merged over their
common entry, the select nodes added, and the block scheduler (`tasmopt.search.schedule`)
emits the straight-line code ``S``, which replaces the idiom; the subroutines go.

Proof. Write ``P_v`` for the straight-line instructions control runs from the idiom's first
line to the line after it when ``c = v`` (``skiz`` as ``pop 1``, a taken ``call X`` as X's
body without its ``return``; the then path's second ``skiz`` skips ``call E`` only if T
leaves 0 on top, which symbolic execution must show). The jump stack is not observable
(design §2), so the idiom behaves as ``P_c``. For v in {0, 1}, `check_block` proves
``pop 1; push v; S`` equivalent to ``pop 1; push v; P_v`` on every entry state, i.e.
``S`` equals ``P_v`` whenever ``c = v``; and ``c`` is 0 or 1 because the instruction right
before the idiom, in the same straight-line run, pushes a boolean (ISA table
``pushes_boolean``: ``eq``, ``lt``) or the constant 0 or 1. Both bodies are free of
effects and failures (ISA table), so computing them unconditionally changes nothing
observable. The subroutines are called from nowhere else in the module (checked on every
function's text). Every rewritten function is also run against its reference on the
verifier's witnesses (`check_function`) and kept only when it is equivalent there, cheaper in
cycles and no table is taller; anything not proven keeps its branches.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from tasmopt.deadline import Deadline
from tasmopt.errors import TasmSyntaxError
from tasmopt.isa import IsaVariant, P, instruction_set, names_where
from tasmopt.module import ModuleText, line_kind
from tasmopt.optimizer.inline import INDENT, _reoptimize, _Run, apply_edits
from tasmopt.optimizer.loops import (
    _at,
    _helpers,
    _sections,
    called_labels,
    with_loops_rewritten,
)
from tasmopt.optimizer.state import (
    FunctionState,
    VerifyBackend,
    adopt,
    out_of_time,
    refusal,
)
from tasmopt.report import CompileOptions
from tasmopt.search.algebra import simplify
from tasmopt.search.dataflow import Dataflow, Node, UnsupportedBlock, extract
from tasmopt.search.schedule import Budget, beam, exact
from tasmopt.sources import SourceSet
from tasmopt.tasm.parser import parse_instructions
from tasmopt.tasm.program import Instr
from tasmopt.vm.equivalence import BlockCheck, check_block
from tasmopt.vm.expr import ExprContext
from tasmopt.vm.symbolic import run_symbolic

__all__ = ["Branch", "find_branches", "select_code", "prove_select", "branch_stage"]

log = logging.getLogger(__name__)

#: Instructions whose result is 0 or 1 (ISA table ``pushes_boolean``).
BOOLEAN = names_where(lambda i: i.pushes_boolean)
#: Longest branch body converted (instructions).
MAX_BODY = 12
#: Most op-stack slots the two paths may leave different (each costs a few instructions).
MAX_SELECTS = 3
#: Rounds of conversion per function (a nested if qualifies once its inner one is a select).
MAX_ROUNDS = 3
#: Search states for scheduling one select.
SCHEDULE_STATES = 3_000


@dataclass(frozen=True)
class Branch:
    """One branch idiom of a function's lines.

    Attributes:
        start, end: line range of the idiom (``push 1`` or ``skiz`` .. the last ``call``).
        labels: the subroutines it calls (then, and else for an if/else).
        paths: ``(P_0, P_1)``: the straight-line instruction texts control runs from the
            idiom's start when the condition (st0 at ``start``) is 0 and 1.
    """

    start: int
    end: int
    labels: tuple[str, ...]
    paths: tuple[tuple[str, ...], tuple[str, ...]]


def _words(line: str) -> list[str]:
    return line.split("//", 1)[0].split()


def _pure(body: Sequence[Instr], isa: IsaVariant) -> bool:
    table = instruction_set(isa)
    return len(body) <= MAX_BODY and all(
        not (
            table[x.name].has_side_effect or table[x.name].can_fail or table[x.name].is_control_flow
        )
        for x in body
    )


def _one_pure(text: str, isa: IsaVariant) -> bool:
    """``text`` is one instruction that `_pure` admits (no label, call or control flow)."""
    if text.endswith(":"):
        return False
    try:
        ins = parse_instructions(text, isa)
    except TasmSyntaxError:
        return False
    return len(ins) == 1 and _pure(ins, isa)


def _boolean_before(lines: Sequence[str], at: int, isa: IsaVariant) -> bool:
    """The instruction line before ``at`` pushes 0 or 1 and runs whenever ``at`` does (no
    label between, and the line before it cannot skip it)."""
    table = instruction_set(isa)
    prev = [i for i in range(at) if line_kind(lines[i]) is not None]
    if not prev or line_kind(lines[prev[-1]]) == ":":
        return False
    w = _words(lines[prev[-1]])
    ok = w[0] in BOOLEAN or (w[0] == "push" and len(w) == 2 and w[1] in ("0", "1"))
    if not ok:
        return False
    if len(prev) >= 2:
        k = line_kind(lines[prev[-2]])
        if k is not None and k != ":" and k in table and table[k].may_skip_next:
            return False
    return True


def _then_leaves_zero(path: Sequence[str], isa: IsaVariant) -> bool:
    run = run_symbolic(parse_instructions("\n".join(path), isa), ExprContext(), isa)
    if run.unsupported or not run.stack:
        return False
    top = run.stack[-1]
    return top.is_const and top.const == 0


def find_branches(
    lines: Sequence[str],
    isa: IsaVariant = "release",
    called_elsewhere: frozenset[str] = frozenset(),
) -> list[Branch]:
    """The branch idioms of a function's ``lines`` that qualify (module docstring): bodies
    short, straight-line, pure and failure-free, subroutines called once and not from
    ``called_elsewhere`` (labels other functions call), a boolean condition."""
    helpers = _helpers(lines, isa)
    calls: Counter[str] = Counter()
    for ln in lines:
        w = _words(ln)
        if len(w) == 2 and w[0] == "call":
            calls[w[1]] += 1
    code = [i for i, ln in enumerate(lines) if line_kind(ln) is not None]
    text = [" ".join(_words(lines[i])) for i in code]

    def usable(label: str) -> bool:
        return (
            label in helpers
            and calls[label] == 1
            and label not in called_elsewhere
            and _pure(helpers[label], isa)
        )

    out: list[Branch] = []
    k = 0
    while k < len(code):
        window = text[k : k + 6]
        if (
            len(window) == 6
            and window[:3] == ["push 1", "swap 1", "skiz"]
            and window[4] == "skiz"
            and window[3].startswith("call ")
            and window[5].startswith("call ")
        ):
            t, e = window[3][5:], window[5][5:]
            if t != e and usable(t) and usable(e) and _boolean_before(lines, code[k], isa):
                then = tuple(str(x) for x in helpers[t])
                other = tuple(str(x) for x in helpers[e])
                p1 = ("push 1", "swap 1", "pop 1", *then)
                if _then_leaves_zero(p1, isa):
                    p0 = ("push 1", "swap 1", "pop 1", "pop 1", *other)
                    out.append(Branch(code[k], code[k + 5] + 1, (t, e), (p0, (*p1, "pop 1"))))
                    k += 6
                    continue
        if (
            len(window) == 6
            and window[:3] == ["push 1", "swap 1", "skiz"]
            and window[4] == "skiz"
            and window[3].startswith("call ")
            and _one_pure(window[5], isa)
        ):
            # the else body a single instruction in place of its call (skiz skips exactly
            # one instruction, of any size): ``... skiz  call T  skiz  X``
            t = window[3][5:]
            if usable(t) and _boolean_before(lines, code[k], isa):
                p1 = ("push 1", "swap 1", "pop 1", *(str(x) for x in helpers[t]))
                if _then_leaves_zero(p1, isa):
                    p0 = ("push 1", "swap 1", "pop 1", "pop 1", window[5])
                    out.append(Branch(code[k], code[k + 5] + 1, (t,), (p0, (*p1, "pop 1"))))
                    k += 6
                    continue
        if len(window) >= 2 and window[0] == "skiz" and window[1].startswith("call "):
            t = window[1][5:]
            follows_push = k >= 2 and text[k - 2 : k] == ["push 1", "swap 1"]
            if not follows_push and usable(t) and _boolean_before(lines, code[k], isa):
                then = tuple(str(x) for x in helpers[t])
                out.append(Branch(code[k], code[k + 1] + 1, (t,), (("pop 1",), ("pop 1", *then))))
                k += 2
                continue
        k += 1
    return out


# -- the select ------------------------------------------------------------------------------


class _Merge:
    """The two paths' dataflows over one entry, with select nodes for the slots they leave
    different."""

    def __init__(self, d1: Dataflow, d0: Dataflow) -> None:
        self.nodes: list[Node] = list(d1.nodes)
        self.producer = dict(d1.producer)
        self.constants = dict(d1.constants)
        self.by_value = {v: k for k, v in d1.constants.items()}
        self.next = 1 + max([*d1.entry, *(v for n in d1.nodes for v in n.outputs), -1])
        entry = set(d0.entry)
        ren: dict[int, int] = {v: v for v in entry}
        for n in d0.nodes:
            if n.instr.name == "push" and n.outputs[0] in d0.constants:
                value = d0.constants[n.outputs[0]]
                ren[n.outputs[0]] = self.const(value)
                continue
            outs = tuple(self._fresh() for _ in n.outputs)
            ren.update(zip(n.outputs, outs, strict=True))
            self._add(n.instr, tuple(ren[v] for v in n.inputs), outs)
        self.final0 = [ren[v] for v in d0.final]

    def _fresh(self) -> int:
        self.next += 1
        return self.next - 1

    def _add(self, instr: Instr, inputs: tuple[int, ...], outputs: tuple[int, ...]) -> None:
        node = Node(len(self.nodes), instr, inputs, outputs)
        self.nodes.append(node)
        for k, v in enumerate(outputs):
            self.producer[v] = (node.id, k)

    def const(self, value: int) -> int:
        v = self.by_value.get(value)
        if v is None:
            v = self._fresh()
            self.by_value[value] = v
            self.constants[v] = value
            self._add(Instr("push", value), (), (v,))
        return v

    def op(self, name: str, a: int, b: int) -> int:
        out = self._fresh()
        self._add(Instr(name), (a, b), (out,))
        return out

    def select(self, c: int, t: int, e: int, step: int | None = None) -> int:
        """``c * (t - e) + e`` (``c * t`` when ``e`` is the constant 0; ``e + c * step``
        when ``t - e`` is the constant ``step``, ``e + c`` for a step of 1)."""
        if step is not None:
            if step == 1:
                return self.op("add", e, c)
            return self.op("add", e, self.op("mul", c, self.const(step)))
        if self.constants.get(e) == 0:
            return self.op("mul", t, c)
        diff = self.op("add", t, self.op("mul", e, self.const(P - 1)))
        return self.op("add", self.op("mul", diff, c), e)


def select_code(
    branch: Branch, isa: IsaVariant = "release", deadline: Deadline | None = None
) -> list[Instr] | None:
    """Straight-line code with the effect of ``P_c`` for a boolean ``c`` on top (module
    docstring), or None (paths of different stack effect, too many slots differ, out of
    reach, no schedule found within `SCHEDULE_STATES` search states, or ``deadline``
    passed). Not a proof: `prove_select` decides."""
    if deadline is not None and deadline.expired:
        return None
    p0, p1 = (parse_instructions("\n".join(p), isa) for p in branch.paths)
    try:
        w = max(len(extract(p0, isa).entry), len(extract(p1, isa).entry), 1)
        if w > 16:
            return None
        widen = [Instr("dup", w - 1), Instr("pop", 1)]
        d0, d1 = extract(widen + p0, isa), extract(widen + p1, isa)
    except UnsupportedBlock:
        return None
    if d0.entry != d1.entry or len(d0.final) != len(d1.final):
        return None
    # the paths' final values as polynomials: a difference that is a constant makes a
    # cheaper select (``count += 1`` under the condition is ``count + c``)
    ctx = ExprContext()
    r0, r1 = run_symbolic(widen + p0, ctx, isa), run_symbolic(widen + p1, ctx, isa)
    m = _Merge(d1, d0)
    c = d1.entry[-1]
    final: list[int] = []
    selects = 0
    for j, (t, e) in enumerate(zip(d1.final, m.final0, strict=True)):
        if t == e:
            final.append(t)
            continue
        selects += 1
        depth = len(d1.final) - 1 - j
        step: int | None = None
        if not (r0.unsupported or r1.unsupported):
            diff = ctx.sub(_at(r1, depth), _at(r0, depth))
            if diff.is_const and diff.const != 0:
                step = diff.const
        final.append(m.select(c, t, e, step))
    if selects > MAX_SELECTS:
        return None
    low = min(d0.low_water, d1.low_water)
    flow = Dataflow(list(d1.entry), final, m.nodes, m.producer, m.constants, low, 0)
    best: list[Instr] | None = None
    for df in (simplify(flow), flow):
        budget = Budget(SCHEDULE_STATES, deadline)
        found = exact(df, max_length=8, budget=budget.part(SCHEDULE_STATES // 2))
        for cand in (found, beam(df, width=8, budget=budget)):
            if cand is not None and (best is None or len(cand) < len(best)):
                best = cand
    return best


def prove_select(
    branch: Branch,
    code: Sequence[Instr],
    isa: IsaVariant = "release",
    witnesses: int = 16,
    seed: int = 0,
) -> str | None:
    """Why ``code`` is not proven to replace ``branch`` (module docstring), or None: for
    v in {0, 1}, ``pop 1; push v; code`` against ``pop 1; push v; P_v`` by `check_block`."""
    lines = tuple(str(i) for i in code)
    for v in (0, 1):
        forced = ("pop 1", f"push {v}")
        check = BlockCheck(forced + branch.paths[v], forced + lines, isa, witnesses, seed)
        verdict = check_block(check)
        if not verdict.equivalent:
            return f"condition {v}: {verdict.reason}"
    return None


# -- the pass --------------------------------------------------------------------------------


def rewrite_branches(
    lines: Sequence[str], branches: Sequence[tuple[Branch, Sequence[Instr]]]
) -> tuple[list[str], list[tuple[int, int]]]:
    """``lines`` with each branch idiom replaced by its select code and its subroutines
    removed, and the line spans of the select code (for the block sources)."""
    edits: list[tuple[int, int, list[str]]] = []
    gone = {lab for b, _ in branches for lab in b.labels}
    for label, start, end in _sections(lines):
        if label in gone:
            edits.append((start, end, []))
    for b, code in branches:
        edits.append((b.start, b.end, [INDENT + str(i) for i in code]))
    out, spans = apply_edits(lines, edits)
    return out, [(a, z) for a, z in spans if z > a]


def _called_by_others(run: _Run, ours: ModuleText, name: str) -> frozenset[str]:
    return called_labels([run.returned(g) for g in ours.functions if g != name])


def branch_stage(
    fns: list[FunctionState],
    ours: ModuleText,
    client: ModuleText | None,
    options: CompileOptions,
    sources: SourceSet,
    verify: VerifyBackend,
) -> None:
    """If-convert the qualifying branches of every function worked on in this run; a
    function keeps its result so far unless the converted one is equivalent on the
    verifier's witnesses, takes fewer cycles and raises no table."""
    run = _Run(fns, ours, client, options, sources, verify)
    for f in run.workable(fns):
        # a branch whose body held a converted one may qualify now: nested ifs, inside out
        tried: set[tuple[str, ...]] = set()  # branches proven or refused in an earlier round
        for _ in range(MAX_ROUNDS):
            if not _convert(run, f, ours, options, sources, verify, tried):
                break


def _convert(
    run: _Run,
    f: FunctionState,
    ours: ModuleText,
    options: CompileOptions,
    sources: SourceSet,
    verify: VerifyBackend,
    tried: set[tuple[str, ...]],
) -> bool:
    """One round of `branch_stage` on ``f``, skipping the branches in ``tried`` (and adding
    those it tries); True if it adopted a conversion."""
    isa = options.isa
    adopted = False
    cur = run.returned(f.name)
    try:
        others = _called_by_others(run, ours, f.name)  # this pass changes only f
        found = find_branches(cur, isa, others)
    except (TasmSyntaxError, ValueError):
        return False
    proven: dict[tuple[str, ...], list[Instr]] = {}
    for b in found:
        if out_of_time(options) is not None:
            return adopted
        if b.labels in tried:
            continue
        tried.add(b.labels)
        code = select_code(b, isa, options.deadline)
        if code is None:
            continue
        why = prove_select(b, code, isa, options.witnesses, options.seed)
        if why is not None:
            f.report.notes.append(f"branch {', '.join(b.labels)} not converted: {why}")
            continue
        proven[b.labels] = code
    if not proven:
        return False
    best = run.measure(f, cur)
    if best is None:
        return False
    # all at once first, then each alone (one that costs more must not sink the rest)
    plans = [set(proven)] + ([{k} for k in proven] if len(proven) > 1 else [])
    for plan in plans:
        if out_of_time(options) is not None:
            return adopted
        here = [
            (b, proven[b.labels])
            for b in find_branches(cur, isa, others)
            if b.labels in plan and b.labels in proven
        ]
        if len(here) != len(plan):
            continue  # converted already, or no longer the same idiom
        cand, spans = rewrite_branches(cur, here)
        touched = [(x, x + 1) for a, z in spans for x in range(a, z)]
        cand = _reoptimize(f, cand, touched, options, sources, verify)
        labels = [lab for key in sorted(plan) for lab in key]
        v = run.run_function(f, cand)
        if v is None:
            continue
        if not v.equivalent and v.witness >= 0:
            log.error("if-conversion of %s changed its behaviour: %s", f.name, v.reason)
        why = refusal(v, best)
        note = f"branches {', '.join(labels)} converted to selects"
        if why is not None:
            # a select costs a cycle or two where a branch is skipped, but a loop body
            # without branches may become a recurse_or_return loop: try both together
            looped = with_loops_rewritten(run, f, cand, ours, options, sources, verify)
            if looped is not None:
                w = run.run_function(f, looped[0])
                if (
                    w is not None
                    and refusal(w, best, longer=True, current_padded=f.report.padded_height) is None
                    and run.taller_caller(f, looped[0], w) is None
                ):
                    cand, v, why = looped[0], w, None
                    note += f", loops {', '.join(looped[1])} to recurse_or_return"
        if why is not None:
            f.report.notes.append(f"branches {', '.join(labels)} {why}")
            continue
        adopt(f, cand, best, v, note)
        adopted = True
        cur, best = cand, v.cycles
        if len(plan) == len(proven):
            break
    return adopted
