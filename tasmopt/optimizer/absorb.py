"""Function-level pass ``absorb``: a loop that absorbs ten RAM words per iteration into the
Tip5 sponge with ``read_mem`` and ``sponge_absorb`` becomes one ``sponge_absorb_mem`` per
iteration (issue 11 item 4: loops the way experts write them).

After the ``loops`` and ``pointers`` passes such a loop reads like
``L: dup 5  addi 9  read_mem 5  read_mem 4  pop 1  pick 14  read_mem 1  addi 11  place 15
sponge_absorb  recurse_or_return``: ten words of RAM at ``st5 + c .. st5 + c + 9`` brought to
the op stack, absorbed, and the pointer st5 stepped by 10. ``sponge_absorb_mem`` (Triton VM
spec) absorbs ``RAM[st0 .. st0 + 9]``, leaves ``st0 + 10`` and overwrites st1..st4 with the
first four words read. The pass gives the loop a layout with room for that::

    old, at the call:  o0 o1 o2 o3 o4 p e R          (st5 = p, st6 = e)
    new, in the loop:  q j1 j2 j3 j4 p e o0 .. o4 R  (q = p + c; j: scratch)

    T   = pick 6  pick 6  push 0 (x4)  dup 4  addi c     (before the call, and its skiz)
    L'  = sponge_absorb_mem  pick 5  addi 10  place 5  recurse_or_return
    T^-1 = pop 5  place 6  place 6                       (after the call)

Proof. Symbolic execution (exact polynomial identities over the Goldilocks field, Tip5 as an
opaque function of its 16 inputs, `tasmopt.vm.symbolic`) establishes:

1. ``B`` (the old body) is straight-line with no net stack change, no output, input, RAM
   write or failure guard other than an initialised sponge; it maps st5 to ``st5 + 10`` and
   keeps every other element.
2. ``T; B'; T^-1`` (``B'`` the new body without ``recurse_or_return``) and ``B`` leave the
   same op stack and the same sponge state, with the same guards, on every state (so the ten
   words are read at ``p + c + k`` in the old body's order of rate words).
3. ``B'`` keeps ``st0 - st5`` (both + 10), keeps st6 and every element below st6, and none of
   what it leaves there, in st0 or in the sponge depends on st1..st4: the scratch words are
   only ever overwritten.

By 3, if the new loop is at ``N(S, J) = [S5 + c, J, S5, S6, S0..S4, S7..]`` for any scratch
words ``J``, one iteration takes it to ``N(B(S), J')`` with the sponge and the guards of
``B(S)`` (2 with ``J = 0`` fixes what does not depend on ``J``): the new loop runs in lock
step with the old one, stops when it does (st5 and st6 are the old ones), and ``T^-1``
returns ``B^t(S)``'s stack. A skipped call runs ``T; T^-1``, the identity (checked
symbolically too). The loop's section must be entered only by ``call`` lines of this
function, each followed by code that is checked symbolically too; the rewritten function is
then run against its reference on the verifier's witnesses (`check_function`) and kept only
when equivalent there, cheaper in cycles, with no table that grows with execution taller and
no padded height larger, its own or a caller's (``T`` and ``T^-1`` lengthen the program:
`refusal` with ``longer``). Cost: the RAM table gets the same ten rows per iteration; the
processor and op-stack tables lose about six each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tasmopt.errors import TasmSyntaxError
from tasmopt.isa import IsaVariant, P, names_where
from tasmopt.module import ModuleText, line_kind
from tasmopt.optimizer.inline import INDENT, _reoptimize, _Run, apply_edits
from tasmopt.optimizer.loops import I_SLOT, N_SLOT, _at, _instrs, _sections, no_fall_through
from tasmopt.optimizer.pointers import _LOOP_END
from tasmopt.optimizer.reverse import _before
from tasmopt.optimizer.state import FunctionState, VerifyBackend
from tasmopt.report import CompileOptions
from tasmopt.sources import SourceSet
from tasmopt.tasm.parser import parse_instructions
from tasmopt.tasm.program import Instr
from tasmopt.vm.expr import ExprContext
from tasmopt.vm.symbolic import SymbolicRun, run_symbolic

__all__ = ["Absorption", "find_absorptions", "absorb", "absorb_stage", "new_body", "enter", "leave"]

#: The instruction the pass writes (ISA table: the sponge instruction that reads RAM).
(_ABSORB_MEM,) = names_where(lambda i: i.uses_sponge and i.reads_ram)
#: Words one absorption takes (Tip5's rate, Triton VM spec).
RATE = 10
#: Scratch words ``sponge_absorb_mem`` overwrites (st1..st4, Triton VM spec).
SCRATCH = 4
#: Offsets ``c`` (first word read relative to st5) tried.
OFFSETS = tuple(range(-RATE, RATE + 1))
#: The layout: scratch words and the pointer on top of the old state.
_EXTRA = 1 + SCRATCH


@dataclass(frozen=True)
class Absorption:
    """A loop that qualifies (module docstring).

    Attributes:
        label: ``L``. start, end: the section's line range (label line first).
        offset: ``c``, the first word read relative to st5.
        sites: line index of each ``call L`` with True where ``skiz`` guards it.
    """

    label: str
    start: int
    end: int
    offset: int
    sites: tuple[tuple[int, bool], ...]


def enter(offset: int, under: int = 0) -> list[str]:
    """``T``: the old layout to the new one (module docstring), ``under`` elements (0 or 1:
    a ``skiz`` condition) left on top."""
    code = [f"pick {N_SLOT + under}", f"pick {N_SLOT + under}"]
    code += ["push 0"] * SCRATCH + [f"dup {SCRATCH}"]
    code += [f"addi {offset}"] if offset % P else []
    if under:
        code.append(f"pick {_EXTRA + 2}")  # the condition, above q, the scratch, p and e
    return code


def leave() -> list[str]:
    """``T^-1``: drop the pointer and the scratch words, put st5/st6 back under o0..o4."""
    return [f"pop {_EXTRA}", f"place {N_SLOT}", f"place {N_SLOT}"]


def new_body() -> list[str]:
    """``B'``, without the loop's ``recurse_or_return``."""
    return [_ABSORB_MEM, f"pick {I_SLOT}", f"addi {RATE}", f"place {I_SLOT}"]


def _code(lines: Sequence[str], isa: IsaVariant) -> list[Instr]:
    return parse_instructions("\n".join(lines), isa)


def _same(a: SymbolicRun, b: SymbolicRun, depth: int) -> bool:
    """Two runs (one context) leave the same stack down to ``depth``, stack length, sponge
    and guards, and neither has another effect."""
    for r in (a, b):
        if r.unsupported is not None or r.outputs or r.ram or any(r.consumed.values()):
            return False
    return (
        a.delta == b.delta
        and a.guards == b.guards
        and a.sponge == b.sponge
        and all(_at(a, k) is _at(b, k) for k in range(depth))
    )


def _body_ok(body: Sequence[Instr], offset: int, isa: IsaVariant) -> bool:
    """Facts 1 and 2 of the module docstring for the old body ``B`` and this ``c``."""
    ctx = ExprContext()
    old = run_symbolic(body, ctx, isa)
    if old.delta != 0 or old.sponge is None or old.guards - {("sponge_initialized",)}:
        return False
    depth = max(old.base, N_SLOT + 1) + _EXTRA
    s = [ctx.var("s", k) for k in range(depth)]
    want = {I_SLOT: ctx.add(s[I_SLOT], ctx.const(RATE))}
    if any(_at(old, k) is not want.get(k, s[k]) for k in range(depth)):
        return False
    new = run_symbolic(_code(enter(offset) + new_body() + leave(), isa), ctx, isa)
    return _same(old, new, depth)


def _new_body_ok(isa: IsaVariant) -> bool:
    """Fact 3 of the module docstring, and ``T; T^-1`` is the identity."""
    ctx = ExprContext()
    run = run_symbolic(_code(new_body(), isa), ctx, isa)
    if run.unsupported is not None or run.delta != 0 or run.outputs or run.ram:
        return False
    depth = max(run.base, N_SLOT + 1) + 2
    s = [ctx.var("s", k) for k in range(depth)]
    kept = [_at(run, k) for k in (0, *range(I_SLOT, depth))]
    if ctx.sub(_at(run, 0), _at(run, I_SLOT)) is not ctx.sub(s[0], s[I_SLOT]):
        return False
    if any(_at(run, k) is not s[k] for k in range(N_SLOT, depth)):
        return False
    scratch = ctx.atoms_of(s[1 : 1 + SCRATCH])
    if scratch & ctx.depends_on([*kept, *(run.sponge or ())]):
        return False
    for under in (0, 1):
        ctx = ExprContext()
        both = run_symbolic(_code(enter(3, under) + leave_under(under), isa), ctx, isa)
        if both.unsupported is not None or both.delta != -under or both.guards:
            return False
        if any(_at(both, k) is not ctx.var("s", k + under) for k in range(N_SLOT + _EXTRA + 2)):
            return False
    return True


def leave_under(under: int) -> list[str]:
    """What a skipped call runs after ``T``: the ``skiz`` pops the condition, then
    ``T^-1``; ``under`` = 0 for an unguarded site (no condition)."""
    return (["pop 1"] if under else []) + leave()


def find_absorptions(
    lines: Sequence[str], isa: IsaVariant = "release", others_call: frozenset[str] = frozenset()
) -> list[Absorption]:
    """The loops of one function's ``lines`` this pass may rewrite (module docstring);
    ``others_call``: labels other functions call."""
    if not _new_body_ok(isa):
        return []
    out = []
    sections = _sections(lines)
    for k, (label, start, end) in enumerate(sections):
        if k == 0 or label in others_call or not no_fall_through(lines, sections, k):
            continue
        try:
            ins = _instrs(lines, start + 1, end, isa)
        except (TasmSyntaxError, ValueError):
            continue
        if len(ins) < 2 or ins[-1][1].name not in _LOOP_END:
            continue
        body = [x for _, x in ins[:-1]]
        if any(x.name == _ABSORB_MEM for x in body):
            continue  # already the new shape
        offset = next((c for c in OFFSETS if _body_ok(body, c, isa)), None)
        if offset is None:
            continue
        sites = _sites(lines, label)
        if sites:
            out.append(Absorption(label, start, end, offset, sites))
    return out


def _sites(lines: Sequence[str], label: str) -> tuple[tuple[int, bool], ...]:
    """Each ``call label`` with whether one ``skiz`` guards it; empty if the label is used
    any other way or a site is skippable otherwise."""
    out = []
    for i, ln in enumerate(lines):
        words = ln.split("//", 1)[0].split()
        if label not in words[1:] and words[:1] != [label + ":"]:
            continue
        if words[:1] == [label + ":"]:
            continue
        if line_kind(ln) != "call" or len(words) != 2:
            return ()
        before = _before(lines, i)
        guarded = before is not None and line_kind(lines[before]) == "skiz"
        if before is not None and line_kind(lines[before]) == ":":
            return ()  # a jump target right before the call: T would not run on every path
        if guarded and before is not None:
            earlier = _before(lines, before)
            if earlier is None or line_kind(lines[earlier]) in ("skiz", ":"):
                return ()
        out.append((i, guarded))
    return tuple(out)


def absorb(lines: Sequence[str], a: Absorption) -> tuple[list[str], list[tuple[int, int]]]:
    """``lines`` with ``a`` applied (module docstring), and the spans of the new lines."""
    edits: list[tuple[int, int, list[str]]] = []
    for i, guarded in a.sites:
        at = _before(lines, i) if guarded else i
        assert at is not None  # a guarded site has its skiz before it
        edits.append((at, at, [INDENT + x for x in enter(a.offset, int(guarded))]))
        edits.append((i + 1, i + 1, [INDENT + x for x in leave()]))
    ret = next(j for j in range(a.end - 1, a.start, -1) if line_kind(lines[j]) not in (None, ":"))
    edits.append((a.start + 1, ret, [INDENT + x for x in new_body()]))
    return apply_edits(lines, edits)


def absorb_stage(
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
        for cur, a in run.untried(f, lambda lines, others: find_absorptions(lines, isa, others)):
            best = run.measure(f, cur)
            if best is None:
                break
            cand, spans = absorb(cur, a)
            body = new_body()
            sites = [(x, y) for x, y in spans if [ln.strip() for ln in cand[x:y]] != body]
            cand = _reoptimize(f, cand, sites, options, sources, verify)
            run.keep(
                f,
                cand,
                best,
                f"absorb {a.label}",
                f"absorb {a.label} ({_ABSORB_MEM}, first word at st5{a.offset:+d})",
                longer=True,  # T and T^-1 at each call site
            )
