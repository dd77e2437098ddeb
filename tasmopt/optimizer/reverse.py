"""Function-level pass ``reverse``: a reduction loop walks its array from the top down (issue
11, loops the way experts write them: ``read_mem`` walks the pointer for free downwards).

``read_mem 1`` leaves its pointer one *below* the cell it read, so a loop that walks up an
array (``for i in 0..n { acc = acc + ram_read(base + i) }``, after the ``loops`` and
``pointers`` passes ``L: pick 5  read_mem 1  addi 2  place 6  add  recurse_or_return``) pays
an ``addi 2`` per iteration that a walk down does not. Experts walk down. When the body only
*adds* a term of the current cell to one accumulator (or multiplies it by one), the order of the iterations does not
matter, and the pass reverses it::

    A+ skiz call L  post          L: B  recurse_or_return
 -> R+ A+ skiz call L  post       L: B  (st5 -= 2d)  recurse_or_return

where ``d`` is the body's constant step of st5 and ``R`` maps ``(st5, st6)`` — the pointer
``p`` and its end ``e`` — to ``(e - d, p - d)``: the new loop starts at the last cell and
stops past the first. The block sources then fold ``st5 -= 2d`` into the body (searched with
the ``hot`` pass's budget; this pass runs after it, so a reversal must beat the deepest
forward body). The same holds for any induction variable at st5, not only a pointer:
``factorial``'s ``acc * (i + 1)`` is a product over ``i`` too.

A second array read at the same index (``dot``) is a *walker*: an element ``w`` the body steps
by its own constant ``d_w``. The call site also moves it to its last value, ``w + (e - p) *
d_w / d - d_w`` (``(e - p) / d`` is the trip count, exactly, in the field), and the body
steps it down.

Proof. Symbolic execution of ``B`` (exact polynomial identities over the Goldilocks field,
`tasmopt.vm.symbolic`) establishes: ``B`` is straight-line with no net stack change, no effect
but RAM reads, no failure guard; it maps st5 to ``st5 + d`` (``d`` a nonzero constant), keeps
st6 and every other element but the walkers (each mapped to ``w + d_w``) and one, the
accumulator ``a``, which it maps to ``a + D`` or to ``a * D`` where ``D`` mentions neither
``a`` nor st6, not even in the address of a cell it reads (`ExprContext.depends_on`). So ``D``
depends on the pointer, the walkers, elements that never change, and RAM, which no iteration
writes. In the old loop's k-th iteration ``p = p0 + k d`` and ``w = w0 + k d_w``, so ``D =
D(k)``; the new loop's j-th iteration has ``p = p0 + (t-1-j) d`` and ``w = w0 + (t-1-j) d_w``:
``D(t-1-j)``. The old loop runs ``p = p0, p0 + d, ..., e - d`` (the first ``k >= 1`` with ``p0
+ k d = e``; forever if none) and returns ``a0 + D(p0) + ... + D(e - d)``; the new one runs ``q
= e - d, e - 2d, ..., p0`` (the first ``k' >= 1`` with ``e - d - k' d = p0 - d``: the same
``k``), summing (multiplying) the same terms in the other order: the same element of the field
(addition and multiplication are commutative and associative). No iteration has an effect or
can fail, so the order is nothing else observable. The new loop leaves st5, st6 and the walkers
different (``p0 - d`` instead of ``e``); every call site proves they are dead: the code after
the call is straight-line up to the function's ``return``, and its symbolic run consumes them
without them reaching the returned stack, an output, RAM or a guard. ``L`` is entered only by
``call`` lines of this function (no fall-through, no other function calls it), and ``R`` is
checked symbolically, the walkers' update too (`walk_ends`). The rewritten function is then run
against its reference on the verifier's witnesses (`check_function`) and kept only when
equivalent there, cheaper in cycles, with no table that grows with execution taller and no
padded height larger, its own or a caller's (`refusal` with ``longer``: ``R`` adds words at the
call site). Anything not established leaves the loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tasmopt.errors import TasmSyntaxError
from tasmopt.isa import IsaVariant, P, instruction_set
from tasmopt.module import ModuleText, line_kind
from tasmopt.optimizer.conjugate import (
    Conjugated,
    _before,
    _quiet,
    conjugate,
    conjugate_stage,
)
from tasmopt.optimizer.loops import (
    _POLY_GUARDS,
    I_SLOT,
    N_SLOT,
    _at,
    loop_sections,
)
from tasmopt.optimizer.shortcuts import _RETURN
from tasmopt.optimizer.state import FunctionState, VerifyBackend
from tasmopt.report import CompileOptions
from tasmopt.sources import SourceSet
from tasmopt.tasm.parser import parse_instructions
from tasmopt.tasm.program import Instr
from tasmopt.vm.expr import ExprContext, Poly
from tasmopt.vm.guards import guard_polys
from tasmopt.vm.symbolic import run_symbolic

__all__ = ["Reversal", "find_reversals", "reverse", "reverse_stage", "swap_ends", "walk_ends"]

#: Pointer steps tried (cells per iteration, either way).
STEPS = tuple(d for k in range(1, 6) for d in (k, -k))


@dataclass(frozen=True)
class Reversal(Conjugated):
    """A reduction loop that qualifies (module docstring), as the change `conjugate` writes:
    ``R`` (and the walkers' update) at each site, no ``T^-1`` (st5, st6 and the walkers are
    dead after the call), ``B`` kept, ``st5 -= 2d`` (and each walker's) as its tail.

    Attributes:
        step: ``d``. walkers: see below.
    """

    step: int = 0
    #: ``(depth, d_w)``: elements the body steps by their own constant beside st5 (a second
    #: array read at the same index); at the call site each becomes its last value
    walkers: tuple[tuple[int, int], ...] = ()


def swap_ends(step: int, under: int = 0) -> list[str]:
    """``R``: ``(st5, st6) := (st6 - d, st5 - d)``, ``under`` elements below the top."""
    a, b = I_SLOT + under, N_SLOT + under
    neg = f"addi {-step}"
    return [f"pick {b}", neg, f"pick {b}", neg, f"place {b}", f"place {a}"]


def _swap_ends_ok(step: int, under: int, isa: IsaVariant) -> bool:
    """`swap_ends` does what it says on every state (symbolic check)."""
    ctx = ExprContext()
    run = run_symbolic(parse_instructions("\n".join(swap_ends(step, under)), isa), ctx, isa)
    if run.unsupported is not None or run.delta != 0 or run.guards:
        return False
    a, b = I_SLOT + under, N_SLOT + under
    want = {
        a: ctx.sub(ctx.var("s", b), ctx.const(step % P)),
        b: ctx.sub(ctx.var("s", a), ctx.const(step % P)),
    }
    return all(_at(run, k) is want.get(k, ctx.var("s", k)) for k in range(max(run.base, b + 1)))


def walk_ends(step: int, walkers: Sequence[tuple[int, int]], under: int = 0) -> list[str]:
    """Each walker ``w`` (depth, step ``d_w``) to the value it has in the old loop's last
    iteration, ``w + (st6 - st5) * d_w / d - d_w`` (field arithmetic: ``(st6 - st5) / d`` is
    the trip count), ``under`` elements below the top; st5 and st6 are read, not moved."""
    code: list[str] = []
    for w, dw in walkers:
        c = dw * pow(step % P, P - 2, P) % P
        code += [f"dup {N_SLOT + under}", f"dup {I_SLOT + under + 1}", "push -1", "mul", "add"]
        code += [] if c == 1 else [f"push {c}", "mul"]
        code += [f"pick {w + under + 1}", "add", f"addi {-dw}", f"place {w + under}"]
    return code


def _walk_ends_ok(
    step: int, walkers: Sequence[tuple[int, int]], under: int, isa: IsaVariant
) -> bool:
    """`walk_ends` does what it says on every state (symbolic check)."""
    if not walkers:
        return True
    ctx = ExprContext()
    code = parse_instructions("\n".join(walk_ends(step, walkers, under)), isa)
    run = run_symbolic(code, ctx, isa)
    if run.unsupported is not None or run.delta != 0 or run.guards:
        return False
    a, b = I_SLOT + under, N_SLOT + under
    trips = ctx.mul(ctx.sub(ctx.var("s", b), ctx.var("s", a)), ctx.const(pow(step % P, P - 2, P)))
    want = {
        w + under: ctx.add(
            ctx.var("s", w + under), ctx.sub(ctx.mul(trips, ctx.const(dw % P)), ctx.const(dw % P))
        )
        for w, dw in walkers
    }
    depth = max([run.base, b + 1, *want])
    return all(_at(run, k) is want.get(k, ctx.var("s", k)) for k in range(depth))


def _reductions(
    body: Sequence[Instr], isa: IsaVariant
) -> list[tuple[int, tuple[tuple[int, int], ...]]]:
    """The ways ``body`` is a reduction step (module docstring): ``(d, walkers)`` for each
    choice of the accumulator among the elements it changes (an accumulator that adds a
    constant is also a walker: which one is observed after the loop decides), the
    accumulator that is no walker first; empty if none."""
    ctx = ExprContext()
    run = run_symbolic(body, ctx, isa)
    if not _quiet(run) or run.delta != 0:
        return []
    s = [ctx.var("s", k) for k in range(max(run.base, N_SLOT + 1))]
    if _at(run, N_SLOT) is not s[N_SLOT]:
        return []
    step = _signed_step(ctx.sub(_at(run, I_SLOT), s[I_SLOT]))
    if step is None:
        return []
    changed = [k for k in range(len(s)) if k != I_SLOT and _at(run, k) is not s[k]]
    steps = {k: _signed_step(ctx.sub(_at(run, k), s[k])) for k in changed}
    out = []
    for acc in sorted(changed, key=lambda k: steps[k] is not None):
        walkers = tuple((k, d) for k, d in steps.items() if k != acc and d is not None)
        if len(walkers) != len(changed) - 1:
            continue  # another element changes in a way that is no constant step
        banned = ctx.atoms_of([s[acc], s[N_SLOT]])
        term = ctx.sub(_at(run, acc), s[acc])  # a + D
        factor = _factor(ctx, _at(run, acc), s[acc])  # a * D
        if not banned & ctx.depends_on([term]) or (  # through RAM addresses too
            factor is not None and not banned & ctx.depends_on([factor])
        ):
            out.append((step, walkers))
    return out


def _signed_step(moved: Poly) -> int | None:
    """The constant ``moved`` as a step in `STEPS`, else None."""
    if not moved.is_const or moved.const % P == 0:
        return None
    step = moved.const % P
    step = step - P if step > P // 2 else step
    return step if step in STEPS else None


def _factor(ctx: ExprContext, p: Poly, a: Poly) -> Poly | None:
    """``D`` with ``p = a * D``, when every term of ``p`` holds the atom ``a`` (a variable)
    exactly once; else None."""
    ((mono, _),) = a.terms.items()
    ((atom, _),) = mono
    out: dict[tuple[tuple[int, int], ...], int] = {}
    for m, c in p.terms.items():
        if (atom, 1) not in m:
            return None
        out[tuple(x for x in m if x != (atom, 1))] = c
    d = ctx.poly(out)
    return d if ctx.mul(a, d) is p else None


def _dead_after(
    lines: Sequence[str], site: int, isa: IsaVariant, walkers: Sequence[int] = ()
) -> bool:
    """The code after the ``call`` at line ``site`` runs straight to the function's
    ``return`` and never lets st5, st6 or the ``walkers`` (depths at the call's return) be
    observed."""
    table = instruction_set(isa)
    post: list[Instr] = []
    for i in range(site + 1, len(lines)):
        kind = line_kind(lines[i])
        if kind is None:
            continue
        if kind == ":":
            return False
        try:
            (ins,) = parse_instructions(lines[i].split("//", 1)[0], isa)
        except (TasmSyntaxError, ValueError):
            return False
        if ins.name in _RETURN:
            break
        if table[ins.name].is_control_flow:
            return False
        post.append(ins)
    else:
        return False
    ctx = ExprContext()
    run = run_symbolic(post, ctx, isa)
    if run.unsupported is not None or run.base <= max([N_SLOT, *walkers]):
        return False
    ends = ctx.atoms_of([ctx.var("s", k) for k in (I_SLOT, N_SLOT, *walkers)])
    seen = [*run.stack, *run.outputs, *guard_polys(ctx, run.guards)]
    seen += [x for pair in run.ram for x in pair]
    return not (ends & ctx.depends_on(seen)) and all(g[0] in _POLY_GUARDS for g in run.guards)


def find_reversals(
    lines: Sequence[str], isa: IsaVariant = "release", others_call: frozenset[str] = frozenset()
) -> list[Reversal]:
    """The loops of one function's ``lines`` this pass may reverse (module docstring);
    ``others_call``: labels other functions call."""
    table = instruction_set(isa)
    out = []
    for label, start, end, _, body in loop_sections(lines, isa, others_call):
        if any(table[x.name].is_control_flow for x in body):
            continue
        for step, walkers in _reductions(body, isa):
            sites = _sites(lines, label, isa, tuple(w for w, _ in walkers))
            if sites and all(
                _swap_ends_ok(step, int(g), isa) and _walk_ends_ok(step, walkers, int(g), isa)
                for _, g in sites
            ):
                enter = tuple(walk_ends(step, walkers) + swap_ends(step))
                guarded = tuple(walk_ends(step, walkers, 1) + swap_ends(step, 1))
                back = [f"pick {I_SLOT}", f"addi {-2 * step}", f"place {I_SLOT}"]
                for w, dw in walkers:
                    back += [f"pick {w}", f"addi {-2 * dw}", f"place {w}"]
                out.append(
                    Reversal(
                        label,
                        start,
                        end,
                        sites,
                        (enter, guarded),
                        (),
                        None,
                        "walks down",
                        step,
                        walkers,
                        tail=tuple(back),
                    )
                )
                break
    return out


def _sites(
    lines: Sequence[str], label: str, isa: IsaVariant, walkers: Sequence[int] = ()
) -> tuple[tuple[int, bool], ...]:
    """Each ``call label`` with whether ``skiz`` guards it; empty if the label is reached
    otherwise, a site is skippable some other way, or st5/st6 (or a walker) may be read
    after it."""
    out = []
    for i, ln in enumerate(lines):
        words = ln.split("//", 1)[0].split()
        if label not in words[1:]:
            continue
        if line_kind(ln) != "call" or len(words) != 2 or not _dead_after(lines, i, isa, walkers):
            return ()
        before = _before(lines, i)
        guarded = before is not None and line_kind(lines[before]) == "skiz"
        if guarded and before is not None:
            earlier = _before(lines, before)
            if earlier is not None and line_kind(lines[earlier]) == "skiz":
                return ()
        out.append((i, guarded))
    return tuple(out)


def reverse(lines: Sequence[str], rev: Reversal) -> tuple[list[str], list[tuple[int, int]]]:
    """``lines`` with ``rev`` applied (module docstring), and the spans of the new lines."""
    return conjugate(lines, rev)


def reverse_stage(
    fns: list[FunctionState],
    ours: ModuleText,
    client: ModuleText | None,
    options: CompileOptions,
    sources: SourceSet,
    verify: VerifyBackend,
) -> None:
    """Reverse the qualifying loops of every function worked on in this run
    (`conjugate_stage`: kept only when equivalent on the verifier's witnesses, cheaper in
    cycles, no execution table nor the padded height raised; the new code searched with a
    loop body's budget, like the ``hot`` pass's)."""
    conjugate_stage(
        fns, ours, client, options, sources, verify, find_reversals, "reverse", deep=True
    )
