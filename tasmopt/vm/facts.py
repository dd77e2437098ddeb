"""Deciding a branch condition from the conditions of the branches taken before it.

A path through a function is a sequence of ``skiz`` outcomes; each one adds a *fact* about
the entry state, ``c == 0`` (the branch was skipped) or ``c != 0`` (taken), with ``c`` a
canonical expression (`tasmopt.vm.expr`) over the entry stack, the inputs and RAM. `decide`
answers whether a later condition is forced by the facts: ``False`` when it is zero in every
state that satisfies them, ``True`` when it is nonzero in every such state, ``None`` when it
cannot tell. A definite answer is a proof; ``None`` is always safe.

1. **Syntactic**: the condition is a constant, or (up to sign) a fact's own expression, or
   ``iszero(d)`` with a fact about ``d``.
2. **SMT** (z3, the encoding of `tasmopt.vm.guards`): the facts and ``c != 0`` (resp.
   ``c == 0``) are unsatisfiable. Unlike witness search, a proof must never concretize: every
   operation the encoding cannot express (Tip5, aliased RAM reads, ``log_2_floor``, initial
   RAM, ...) is a fresh unconstrained variable here, so the encoding over-approximates the
   VM and unsatisfiable means impossible. Each query has a time limit; a timeout is
   ``None``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tasmopt.isa import P
from tasmopt.vm.evaluate import Assignment
from tasmopt.vm.expr import AtomKey, ExprContext, Poly
from tasmopt.vm.guards import _context, _Encoder, _Frozen

__all__ = ["Fact", "decide"]

#: ``(expression, is_zero)``: the path has ``expression == 0`` (True) or ``!= 0`` (False).
Fact = tuple[Poly, bool]

#: Opaque operations the encoding expresses exactly (`tasmopt.vm.guards._Encoder._op`).
_EXACT = frozenset(
    {"iszero", "inv", "split_hi", "split_lo", "lt", "and", "xor", "half", "div", "mod", "mul"}
)


class _Sound(_Encoder):
    """`_Encoder` that never concretizes: what it cannot express is a fresh variable."""

    def _op(self, key: AtomKey) -> Any:
        name = key[0]
        exact = name in _EXACT or (name == "pow" and key[2][0] == "i" and key[2][1] <= 16)
        if exact:
            return super()._op(key)
        v = self.z3.Int(f"o{len(self.side)}_{len(self._memo)}", self.zctx)
        self.side += [v >= 0, v < P]
        return v


def _syntactic(ctx: ExprContext, facts: Sequence[Fact], cond: Poly) -> bool | None:
    if cond.is_const:
        return cond.const != 0
    c = ctx.canonical_sign(cond)
    known = {(ctx.canonical_sign(e).id, z) for e, z in facts}
    if (c.id, True) in known:
        return False
    if (c.id, False) in known:
        return True
    # iszero(d) is 1 exactly when d == 0
    if len(cond.terms) == 1:
        ((mono, coeff),) = cond.terms.items()
        if coeff == 1 and len(mono) == 1 and mono[0][1] == 1:
            key = ctx.atom_keys[mono[0][0]]
            if key[0] == "iszero" and key[1][0] == "p":
                d = ctx._by_id[key[1][1]]
                if (d.id, True) in known:
                    return True
                if (d.id, False) in known:
                    return False
    return None


#: z3's work limit per query (its ``rlimit`` units, about 100 ms on one core of the CI
#: machine): the answer depends on the query, not on how busy the machine is.
RLIMIT = 75_000


def decide(
    ctx: ExprContext,
    facts: Sequence[Fact],
    cond: Poly,
    *,
    timeout_ms: int = 400,
    rlimit: int = RLIMIT,
) -> bool | None:
    """Is ``cond`` forced by ``facts``? False: zero in every state satisfying them; True:
    nonzero in every such state; None: not proven either way (module docstring).

    Args:
        ctx: the context ``cond`` and the facts' expressions live in.
        facts: the path's facts, ``(expression, is_zero)``.
        cond: the condition, e.g. the value a ``skiz`` pops.
        timeout_ms: z3's wall-clock limit per query (two queries at most), milliseconds: a
            safety net on a machine so busy that ``rlimit`` takes longer.
        rlimit: z3's work limit per query (`RLIMIT`), which normally stops it first, so
            that a busy machine does not change the answer.
    """
    got = _syntactic(ctx, facts, cond)
    if got is not None or not facts:
        return got
    try:
        import z3
    except ImportError:  # pragma: no cover - a pinned dependency
        return None
    enc = _Sound(ctx, Assignment(), z3, _context())  # of its own: `_Encoder`
    try:
        known = [(enc.poly(e) == 0) if z else (enc.poly(e) != 0) for e, z in facts]
        c = enc.poly(cond)
    except _Frozen:
        return None
    for value, query in ((False, c != 0), (True, c == 0)):
        solver = z3.Solver(ctx=enc.zctx)
        solver.set("timeout", timeout_ms)
        solver.set("rlimit", rlimit)
        solver.add(*known, *enc.side, query)
        if solver.check() == z3.unsat:
            return value
    return None
