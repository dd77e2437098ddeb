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

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from tasmopt.isa import IsaVariant, P, names_where
from tasmopt.module import ModuleText
from tasmopt.optimizer.conjugate import (
    Conjugated,
    call_sites,
    conjugate,
    conjugate_stage,
    guarded_enter_ok,
    parsed,
)
from tasmopt.optimizer.loops import I_SLOT, N_SLOT, _at, loop_sections
from tasmopt.optimizer.state import FunctionState, VerifyBackend
from tasmopt.report import CompileOptions
from tasmopt.sources import SourceSet
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
class Absorption(Conjugated):
    """A loop that qualifies (module docstring), with ``T``, ``T^-1`` and ``B'`` for it.

    Attributes:
        offset: ``c``, the first word read relative to st5.
    """

    offset: int = 0


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
    new = run_symbolic(parsed(enter(offset) + new_body() + leave(), isa), ctx, isa)
    return _same(old, new, depth) and guarded_enter_ok(enter(offset), enter(offset, 1), isa)


@functools.cache
def _new_body_ok(isa: IsaVariant) -> bool:
    """Fact 3 of the module docstring, and ``T; T^-1`` is the identity."""
    ctx = ExprContext()
    run = run_symbolic(parsed(new_body(), isa), ctx, isa)
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
        both = run_symbolic(parsed(enter(3, under) + leave_under(under), isa), ctx, isa)
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
    for label, start, end, _, body in loop_sections(lines, isa, others_call):
        if any(x.name == _ABSORB_MEM for x in body):
            continue  # already the new shape
        offset = next((c for c in OFFSETS if _body_ok(body, c, isa)), None)
        if offset is None:
            continue
        sites = call_sites(lines, label)
        if sites:
            enters = (tuple(enter(offset)), tuple(enter(offset, 1)))
            note = f"{_ABSORB_MEM}, first word at st5{offset:+d}"
            out.append(
                Absorption(
                    label,
                    start,
                    end,
                    sites,
                    enters,
                    tuple(leave()),
                    tuple(new_body()),
                    note,
                    offset,
                )
            )
    return out


def absorb(lines: Sequence[str], a: Absorption) -> tuple[list[str], list[tuple[int, int]]]:
    """``lines`` with ``a`` applied (module docstring), and the spans of the new call-site
    lines."""
    return conjugate(lines, a)


def absorb_stage(
    fns: list[FunctionState],
    ours: ModuleText,
    client: ModuleText | None,
    options: CompileOptions,
    sources: SourceSet,
    verify: VerifyBackend,
) -> None:
    """Rewrite the qualifying loops of every function worked on in this run
    (`conjugate_stage`: kept only when proven, cheaper and no table grows)."""
    conjugate_stage(fns, ours, client, options, sources, verify, find_absorptions, "absorb")
