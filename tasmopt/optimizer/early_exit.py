"""Function-level pass ``early_exit``: a counted loop whose whole body is one guarded branch
leaves as soon as the guard fails (issue 11, loops the way experts write them).

The lowering's ``for _ in 0..K { if g { T } }`` (spec/tir.md §3.4) runs all ``K``
iterations, though once ``g`` is false an iteration changes nothing but the counter, so
``g`` stays false and every later iteration is idle. Euclid's algorithm written as a
48-round loop is the typical case (corpus ``uint.numth gcd``: most u32 pairs are done in
about twenty rounds). The loop::

    L: dup 0  push 0  eq  skiz  return     // c == 0: leave
       addi -1                             // c -= 1
       P                                   // pushes g, keeps everything else
       skiz  call T
       recurse

becomes ``... P  push 0  eq  skiz  return  call T  recurse``: when ``g == 0`` it returns at
once, leaving the counter at its current value instead of 0.

Proof. Symbolic execution of ``P`` (exact polynomial identities over the Goldilocks field,
`tasmopt.vm.symbolic`) establishes that ``P`` pushes one value ``g`` and leaves every entry
element in place, that neither ``g`` nor any of ``P``'s failure guards depends on the
counter (st0), and that ``P`` has no effect (ISA table: no RAM, I/O, secret input or
sponge). Write the loop state as ``(c, S)``. An iteration with ``g(S) = 0`` maps ``(c, S)``
to ``(c - 1, S)``: ``P`` only pushes ``g``, which ``skiz`` pops. The next iteration computes
the same ``g(S) = 0`` (``P`` is deterministic and does not read ``c``) and fails iff this
one did, so by induction every remaining iteration is idle and the old loop returns
``(0, S)``. The new loop returns ``(c - 1, S)`` at that point, and it runs the same
iterations before it, with the same effects and failures in the same order (``push 0; eq;
skiz`` sends ``g = 0`` to ``return`` and any other ``g`` to ``call T``, as ``skiz; call T``
did). The counter's value is then dead: every ``call L`` of the function is followed by
``pop n`` (n >= 1), and ``L`` is entered only by those calls (no fall-through, no other
function calls it). Only the jump stack (not observable, design §2), the clock cycles and
table heights differ. The rewritten function is then run against its reference on the
verifier's witnesses (`check_function`) and kept only when equivalent there, cheaper in
cycles, with no table that grows with execution taller and no padded height larger, its own
or a caller's (`refusal` with ``longer``: three more words); fail closed: any condition not
established leaves the loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tasmopt.isa import IsaVariant, P, instruction_set
from tasmopt.module import ModuleText, line_kind
from tasmopt.optimizer.inline import INDENT, _reoptimize, _Run, apply_edits
from tasmopt.optimizer.loops import _GUARD_KINDS, _at, _is, entered_sections
from tasmopt.optimizer.state import FunctionState, VerifyBackend
from tasmopt.report import CompileOptions
from tasmopt.sources import SourceSet
from tasmopt.tasm.program import Instr
from tasmopt.vm.expr import ExprContext
from tasmopt.vm.guards import guard_polys
from tasmopt.vm.symbolic import run_symbolic

__all__ = ["GuardedLoop", "early_exit", "early_exit_stage", "find_guarded_loops"]

#: The lowering's loop head, ``dup 0; push 0; eq; skiz; return; addi -1`` (spec/tir.md §3.4).
_HEAD = (("dup", 0), ("push", 0), ("eq", None), ("skiz", None), ("return", None), ("addi", P - 1))


@dataclass(frozen=True)
class GuardedLoop:
    """A loop that qualifies (module docstring).

    Attributes:
        label: ``L``. skiz_line: line index of the body's ``skiz`` before ``call T``.
        sites: line indices of the ``call L`` lines.
    """

    label: str
    skiz_line: int
    sites: tuple[int, ...]


def _guard_only(body: Sequence[Instr], isa: IsaVariant) -> bool:
    """``body`` (``P``) pushes one value that does not depend on st0, keeps every entry
    element in place, has no effect, and none of its failure guards depends on st0."""
    table = instruction_set(isa)
    if any(table[x.name].is_control_flow or table[x.name].has_side_effect for x in body):
        return False
    ctx = ExprContext()
    run = run_symbolic(body, ctx, isa)
    if run.unsupported is not None or run.delta != 1 or run.outputs or run.ram:
        return False
    if run.sponge is not None or any(run.consumed.values()):
        return False
    if any(_at(run, k + 1) is not ctx.var("s", k) for k in range(run.base + 1)):
        return False
    if any(g[0] not in _GUARD_KINDS for g in run.guards):
        return False
    counter = ctx.atoms_of([ctx.var("s", 0)])
    return not (counter & ctx.depends_on([_at(run, 0), *guard_polys(ctx, run.guards)]))


def _sites(lines: Sequence[str], label: str) -> tuple[int, ...] | None:
    """The ``call label`` lines, each followed by ``pop n`` (n >= 1); None if the label is
    reached otherwise or a call's counter may be read after it."""
    sites = []
    for i, ln in enumerate(lines):
        words = ln.split("//", 1)[0].split()
        if label not in words[1:]:
            continue
        if line_kind(ln) != "call" or len(words) != 2:
            return None
        nxt = next((j for j in range(i + 1, len(lines)) if line_kind(lines[j])), None)
        if nxt is None:
            return None
        after = lines[nxt].split("//", 1)[0].split()
        if after[:1] != ["pop"] or len(after) != 2 or not after[1].isdigit() or after[1] == "0":
            return None
        sites.append(i)
    return tuple(sites)


