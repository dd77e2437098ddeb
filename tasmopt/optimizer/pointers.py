"""Function-level pass ``pointers``: RAM walks in ``recurse_or_return`` loops turned into
pointers that the loop bumps (issue 11, loops: pointer-bumping ``read_mem`` / ``write_mem``).

A loop ``L: B; recurse_or_return`` (the shape the ``loops`` pass makes, and the expert's)
runs ``B`` until ``st5 == st6``. When ``B`` reads or writes RAM at ``b + i``, with ``i`` the
induction variable at st5 and ``b`` an element ``B`` keeps in place, every iteration spends
instructions on bringing both to the top and adding them. Experts keep the pointer itself
instead. The pass does it by a **change of variables** ``T``, a bijection of op-stack states
built from two kinds of step:

* *shift* ``b`` with stride ``k`` and constant ``c``: ``st5 := k*st5 + st_b + c`` and
  ``st6 := k*st6 + st_b + c`` (the induction variable and the bound become the pointer
  ``b + k*i + c`` and the end pointer; ``k`` a nonzero constant, ``b`` optional: an array
  at a constant address);
* *walk* ``w`` with stride ``c``: ``st_w += c*st5`` (a second array base ``w`` becomes the
  pointer ``w + c*i``: inner products read two arrays);
* *retarget* ``q`` with step ``d``: when the body already walks a pointer ``p`` at depth ``q``
  by the constant ``d`` beside the counter, ``p`` takes over the test: st5 becomes ``p``,
  st6 the end pointer ``e = p + d*(n - i)`` and st_q the bound ``n`` (a shear of st5, then a
  permutation); ``e`` is loop-invariant, so the counter's updates become dead code.

The loop is conjugated: every ``call L`` becomes ``T; call L; T^-1`` (``T`` goes before the
``skiz`` that guards the call, one element deeper, so that the loop skipped runs
``T; T^-1``), and the body becomes ``T^-1; B; T``, which the block sources then shorten:
`tasmopt.search.algebra` sees ``b + (p - b) = p`` and ``p + 1`` after ``read_mem 1`` of ``p``
as ``addi 2`` of the pointer the read left.

Proof. Let ``R_0`` be the state at ``call L`` and ``R_{k+1} = B(R_k)``; the old loop stops
at the first ``t >= 1`` with ``R_t[5] == R_t[6]`` and returns ``R_t``. The new loop starts at
``T(R_0)``; if it is at ``T(R_k)`` after ``k`` iterations, the next runs ``T(B(T^-1(T(R_k))))
= T(R_{k+1})``, and stops iff ``T(R)[5] == T(R)[6]``, which is ``R[5] == R[6]`` because
``T(R)[5] - T(R)[6] = k * (R[5] - R[6])`` with ``k != 0`` in the field (a shift scales both
by ``k`` and adds the same value to both, a walk touches neither). So it stops at the same ``t`` with ``T(R_t)``, and ``T^-1`` restores ``R_t``.
Inside each iteration the effects of ``B`` (RAM, I/O, failures, the sponge) happen on the
same values in the same order: ``T`` and ``T^-1`` only move and add stack elements. What the
pass establishes, and fails closed on: ``L`` is entered only by ``call`` lines of this
function (no fall-through into it, no other function calls it, no ``skiz`` before an
inserted ``T``), ``B`` is straight-line, and by symbolic execution (exact polynomial
identities, `tasmopt.vm.symbolic`) that ``T; T^-1`` and ``T^-1; T`` are the identity on every
state and that ``T`` maps ``st5 - st6`` to ``k * (st5 - st6)``. The shortened body is proven equal to
``T^-1; B; T`` by `check_block`, and the rewritten function is run against its reference on
the verifier's witnesses (`check_function`) and kept only when equivalent there, cheaper in
cycles, with no table that grows with execution taller and no padded height larger, its own
or a caller's (``T`` and its inverse lengthen the program: `refusal` with ``longer``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from tasmopt.isa import IsaVariant, P, instruction_set
from tasmopt.module import ModuleText, line_kind
from tasmopt.optimizer.conjugate import Conjugated, conjugate, guarded_enter_ok
from tasmopt.optimizer.inline import _reoptimize, _Run
from tasmopt.optimizer.loops import (
    I_SLOT,
    N_SLOT,
    REACH,
    _at,
    loop_sections,
    permutation_program,
)
from tasmopt.optimizer.state import (
    FunctionState,
    VerifyBackend,
    out_of_time,
    verify_within,
)
from tasmopt.report import CompileOptions
from tasmopt.search.algebra import LinearForm, linear_forms
from tasmopt.search.dataflow import RAM_WORDS, Dataflow, UnsupportedBlock, extract
from tasmopt.search.optimize import SearchConfig, optimize_block
from tasmopt.sources import SourceSet
from tasmopt.tasm.parser import parse_instructions
from tasmopt.tasm.program import Instr
from tasmopt.vm.equivalence import BlockCheck
from tasmopt.vm.expr import ExprContext
from tasmopt.vm.symbolic import run_symbolic

__all__ = [
    "Change",
    "PointerLoop",
    "change_code",
    "find_pointer_loops",
    "pointer_stage",
    "prove_change",
    "rewrite_pointer_loop",
    "layout_stage",
    "SWAPS",
]

#: Most changes of variables tried per loop (each costs a block search).
MAX_CHANGES = 6
#: Search states spent on each change's body when choosing one.
CHOICE_STATES = 4_000
#: Search states spent again on the bodies within one instruction of the best.
DEEP_STATES = 20_000
#: The loop layouts `layout_stage` tries: st0 exchanged with st_k.
SWAPS = (1, 2, 3, 4)


@dataclass(frozen=True)
class Change:
    """A change of variables ``T`` (module docstring), an affine map of op-stack states.

    Attributes:
        shift: the depth ``b`` whose value is added to st5 and st6 (None: none).
        scale: ``k``, a nonzero constant: st5 becomes ``k*st5 + st_b + offset`` and st6
            ``k*st6 + st_b + offset`` (an array of stride ``k``).
        offset: a constant added to both (an array at a constant address; with a retarget,
            applied after it: the pointer moved to where the body reads).
        walks: ``(w, c)`` pairs, applied first: ``st_w += c * st5`` (a second array of
            stride ``c`` at base ``st_w``).
        retarget: ``(q, d)``, alone: the element at depth ``q`` that the body steps by the
            constant ``d`` (a pointer walking beside the counter) takes over the loop's
            test. st5 becomes it, st6 ``e = st_q + d*(st6 - st5)`` (where it will stand
            when st5 reaches st6) and st_q the bound: ``T(st5) - T(st6) = d * (st5 - st6)``.
    """

    shift: int | None
    walks: tuple[tuple[int, int], ...] = ()
    scale: int = 1
    offset: int = 0
    retarget: tuple[int, int] | None = None
    #: ``k``: st0 and st_k exchanged, after the rest (the loop's layout: `layout_stage`);
    #: 0 for none. Never st5 or st6.
    swap: int = 0

    @property
    def moves_test(self) -> bool:
        """Whether st5 and st6 change at all (a walk alone leaves them)."""
        return self.shift is not None or self.scale % P != 1 or self.offset % P != 0

    def __str__(self) -> str:
        """E.g. ``st5 := 3*st5 + st1 + 2, st2 += st5`` or ``st0 carries the test (step -1)``."""
        parts = [f"st{w} += {_coef(c)}st5" for w, c in self.walks]
        if self.swap:
            parts.append(f"st0 <-> st{self.swap}")
        if not parts and not self.moves_test and self.retarget is None:
            return "the body alone"
        off = _signed(self.offset)
        plus = f" {'+' if off > 0 else '-'} {abs(off)}" if off else ""
        if self.retarget is not None:
            q, d = self.retarget
            moved = f", moved by {off}" if off else ""
            parts.append(f"st{q} carries the test (step {_signed(d)}){moved}")
        elif self.moves_test:
            base = f" + st{self.shift}" if self.shift is not None else ""
            parts.append(f"st5, st6 := {_coef(self.scale)}st5/st6{base}{plus}")
        return ", ".join(parts)

    @property
    def test_scale(self) -> int:
        """``k`` with ``T(st5) - T(st6) = k * (st5 - st6)`` (module docstring)."""
        return self.retarget[1] if self.retarget is not None else self.scale


@dataclass(frozen=True)
class PointerLoop:
    """A ``recurse_or_return`` loop whose RAM addresses are ``base + st5``.

    Attributes:
        label: the loop section's label. start, end: its line range (label line first).
        body: ``B``, its instructions before ``recurse_or_return``.
        sites: line indices of the ``call label`` lines (all of them in the function).
        changes: the changes of variables worth trying, most promising first.
    """

    label: str
    start: int
    end: int
    body: tuple[Instr, ...]
    sites: tuple[int, ...]
    changes: tuple[Change, ...]


def _affine(k: int, j: int | None, scale: int, offset: int) -> list[str]:
    """``st_k := scale * st_k + st_j + offset`` (depths before the code; ``j != k``)."""
    code = [f"pick {k}"]
    if scale % P != 1:
        code += [f"push {_signed(scale)}", "mul"]
    if j is not None:
        code += [f"dup {j + 1 if j < k else j}", "add"]  # st_j once st_k is on top
    if offset % P:
        code += [f"addi {_signed(offset)}"]
    return [*code, f"place {k}"]


def _unaffine(k: int, j: int | None, scale: int, offset: int) -> list[str]:
    """The inverse of `_affine`: ``st_k := (st_k - st_j - offset) / scale``."""
    code = [f"pick {k}"]
    if offset % P:
        code += [f"addi {_signed(-offset)}"]
    if j is not None:
        code += [f"dup {j + 1 if j < k else j}", "push -1", "mul", "add"]
    if scale % P != 1:
        code += [f"push {_signed(pow(scale, -1, P))}", "mul"]
    return [*code, f"place {k}"]


def _coef(c: int) -> str:
    """``c*`` for a coefficient other than 1, else nothing."""
    return "" if c % P == 1 else f"{_signed(c)}*"


def _signed(c: int) -> int:
    """``c`` mod p, written as a small negative number when that is shorter."""
    c %= P
    return c - P if c > P // 2 else c


def change_code(change: Change, offset: int = 0) -> tuple[list[str], list[str]]:
    """``(T, T^-1)`` as instruction lines for a state ``offset`` elements below the top
    (1 when the loop's entry condition lies on top). Raises ValueError when a depth would
    pass st15 or the scale is 0."""
    o = offset
    if change.scale % P == 0 or change.test_scale % P == 0:
        raise ValueError("scale 0 is not invertible")
    if change.swap in (I_SLOT, N_SLOT) or not 0 <= change.swap < REACH - o:
        raise ValueError("st5 and st6 keep their places")
    if change.swap and change.retarget is not None:
        raise ValueError("a retarget is not combined with a swap")
    if change.retarget is not None:
        there, undo = _retarget_code(*change.retarget, o)
        if change.offset % P:  # then both moved by a constant: reads at p + c read at p
            for slot in (I_SLOT + o, N_SLOT + o):
                there += _affine(slot, None, 1, change.offset)
                undo = _unaffine(slot, None, 1, change.offset) + undo
        return there, undo
    depths = [I_SLOT + o, N_SLOT + o] + [w + o for w, _ in change.walks]
    if change.shift is not None:
        depths.append(change.shift + o)
    if max(depths) >= REACH:  # a dup below a picked element reaches one deeper
        raise ValueError("change of variables out of reach")
    fwd: list[str] = []
    back: list[str] = []
    i = I_SLOT + o
    for w, c in change.walks:
        fwd += [f"pick {w + o}", *_walk(i, w + o, c), f"place {w + o}"]
    if change.moves_test:
        b = None if change.shift is None else change.shift + o
        for slot in (I_SLOT + o, N_SLOT + o):
            fwd += _affine(slot, b, change.scale, change.offset)
            back += _unaffine(slot, b, change.scale, change.offset)
    for w, c in reversed(change.walks):
        back += [f"pick {w + o}", *_walk(i, w + o, -c), f"place {w + o}"]
    if change.swap:
        before = [object() for _ in range(change.swap + o + 1)]
        after = list(before)
        after[o], after[change.swap + o] = before[change.swap + o], before[o]
        fwd += permutation_program(before, after)
        back = permutation_program(after, before) + back
    return fwd, back


def _retarget_code(q: int, d: int, o: int) -> tuple[list[str], list[str]]:
    """`change_code` of ``Change(retarget=(q, d))``: a shear of st5 (``st5 := -d*st5 +
    d*st6 + st_q``, invertible since ``d != 0``), then a permutation of (st5, st6, st_q)
    from (e, n, p) to (p, e, n); the inverse undoes both."""
    i, n, qq = I_SLOT + o, N_SLOT + o, q + o
    if q in (I_SLOT, N_SLOT) or max(i, n, qq) >= REACH:
        raise ValueError("change of variables out of reach")
    shear = [f"pick {i}", f"push {_signed(-d)}", "mul", f"dup {n}", f"push {_signed(d)}", "mul"]
    shear += ["add", f"dup {qq + 1 if qq < i else qq}", "add", f"place {i}"]
    unshear = [f"pick {i}", f"dup {n}", f"push {_signed(-d)}", "mul", "add"]
    unshear += [f"dup {qq + 1 if qq < i else qq}", "push -1", "mul", "add"]
    unshear += [f"push {_signed(pow(-d, -1, P))}", "mul", f"place {i}"]
    width = max(n, qq) + 1
    before = [object() for _ in range(width)]
    after = list(before)
    after[i], after[n], after[qq] = before[qq], before[i], before[n]
    return (
        shear + permutation_program(before, after),
        permutation_program(after, before) + unshear,
    )


def _walk(i: int, w: int, c: int) -> list[str]:
    """With st_w picked to the top: add ``c`` times st_i (its depth before the pick)."""
    mul = [] if c % P == 1 else [f"push {_signed(c)}", "mul"]
    return [f"dup {i + 1 if i < w else i}", *mul, "add"]


def prove_change(change: Change, isa: IsaVariant = "release") -> str | None:
    """Why ``change`` is not a test-preserving bijection (module docstring), or None when
    symbolic execution shows that ``T; T^-1`` and ``T^-1; T`` leave every element in place
    with no effect or failure, that ``T`` maps ``st5 - st6`` to ``k * (st5 - st6)`` for
    its nonzero constant scale ``k``, and that ``T`` written for a guarded site (the ``skiz``
    condition on top) is ``T`` below it (`guarded_enter_ok`)."""
    try:
        fwd, back = change_code(change)
    except ValueError as exc:
        return str(exc)
    t, t_inv = (parse_instructions("\n".join(x), isa) for x in (fwd, back))
    for prog in (t + t_inv, t_inv + t):
        ctx = ExprContext()
        run = run_symbolic(prog, ctx, isa)
        if run.unsupported is not None or run.delta != 0:
            return "not a stack permutation"
        if (
            run.guards
            or run.outputs
            or run.ram
            or run.sponge is not None
            or any(run.consumed.values())
        ):
            return "has an effect or may fail"
        for d in range(len(run.stack)):
            if run.stack[-1 - d] is not ctx.var("s", d):
                return f"does not restore st{d}"
    ctx = ExprContext()
    run = run_symbolic(t, ctx, isa)
    if run.unsupported is not None:
        return "does not run"
    diff = ctx.sub(ctx.var("s", I_SLOT), ctx.var("s", N_SLOT))
    kept = ctx.sub(_at(run, I_SLOT), _at(run, N_SLOT))
    # k * (st5 - st6) with k a nonzero constant: st5 == st6 exactly when it was before
    k = change.test_scale
    if kept is not ctx.mul(ctx.const(k), diff) or k % P == 0:
        return "changes whether st5 == st6"
    try:
        guarded, _ = change_code(change, 1)
    except ValueError:
        return None  # no guarded site can take it: `rewrite_pointer_loop` refuses one
    if not guarded_enter_ok(fwd, guarded, isa):
        return "T under a skiz condition is not T"
    return None


def _changes(body: Sequence[Instr], isa: IsaVariant) -> tuple[Change, ...]:
    """The changes of variables worth trying for ``body``, from the RAM accesses it makes
    at ``k*st5 + st_b + c`` (``b`` an element the body keeps) or ``k*st5 + c``: a shift
    with that stride and base (with a base, once without ``c`` and once with it: the
    pointer on the cell accessed saves an ``addi`` per iteration), a walk of each base, and a shift by one base with walks of
    the others (two arrays read at the same index); a retarget to every element the body
    steps by a nonzero constant; and last the identity (the body searched harder)."""
    try:
        df = extract(body, isa)
    except UnsupportedBlock:
        return ()
    if len(df.final) != len(df.entry) or I_SLOT >= len(df.entry):
        return ()
    depth = {v: d for d, v in enumerate(reversed(df.entry))}
    kept = {d for d, (a, b) in enumerate(zip(reversed(df.entry), reversed(df.final))) if a == b}
    forms = linear_forms(df)
    i_val = df.entry[-1 - I_SLOT]
    arrays: list[tuple[int | None, int, int]] = []  # (base depth or None, stride, constant)
    for node in df.nodes:
        if node.instr.name not in RAM_WORDS or not node.inputs:
            continue
        terms, c = forms.get(node.inputs[0], (((node.inputs[0], 1),), 0))
        coef = dict(terms)
        k = coef.pop(i_val, 0)
        if not k:
            continue
        if not coef:
            if all(a[:2] != (None, k) for a in arrays):
                arrays.append((None, k, c))
        elif len(coef) == 1 and next(iter(coef.values())) == 1:
            d = depth.get(next(iter(coef)))
            if d is None or d in (I_SLOT, N_SLOT) or d not in kept:
                continue
            # the base alone first (it wins ties), then the pointer on the accessed cell
            for found in ((d, k, 0), (d, k, c)):
                if found not in arrays:
                    arrays.append(found)
    out: list[Change] = [Change(b, (), k, c) for b, k, c in arrays]
    # a second induction variable beside st5: it may carry the test instead
    for q in range(min(len(df.entry), REACH - 1)):
        if q in (I_SLOT, N_SLOT):
            continue
        terms, d = forms.get(df.final[-1 - q], (((df.final[-1 - q], 1),), 0))
        if terms == ((df.entry[-1 - q], 1),) and d:
            out.append(Change(None, retarget=(q, _signed(d))))
            # ... and moved by c where the body addresses RAM at p + c
            for c in sorted({a[2] for a in _accesses(df, forms, df.entry[-1 - q])} - {0}):
                out.append(Change(None, offset=_signed(c), retarget=(q, _signed(d))))
    walks = list(dict.fromkeys((b, k) for b, k, _ in arrays if b is not None))
    out += [Change(None, (w,)) for w in walks]
    for b, k, c in arrays:
        rest = tuple(w for w in walks if w[0] != b)
        if rest:
            out.append(Change(b, rest, k, c))
    # and no change at all: the body searched harder (it runs once per iteration)
    return (*out[:MAX_CHANGES], Change(None))


def _accesses(df: Dataflow, forms: dict[int, LinearForm], x: int) -> list[tuple[int, int, int]]:
    """``(node id, coefficient, constant)`` of the RAM word accesses of ``df`` at
    ``coefficient * x + constant`` (``x`` a value of it)."""
    out = []
    for node in df.nodes:
        if node.instr.name not in RAM_WORDS or not node.inputs:
            continue
        terms, c = forms.get(node.inputs[0], (((node.inputs[0], 1),), 0))
        if len(terms) == 1 and terms[0][0] == x:
            out.append((node.id, terms[0][1], c))
    return out


def _site_insertion(lines: Sequence[str], site: int, isa: IsaVariant) -> tuple[int, int] | None:
    """``(line index, offset)`` where ``T`` goes for the ``call`` at line ``site``: right
    before it (offset 0), or before the ``skiz`` guarding it (offset 1, the condition on
    top); None when the instruction before that point may skip the next one (it would skip
    ``T``'s first instruction instead)."""
    table = instruction_set(isa)

    def before(j: int) -> int | None:
        for m in range(j - 1, -1, -1):
            kind = line_kind(lines[m])
            if kind is not None:
                return None if kind == ":" else m
        return None

    p = before(site)
    at, offset = site, 0
    if (
        p is not None
        and line_kind(lines[p]) in table
        and table[str(line_kind(lines[p]))].may_skip_next
    ):
        at, offset = p, 1
        p = before(p)
    if p is not None:
        kind = line_kind(lines[p])
        if kind not in table or table[str(kind)].may_skip_next:
            return None
    return at, offset


def find_pointer_loops(
    lines: Sequence[str], isa: IsaVariant = "release", others_call: frozenset[str] = frozenset()
) -> list[PointerLoop]:
    """The loops of one function's lines (its sections) that qualify (module docstring);
    ``others_call``: labels other functions call (those loops are left alone)."""
    table = instruction_set(isa)
    out = []
    for label, start, end, _, body in loop_sections(lines, isa, others_call):
        if any(table[x.name].is_control_flow for x in body):
            continue
        sites = tuple(
            i
            for i, ln in enumerate(lines)
            if line_kind(ln) == "call" and ln.split("//", 1)[0].split()[1:] == [label]
        )
        if not sites or any(_site_insertion(lines, s, isa) is None for s in sites):
            continue
        changes = tuple(c for c in _changes(body, isa) if prove_change(c, isa) is None)
        if changes:
            out.append(PointerLoop(label, start, end, tuple(body), sites, changes))
    return out


def rewrite_pointer_loop(
    lines: Sequence[str],
    loop: PointerLoop,
    change: Change,
    isa: IsaVariant = "release",
    body: Sequence[str] | None = None,
) -> tuple[list[str], list[tuple[int, int]]]:
    """The function's lines with ``loop`` conjugated by ``change`` (module docstring, written
    by `conjugate`), and the line spans of the new straight-line code, the new body's too
    (for the block sources to optimize). ``body``: the new body's instructions, already
    proven equal to ``T^-1; B; T`` by the caller (default: that text itself). Raises
    ValueError when a site's ``T`` would pass st15."""
    new_body = list(body) if body is not None else _conjugated(loop, change)
    sites = []
    for s in loop.sites:
        where = _site_insertion(lines, s, isa)
        if where is None:
            raise ValueError(f"call of {loop.label} at line {s} is guarded by a skip")
        sites.append((s, where[1] == 1))
    fwd, back = change_code(change)
    guarded = change_code(change, 1)[0] if any(g for _, g in sites) else fwd
    conj = Conjugated(
        loop.label,
        loop.start,
        loop.end,
        tuple(sites),
        (tuple(fwd), tuple(guarded)),
        tuple(back),
        tuple(new_body),
        str(change),
    )
    return conjugate(lines, conj, search_body=True)


def _conjugated(loop: PointerLoop, change: Change) -> list[str]:
    """``T^-1; B; T``: the loop body in the new variables, before any optimization."""
    fwd, back = change_code(change)
    return [*back, *(str(x) for x in loop.body), *fwd]


def _choose(
    loop: PointerLoop, options: CompileOptions, verify: VerifyBackend
) -> tuple[Change, list[str] | None] | None:
    """The change whose conjugated body the block search shortens most below ``B``, with
    that body when `check_block` proves it equal to ``T^-1; B; T`` (None: leave the body
    to the block sources). Every change is searched with `CHOICE_STATES` states; those
    within one instruction of the best again with `DEEP_STATES` (a loop body's instruction
    is paid once per iteration)."""
    isa = options.isa
    ranked: list[tuple[int, int, Change, list[Instr]]] = []
    conj_of: dict[int, list[Instr]] = {}
    for k, change in enumerate(loop.changes):
        if out_of_time(options) is not None:
            return None
        conj = conj_of[k] = parse_instructions("\n".join(_conjugated(loop, change)), isa)
        cfg = SearchConfig(states=CHOICE_STATES, isa=isa, deadline=options.deadline)
        found = optimize_block(conj, cfg)
        if found and len(found[0]) < len(loop.body):
            ranked.append((len(found[0]), k, change, found[0]))
    if not ranked:
        return None
    ranked.sort(key=lambda r: (r[0], r[1]))
    shortest = ranked[0][0]
    for n, k, change, _ in [r for r in ranked if r[0] <= shortest + 1]:
        if out_of_time(options) is not None:
            break
        conj = conj_of[k]
        cfg = SearchConfig(states=DEEP_STATES, isa=isa, deadline=options.deadline)
        found = optimize_block(conj, cfg)
        if found and len(found[0]) < n:
            ranked.append((len(found[0]), k, change, found[0]))
    ranked.sort(key=lambda r: (r[0], r[1]))
    _, _, change, body = ranked[0]
    check = BlockCheck(
        tuple(_conjugated(loop, change)),
        tuple(str(x) for x in body),
        isa,
        options.witnesses,
        options.seed,
    )
    verdicts = verify_within(verify, [check], options)
    proven = bool(verdicts) and verdicts[0].equivalent
    return change, ([str(x) for x in body] if proven else None)


def pointer_stage(
    fns: list[FunctionState],
    ours: ModuleText,
    client: ModuleText | None,
    options: CompileOptions,
    sources: SourceSet,
    verify: VerifyBackend,
) -> None:
    """Conjugate the qualifying loops of every function worked on in this run; a function
    keeps its result so far unless the rewritten one is equivalent on the verifier's
    witnesses, takes fewer cycles and raises no table."""
    run = _Run(fns, ours, client, options, sources, verify)
    _conjugate_loops(run, fns, options, sources, verify, "pointers", None)


def _conjugate_loops(
    run: _Run,
    fns: list[FunctionState],
    options: CompileOptions,
    sources: SourceSet,
    verify: VerifyBackend,
    what: str,
    changes: tuple[Change, ...] | None,
) -> None:
    """Conjugate every qualifying loop of ``fns`` by its best change (the
    loop's own, or ``changes`` when given), keeping each rewrite the function check and
    `refusal` accept; ``what`` names the pass in the notes."""
    isa = options.isa
    for f in run.workable(fns):
        for cur, found in run.untried(
            f, lambda lines, others: find_pointer_loops(lines, isa, others)
        ):
            loop = found if changes is None else replace(found, changes=changes)
            chosen = _choose(loop, options, verify)
            if chosen is None:
                continue
            change, body = chosen
            best = run.measure(f, cur)
            if best is None:
                break
            try:
                cand, spans = rewrite_pointer_loop(cur, loop, change, isa, body)
            except ValueError:
                continue
            touched = [(x, x + 1) for a, b in spans for x in range(a, b)]
            cand = _reoptimize(f, cand, touched, options, sources, verify)
            run.keep(
                f,
                cand,
                best,
                f"{what} {loop.label}",
                f"{what} {loop.label} ({change})",
                longer=True,  # T and its inverse around the call: fewer cycles, more words
            )


def layout_stage(
    fns: list[FunctionState],
    ours: ModuleText,
    client: ModuleText | None,
    options: CompileOptions,
    sources: SourceSet,
    verify: VerifyBackend,
) -> None:
    """Choose the op-stack layout a ``recurse_or_return`` loop carries (issue 11, across
    blocks): each loop is conjugated by the exchange of st0 with st_k (`SWAPS`), the same
    change of variables as above (``T`` a transposition, its own inverse; st5 and st6 stay),
    and the body whose search comes out shortest is kept when the function check and
    `refusal` accept it. The block search keeps a body's entry and exit layout fixed; a
    loop-carried value that every iteration brings to the top (an accumulator at st1) costs
    a ``pick``/``swap`` per iteration that another layout does not."""
    run = _Run(fns, ours, client, options, sources, verify)
    layouts = tuple(
        c for c in (Change(None, swap=k) for k in SWAPS) if prove_change(c, options.isa) is None
    )
    _conjugate_loops(run, fns, options, sources, verify, "layout", layouts)
