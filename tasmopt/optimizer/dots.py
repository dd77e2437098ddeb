"""Function-level pass ``dots``: an inner-product loop that reads two arrays and adds their
product to an extension-field accumulator becomes one ``xx_dot_step`` (two arrays of
extension-field elements) or ``xb_dot_step`` (base-field scalars times extension-field
elements) per iteration (issue 11 item 4: loops the way experts write them).

``xx_dot_step`` (Triton VM spec) reads the extension-field elements at ``st0`` and ``st1``
(three words each, constant term first), adds their product to the accumulator at
st2..st4 (st2 the constant term) and moves both pointers on by 3; ``xb_dot_step`` reads
one base-field word at ``st0`` (moved on by 1). A loop ``L: B  recurse_or_return`` (the
shape the ``loops`` and ``pointers`` passes leave) qualifies when symbolic execution shows
that ``B`` adds such a product, read at addresses ``A(S)`` and ``B(S)`` that are affine in
the op stack ``S``, to three elements, steps every other element it changes by a constant,
and has no other effect. The loop is conjugated by ``T``::

    S (at the call) = ... with the accumulator at depths j0, j1, j2, st5 = i, st6 = n
    T(S)            = A(S)  B(S)  S[j0] S[j1] S[j2]  S5 S6  rest of S in order
    L'              = <dot step>  (pick k  addi c  place k, for each stepped element)
                      recurse_or_return

``T`` is a permutation (``pick``/``place``) followed by the code that pushes ``B(S)`` and
``A(S)``; ``T^-1`` is ``pop 2`` and the inverse permutation. Every ``call L`` becomes
``T; call L; T^-1`` (``T`` before the ``skiz`` that guards the call, with the condition
brought back on top).

Proof. Symbolic execution (exact polynomial identities over the Goldilocks field, RAM reads
as functions of their address: no iteration writes RAM, `tasmopt.vm.symbolic`) establishes
that ``B`` has no effect but RAM reads and no failure guard, that ``T; L'`` and ``B; T``
leave the same op stack (``T`` conjugates one iteration into the other: ``L'(T(S)) =
T(B(S))``), that ``T; T^-1`` is the identity (also with a ``skiz`` condition on top, for a
skipped call) and that ``T`` leaves st5 and st6 where they were. So the new loop runs
through ``T(S_0), T(S_1), ...`` exactly when the old one runs through ``S_0, S_1, ...``,
stops at the same iteration (st5 and st6 are the old ones), and ``T^-1`` returns the old
final state; neither loop has an effect to compare. The loop's section must be entered
only by ``call`` lines of this function. The rewritten function is then run against its
reference on the verifier's witnesses (`check_function`) and kept only when equivalent
there, cheaper in cycles, with no table that grows with execution taller and no padded
height larger, its own or a caller's (`refusal` with ``longer``). Cost: the RAM table gets
the same six (four) rows per iteration; the processor and op-stack tables lose the address
arithmetic, the three ``read_mem`` and the ``xx_mul``/``xx_add`` moves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import permutations

from tasmopt.errors import TasmSyntaxError
from tasmopt.isa import IsaVariant, P, instruction_set, names_where
from tasmopt.module import ModuleText
from tasmopt.optimizer.conjugate import (
    Conjugated,
    _quiet,
    call_sites,
    conjugate,
    conjugate_stage,
    guarded_enter_ok,
    parsed,
)
from tasmopt.optimizer.loops import (
    I_SLOT,
    N_SLOT,
    REACH,
    _at,
    loop_sections,
    permutation_program,
)
from tasmopt.optimizer.state import FunctionState, VerifyBackend
from tasmopt.report import CompileOptions
from tasmopt.sources import SourceSet
from tasmopt.tasm.program import Instr
from tasmopt.vm.expr import ExprContext, Poly
from tasmopt.vm.symbolic import run_symbolic

__all__ = ["DotLoop", "find_dot_loops", "dot", "dot_stage"]

#: The dot steps (ISA table: reads RAM and leaves the stack as deep as it found it, with
#: no sponge and no other effect), by the words they read at ``st0``: 3 (``xx_dot_step``)
#: or 1 (``xb_dot_step``), as the Triton VM spec defines them.
_DOTS = sorted(
    names_where(
        lambda i: (
            i.reads_ram
            and not i.writes_ram
            and not i.uses_sponge
            and not i.tip5_permutations
            and not i.is_control_flow
            and i.pops() == 5
            and i.stack_delta() == 0
        )
    )
)
#: The dot step by the words it reads at ``st0``: its RAM rows (ISA table) less the three
#: words of the extension-field element at ``st1`` (3: ``xx_dot_step``, 1: ``xb_dot_step``).
_BY_WORDS = {instruction_set("release")[n].table_rows()["ram"] - 3: n for n in _DOTS}
#: Elements ``T`` puts on top of the old state (the two pointers).
_EXTRA = 2


@dataclass(frozen=True)
class DotLoop(Conjugated):
    """A loop that qualifies (module docstring), with ``T``, ``T^-1`` and ``L'`` for it.

    Attributes:
        step: the dot step's name.
    """

    step: str = ""


def _signed(c: int) -> int:
    c %= P
    return c - P if c > P // 2 else c


def _affine_code(ctx: ExprContext, p: Poly, where: dict[int, int]) -> list[str] | None:
    """Code that pushes ``p``, a polynomial of degree 1 in the entry elements ``s k``, each
    found at depth ``where[k]``; None if ``p`` is no such polynomial or out of reach."""
    code: list[str] = []
    pushed = 0
    const = 0
    for mono, c in sorted(p.terms.items()):
        if mono == ():
            const = c
            continue
        if len(mono) != 1 or mono[0][1] != 1:
            return None
        key = ctx.atom_keys[mono[0][0]]
        if key[:2] != ("var", "s") or key[2] not in where or where[key[2]] + pushed > REACH:
            return None
        code.append(f"dup {where[key[2]] + pushed}")
        if c != 1:
            code += [f"push {_signed(c)}", "mul"]
        if pushed:
            code.append("add")
        pushed = 1
    if not pushed:
        code.append(f"push {_signed(const)}")
    elif const:
        code.append(f"addi {_signed(const)}")
    return code


def _triples(ctx: ExprContext, cells: Sequence[Poly]) -> list[Poly]:
    """The addresses ``a`` among ``cells`` with ``a + 1`` and ``a + 2`` there too."""
    have = {c.id for c in cells}
    return [
        a
        for a in cells
        if ctx.add(a, ctx.const(1)).id in have and ctx.add(a, ctx.const(2)).id in have
    ]


def _plan(
    body: Sequence[Instr], isa: IsaVariant
) -> tuple[str, tuple[tuple[str, ...], tuple[str, ...]], tuple[str, ...], tuple[str, ...]] | None:
    """``(step, (T, T under a condition), T^-1, L')`` proven for the old body ``B`` (module
    docstring), or None."""
    ctx = ExprContext()
    old = run_symbolic(body, ctx, isa)
    if not _quiet(old) or old.delta != 0:
        return None
    depth = max(old.base, N_SLOT + 1)
    if depth + _EXTRA > REACH + 1:
        return None
    s = [ctx.var("s", k) for k in range(depth)]
    moved = {k: ctx.sub(_at(old, k), s[k]) for k in range(depth) if _at(old, k) is not s[k]}
    acc = sorted(k for k, d in moved.items() if not d.is_const)
    if len(acc) != 3 or I_SLOT in acc or N_SLOT in acc:
        return None
    cells = ctx.cells([moved[k] for k in acc])
    triples = _triples(ctx, cells)
    pairs: list[tuple[Poly, Poly]] = []  # (what st0 points at, what st1 points at)
    if len(cells) == 6 and len(triples) == 2:
        x, y = triples
        pairs = [(x, y), (y, x)]
    elif len(cells) == 4 and len(triples) == 1:
        (y,) = triples
        words = {ctx.add(y, ctx.const(j)).id for j in range(3)}
        pairs = [(x, y) for x in cells if x.id not in words]
    step = _BY_WORDS.get(len(cells) - 3)
    if step is None:
        return None
    for a, b in pairs:
        for order in permutations(acc):
            plan = _try(ctx, body, step, a, b, order, moved, depth, isa)
            if plan is not None:
                return plan
    return None


def _try(
    ctx: ExprContext,
    body: Sequence[Instr],
    step: str,
    a: Poly,
    b: Poly,
    order: tuple[int, ...],
    moved: dict[int, Poly],
    depth: int,
    isa: IsaVariant,
) -> tuple[str, tuple[tuple[str, ...], tuple[str, ...]], tuple[str, ...], tuple[str, ...]] | None:
    """The plan for one choice of pointers and accumulator order, if every fact holds
    (``a``, ``b`` and ``moved`` are polynomials of ``ctx``, the old body's run)."""
    rest = [k for k in range(depth) if k not in order and k not in (I_SLOT, N_SLOT)]
    target = [*order, I_SLOT, N_SLOT, *rest]  # entry depths, top first, after the permutation
    enters = []
    for under in (0, 1):
        cur: list[object] = ["cond"] * under + list(range(depth))
        want: list[object] = ["cond"] * under + list(target)
        tokens = {x: object() for x in cur}
        try:
            perm = permutation_program([tokens[x] for x in cur], [tokens[x] for x in want])
        except ValueError:
            return None
        where = {k: target.index(k) + under for k in range(depth)}
        code_b = _affine_code(ctx, b, where)
        code_a = _affine_code(ctx, a, {k: v + 1 for k, v in where.items()})
        if code_a is None or code_b is None:
            return None
        enters.append(tuple(perm + code_b + code_a + ([f"pick {_EXTRA}"] if under else [])))
    tokens = {x: object() for x in range(depth)}
    back = permutation_program([tokens[x] for x in target], [tokens[x] for x in range(depth)])
    leave = (f"pop {_EXTRA}", *back)
    new_body = [step]
    for k, d in sorted(moved.items()):
        if k in order:
            continue
        at = target.index(k) + _EXTRA
        new_body += [f"pick {at}", f"addi {_signed(d.const)}", f"place {at}"]
    plan = (step, (enters[0], enters[1]), leave, tuple(new_body))
    return plan if _proven(body, plan, depth, isa) else None


def _proven(
    body: Sequence[Instr],
    plan: tuple[str, tuple[tuple[str, ...], tuple[str, ...]], tuple[str, ...], tuple[str, ...]],
    depth: int,
    isa: IsaVariant,
) -> bool:
    """The facts of the module docstring for ``plan``, each by a symbolic run."""
    _, (enter, enter_under), leave, new_body = plan
    ctx = ExprContext()
    try:
        lhs = run_symbolic(parsed([*enter, *new_body], isa), ctx, isa)
        rhs = run_symbolic([*body, *parsed(list(enter), isa)], ctx, isa)
        t = run_symbolic(parsed(list(enter), isa), ctx, isa)
    except (TasmSyntaxError, ValueError):
        return False
    deep = depth + _EXTRA + 2
    if not (_quiet(lhs) and _quiet(rhs) and lhs.delta == rhs.delta == _EXTRA):
        return False
    if any(_at(lhs, k) is not _at(rhs, k) for k in range(deep)):
        return False
    if _at(t, I_SLOT) is not ctx.var("s", I_SLOT) or _at(t, N_SLOT) is not ctx.var("s", N_SLOT):
        return False  # the loop's test reads the old st5 and st6
    for under, code in ((0, [*enter, *leave]), (1, [*enter_under, "pop 1", *leave])):
        c2 = ExprContext()
        run = run_symbolic(parsed(code, isa), c2, isa)
        if run.unsupported is not None or run.delta != -under or run.guards:
            return False
        if any(_at(run, k) is not c2.var("s", k + under) for k in range(deep)):
            return False
    return guarded_enter_ok(enter, enter_under, isa)


def find_dot_loops(
    lines: Sequence[str], isa: IsaVariant = "release", others_call: frozenset[str] = frozenset()
) -> list[DotLoop]:
    """The loops of one function's ``lines`` this pass may rewrite (module docstring);
    ``others_call``: labels other functions call."""
    out = []
    for label, start, end, _, body in loop_sections(lines, isa, others_call):
        if any(x.name in _DOTS for x in body):
            continue  # already the new shape
        plan = _plan(body, isa)
        sites = call_sites(lines, label) if plan is not None else ()
        if plan is not None and sites:
            step, enter, leave, new_body = plan
            out.append(DotLoop(label, start, end, sites, enter, leave, new_body, step, step))
    return out


def dot(lines: Sequence[str], d: DotLoop) -> tuple[list[str], list[tuple[int, int]]]:
    """``lines`` with ``d`` applied (module docstring), and the spans of the new call-site
    lines."""
    return conjugate(lines, d)


def dot_stage(
    fns: list[FunctionState],
    ours: ModuleText,
    client: ModuleText | None,
    options: CompileOptions,
    sources: SourceSet,
    verify: VerifyBackend,
) -> None:
    """Rewrite the qualifying loops of every function worked on in this run
    (`conjugate_stage`: kept only when proven, cheaper and no table grows)."""
    conjugate_stage(fns, ours, client, options, sources, verify, find_dot_loops, "dots")