def find_guarded_loops(
    lines: Sequence[str], isa: IsaVariant = "release", others_call: frozenset[str] = frozenset()
) -> list[GuardedLoop]:
    """The loops of one function's ``lines`` this pass may rewrite (module docstring);
    ``others_call``: labels other functions call."""
    out = []
    for label, _, _, ins in entered_sections(lines, isa, others_call):
        if len(ins) < len(_HEAD) + 3:
            continue
        if not all(_is(x, n, a) for (_, x), (n, a) in zip(ins, _HEAD, strict=False)):
            continue
        *body, (skiz_at, skiz), (_, call), (_, last) = ins[len(_HEAD) :]
        if not (_is(skiz, "skiz") and call.name == "call" and _is(last, "recurse")):
            continue
        if not _guard_only([x for _, x in body], isa):
            continue
        sites = _sites(lines, label)
        if sites:
            out.append(GuardedLoop(label, skiz_at, sites))
    return out


def early_exit(lines: Sequence[str], loop: GuardedLoop) -> tuple[list[str], list[tuple[int, int]]]:
    """``lines`` with ``loop`` rewritten (module docstring), and the span of the new lines."""
    new = [INDENT + x for x in ("push 0", "eq", "skiz", "return")]
    return apply_edits(lines, [(loop.skiz_line, loop.skiz_line + 1, new)])


def early_exit_stage(
    fns: list[FunctionState],
    ours: ModuleText,
    client: ModuleText | None,
    options: CompileOptions,
    sources: SourceSet,
    verify: VerifyBackend,
) -> None:
    """Rewrite the qualifying loops of every function worked on in this run; a function
    keeps its result so far unless the rewritten one is equivalent on the verifier's
    witnesses, takes fewer cycles and raises no execution table nor the padded height."""
    run = _Run(fns, ours, client, options, sources, verify)
    isa = options.isa
    for f in run.workable(fns):
        for cur, loop in run.untried(
            f, lambda lines, others: find_guarded_loops(lines, isa, others)
        ):
            best = run.measure(f, cur)
            if best is None:
                break
            cand, spans = early_exit(cur, loop)
            cand = _reoptimize(f, cand, spans, options, sources, verify)
            run.keep(
                f,
                cand,
                best,
                f"early exit {loop.label}",
                f"early exit {loop.label}",
                longer=True,  # three more words: fewer cycles when the guard fails early
            )
