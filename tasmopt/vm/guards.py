"""Guard-directed witnesses: entry states that pass a program's guards (design §2).

A run fails when one of its *guards* is violated: an ``assert`` or ``assert_vector`` whose
operands differ, a u32 range check (``split``-based code, ``lt``, ``and``, ``div_mod``, ...),
an inverse of zero, an uninitialised sponge. Random field elements almost never pass
``assert x == 12345`` or a u32 check on a field element, and agreement on failing runs proves
nothing about the code after the guard. `solve` finds an `Assignment` of the free variables
(entry stack, inputs, digests, sponge, initial RAM) under which every guard holds:

1. **Propagation over the Goldilocks field.** A violated guard whose expression is linear in
   some free variable ``v`` (``q·v + r`` with ``q`` and ``r`` free of ``v`` and ``q != 0``
   in the current state) is repaired exactly: ``v = -r/q`` for ``== 0`` guards, ``v =
   (t - r)/q`` for a random small ``t`` for u32 checks. Repeated until every guard holds.
   This covers equality asserts against constants, inputs and hash outputs, and u32 checks
   on affine expressions.
2. **SMT** (z3): what propagation cannot repair (``eq`` then ``assert``, products of
   range-checked values, ``split``/``and``/``lt`` chains, ``div_mod``) is encoded exactly
   as integers in ``[0, p)`` with every field operation reduced mod p (u32 bit operations
   through 32-bit bit-vectors), with the operations the encoding cannot express (Tip5, RAM
   reads through aliasing writes, ``log_2_floor``, ...) concretized at their current value,
   with the free variables they depend on pinned to theirs (concolic testing's
   concretization, e.g. Godefroid, Klarlund and Sen, "DART", PLDI 2005).
   z3 rather than cvc5: cvc5's finite-field theory covers field equalities but not the u32
   range checks and bit operations mixed with them, while z3 handles the mix in one query
   (integer arithmetic mod p solved these guards 100x faster than 128-bit bit-vector
   remainders in our measurements), and its wheel is self-contained. Every query has a
   time limit.

A guard set that no attempt satisfies gets ``None``: the caller must then reject, never
accept on failing witnesses.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from tasmopt.deadline import current as current_deadline
from tasmopt.isa import P
from tasmopt.vm.evaluate import Assignment, Evaluator, Unevaluable
from tasmopt.vm.expr import AtomKey, ExprContext, Guard, Poly
from tasmopt.vm.witness import Witness

__all__ = ["solve", "violated", "guard_polys", "passing_witness", "singular_points"]

log = logging.getLogger(__name__)

_U32 = 1 << 32

#: z3 resource units (its ``rlimit``) per second of a `solve` budget, split evenly over its
#: attempts' queries. A query stopped by its resource limit stops at the same point on every
#: run, where a wall-clock timeout stops wherever the machine's load leaves it (and the next
#: attempts, and the witnesses after them, follow from where it stopped). Measured on the
#: 2-core development machine: 4-6 million units a second (a sat query of
#: std.crypto.lut_sponge's paths takes 10k units at the median, 108k at P90, 157k at most).
RLIMIT_PER_S = 4_000_000

#: How far past its budget a `solve` may run on the wall clock (a multiple of the budget)
#: before it stops anyway: the resource limits bound the solver's work, and this bounds
#: what they do not (encoding, propagation, a machine slower than the calibration). The
#: request's deadline still bounds both.
WALL_SLACK = 2.0

_FREE_KINDS = ("s", "public", "secret", "digest", "sponge0", "mem0")


def violated(ctx: ExprContext, guards: Iterable[Guard], a: Assignment) -> list[Guard]:
    """The guards of ``guards`` that fail under ``a`` (undefined values count as failing)."""
    ev = Evaluator(ctx, a)
    bad = []
    for g in guards:
        try:
            ok = _holds(ctx, ev, g)
        except Unevaluable:
            ok = False
        if not ok:
            bad.append(g)
    return bad


def _holds(ctx: ExprContext, ev: Evaluator, g: tuple[Any, ...]) -> bool:
    kind = g[0]
    if kind == "false":
        return False
    if kind == "sponge_initialized":
        return ev.a.sponge is not None
    if kind == "xnonzero":
        return any(ev.value(ctx._by_id[x]) for x in g[1:])
    v = ev.value(ctx._by_id[g[1]])
    if kind == "zero":
        return v == 0
    if kind == "nonzero":
        return v != 0
    if kind == "u32":
        return v < _U32
    raise ValueError(f"unknown guard {g!r}")


def guard_polys(ctx: ExprContext, guards: Iterable[Guard]) -> list[Poly]:
    """The expressions the guards constrain."""
    out = []
    for g in guards:
        if g[0] in ("zero", "nonzero", "u32"):
            out.append(ctx._by_id[g[1]])
        elif g[0] == "xnonzero":
            out.extend(ctx._by_id[x] for x in g[1:])
    return out


def solve(
    ctx: ExprContext,
    guards: Iterable[Guard],
    base: Assignment,
    rng: random.Random,
    *,
    attempts: int = 6,
    time_budget_s: float = 0.5,
) -> Assignment | None:
    """An assignment under which every guard holds, starting from ``base``; None if none
    was found within ``attempts`` and ``time_budget_s`` (seconds).

    The budget is counted in solver work (`RLIMIT_PER_S`: each attempt's query gets an equal
    share), so that the same guards, base and ``rng`` state give the same answer whatever the
    machine's load; the wall clock stops a solve only at `WALL_SLACK` times the budget, and
    never past the request's deadline (`tasmopt.deadline.current`).
    ``base`` is not modified. Variables no guard constrains keep their ``base`` values, so
    the witness stays as random as the guards allow.
    """
    guards = sorted(set(guards))
    if any(g[0] == "false" for g in guards):
        return None
    deadline = time.perf_counter() + WALL_SLACK * time_budget_s
    rlimit = max(1, int(time_budget_s * RLIMIT_PER_S / max(1, attempts)))
    request = current_deadline()  # the request's, where a caller made it active
    if request is not None:
        deadline = min(deadline, time.perf_counter() + request.remaining())
    a = base.copy()
    zctx: Any = None  # one z3 context for this solve's queries (see `_Encoder`)
    for attempt in range(attempts):
        if time.perf_counter() > deadline:
            break
        if attempt:
            a = base.copy()
            _shake(ctx, guards, a, rng, small=attempt % 2 == 1)
        if _propagate(ctx, guards, a, rng, deadline):
            return a
        if zctx is None:
            zctx = _context()
        found = _smt(ctx, guards, a, rng, deadline, rlimit, zctx)
        if found is not None and not violated(ctx, guards, found):
            return found
    return None


def passing_witness(
    ctx: ExprContext,
    guards: Iterable[Guard],
    w: Witness,
    rng: random.Random,
    *,
    time_budget_s: float,
) -> Witness | None:
    """``w`` itself if it passes every guard, else ``w`` with the guards solved (a directed
    witness), else None (``time_budget_s`` seconds for `solve`)."""
    guards = set(guards)
    if not violated(ctx, guards, w.assignment()):
        return w
    solved = solve(ctx, guards, w.assignment(), rng, time_budget_s=time_budget_s)
    return None if solved is None else w.with_assignment(solved)


def singular_points(ctx: ExprContext, polys: Iterable[Poly], limit: int = 8) -> list[Poly]:
    """Expressions whose roots are the *singular points* of ``polys``: where an opaque part
    behaves unlike at a random point, so that two programs that agree on random witnesses
    may still differ there. A witness on which one of them is zero (solve it with an extra
    ``("zero", id)`` guard) exercises that point.

    In order: the bases of powers (``(y+c)^(p-1)`` is 1 except at ``y = -c``; a monomial
    with an exponent above 16 too), the operands of inverses, ``div_mod``, ``eq`` (its
    difference) and ``lt`` (``a - b`` and ``a - b - 1``), then the differences of every two
    initial-RAM cell addresses (two reads that coincide there). At most ``limit``
    expressions, none constant, each of ``q`` and ``-q`` once; every atom reachable from
    ``polys`` (`ExprContext.depends_on`) is looked at. Sources: design §2 (singular-point witnesses); Triton VM spec §5 for the
    instructions' edge cases (``pow``, ``invert``, ``div_mod``, ``eq``, ``lt``).
    """
    polys = list(polys)
    out: list[Poly] = []
    seen: set[int] = set()

    def add(q: Poly) -> None:
        q = ctx.canonical_sign(q)  # q and -q have the same roots
        if not q.is_const and q.id not in seen and len(out) < limit:
            seen.add(q.id)
            out.append(q)

    atoms = sorted(ctx.depends_on(polys))
    arg_lists = {
        aid: [ctx._by_id[v] for t, v in ctx.atom_keys[aid][1:] if t == "p"]
        for aid in atoms
        if ctx.atom_keys[aid][0] != "var"
    }
    for aid in atoms:  # bases of powers first: the class the degree bound guards
        if ctx.atom_keys[aid][0] in ("pow", "powv"):
            add(arg_lists[aid][0])
    for p in polys + [a for args in arg_lists.values() for a in args]:
        for mono in p.terms:
            for aid, e in mono:
                if e > 16:
                    add(ctx.poly({((aid, 1),): 1}))  # the atom itself
    for aid in atoms:
        name, args = ctx.atom_keys[aid][0], arg_lists.get(aid, [])
        if name in ("inv", "iszero"):
            add(args[0])
        elif name in ("div", "mod"):
            add(args[1])
            add(args[0])
        elif name == "lt":
            add(ctx.sub(args[0], args[1]))
            add(ctx.sub(ctx.sub(args[0], args[1]), ctx.one))
    cells = ctx.read_addresses(polys)
    for i, a in enumerate(cells):
        for b in cells[i + 1 :]:
            add(ctx.sub(a, b))
    return out


# -- propagation --------------------------------------------------------------------------


def _propagate(
    ctx: ExprContext, guards: list[Guard], a: Assignment, rng: random.Random, deadline: float
) -> bool:
    pinned: set[int] = set()
    for _ in range(3 * len(guards) + 3):
        if time.perf_counter() > deadline:
            return False
        bad = violated(ctx, guards, a)
        if not bad:
            return True
        progress = False
        for g in bad:
            if _repair(ctx, g, a, rng, pinned):
                progress = True
                break  # re-evaluate: one repair can fix or break others
        if not progress:
            return False
    return not violated(ctx, guards, a)


def _repair(
    ctx: ExprContext, g: Guard, a: Assignment, rng: random.Random, pinned: set[int]
) -> bool:
    kind = g[0]
    if kind == "sponge_initialized":
        a.sponge = [rng.randrange(P) for _ in range(16)]
        return True
    if kind == "false":
        return False
    polys = [ctx._by_id[x] for x in g[1:]] if kind == "xnonzero" else [ctx._by_id[g[1]]]
    for p in polys:
        for aid in _linear_vars(ctx, p, pinned):
            ev = Evaluator(ctx, a)
            try:
                q, r = _split_linear(ctx, ev, p, aid)
            except Unevaluable:
                continue
            if q == 0:
                continue
            if kind == "zero":
                target = 0
            elif kind == "u32":
                target = rng.choice((rng.randrange(16), rng.randrange(256), rng.randrange(_U32)))
            else:  # nonzero, xnonzero: anything but the value that makes it zero
                target = rng.randrange(1, P)
            value = (target - r) * pow(q, P - 2, P) % P
            if _assign(ctx, a, aid, value):
                pinned.add(aid)
                return True
    return False


def _linear_vars(ctx: ExprContext, p: Poly, pinned: set[int]) -> list[int]:
    """Free variables of ``p`` that occur with exponent 1 and not inside an opaque operation
    of ``p``, unpinned ones first."""
    inside: set[int] = set()
    direct: dict[int, int] = {}
    for mono in p.terms:
        for aid, e in mono:
            direct[aid] = max(direct.get(aid, 0), e)
            key = ctx.atom_keys[aid]
            if key[0] != "var":
                inside |= ctx.atoms_of([ctx._by_id[v] for t, v in key[1:] if t == "p"])
            elif key[1] == "mem0":
                inside |= ctx.atoms_of([ctx._by_id[key[2]]])
    out = [
        aid
        for aid, e in direct.items()
        if e == 1
        and aid not in inside
        and ctx.atom_keys[aid][0] == "var"
        and ctx.atom_keys[aid][1] in _FREE_KINDS
    ]
    out.sort(key=lambda aid: (aid in pinned, aid))
    return out


def _split_linear(ctx: ExprContext, ev: Evaluator, p: Poly, aid: int) -> tuple[int, int]:
    """``p = q·v + r`` for the variable atom ``aid``: the values of q and r."""
    q = r = 0
    for mono, c in p.terms.items():
        t = c
        has = False
        for x, e in mono:
            if x == aid:
                has = True
                continue
            t = t * pow(ev.atom(x), e, P) % P
        if has:
            q += t
        else:
            r += t
    return q % P, r % P


def _assign(ctx: ExprContext, a: Assignment, aid: int, value: int) -> bool:
    key = ctx.atom_keys[aid]
    kind = key[1]
    if kind == "s":
        a.stack[key[2]] = value
    elif kind == "public":
        a.public[key[2]] = value
    elif kind == "secret":
        a.secret[key[2]] = value
    elif kind == "digest":
        d = a.digests.setdefault(key[2], [0] * 5)
        d[key[3]] = value
    elif kind == "sponge0":
        if a.sponge is None:
            a.sponge = [0] * 16
        a.sponge[key[2]] = value
    elif kind == "mem0":
        try:
            addr = Evaluator(ctx, a).value(ctx._by_id[key[2]])
        except Unevaluable:
            return False
        a.ram[addr] = value
    else:
        return False
    return True


def _shake(
    ctx: ExprContext, guards: list[Guard], a: Assignment, rng: random.Random, small: bool
) -> None:
    """Re-draw the variables the guards mention (small values on odd attempts: u32 paths)."""
    for aid in ctx.atoms_of(guard_polys(ctx, guards)):
        key = ctx.atom_keys[aid]
        if key[0] == "var" and key[1] in _FREE_KINDS:
            _assign(ctx, a, aid, rng.randrange(256) if small else rng.randrange(P))


# -- SMT ----------------------------------------------------------------------------------


def _smt(
    ctx: ExprContext,
    guards: list[Guard],
    a: Assignment,
    rng: random.Random,
    deadline: float,
    rlimit: int = 0,
    zctx: Any = None,
) -> Assignment | None:
    """One z3 query for ``guards`` from ``a``: a model's assignment, or None (unsat, out of
    resources: ``rlimit`` units, 0 for none, or past ``deadline``, `time.perf_counter`).
    ``zctx``: the z3 context to build it in (None: a new one)."""
    remaining = deadline - time.perf_counter()
    if remaining <= 0.01:
        return None
    try:
        import z3
    except ImportError:  # pragma: no cover - a pinned dependency
        return None
    zctx = zctx if zctx is not None else _context()
    enc = _Encoder(ctx, a, z3, zctx)
    solver = z3.Solver(ctx=zctx)
    solver.set("timeout", max(10, int(remaining * 1000)))
    if rlimit:
        solver.set("rlimit", rlimit)
    solver.set("random_seed", rng.randrange(1 << 30))
    try:
        for g in guards:
            solver.add(enc.guard(g))
        for c in enc.side:
            solver.add(c)
        for aid in enc.pinned & set(enc.vars):
            solver.add(enc.vars[aid] == enc.const(enc._ev.atom(aid)))
    except _Frozen:
        return None
    if solver.check() != z3.sat:
        return None
    model = solver.model()
    out = a.copy()
    for aid, bv in enc.vars.items():
        val = model.eval(bv, model_completion=True).as_long() % P
        _assign(ctx, out, aid, val)
    return out


def _context() -> Any:
    """A new z3 context (None without z3)."""
    try:
        import z3
    except ImportError:  # pragma: no cover - a pinned dependency
        return None
    _keep_contexts_on_the_heap()
    return z3.Context()


#: glibc `mallopt` parameters (malloc.h) and the values `_keep_contexts_on_the_heap` sets.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD = 32 << 20
_TRIM_THRESHOLD = 64 << 20


@lru_cache(maxsize=1)
def _keep_contexts_on_the_heap() -> bool:
    """Once per process, on glibc: serve allocations up to `_MMAP_THRESHOLD` bytes from the
    heap and keep up to `_TRIM_THRESHOLD` bytes free at its top. A z3 context allocates a
    block of 4-16 MB; past glibc's default (dynamic) thresholds each one was mapped afresh
    and its pages faulted in: 6 ms a context, against 0.4 ms on the heap (measured in a
    compile process after coin's; lock_multisig's full compile after coin's took 3.1 s with
    a context per solve, 1.3 s with this). Elsewhere (musl, macOS) nothing is changed.
    Returns whether the setting was made."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)
    )


class _Frozen(Exception):
    pass


class _Encoder:
    """Guards as z3 constraints over integers in ``[0, p)`` (field operations reduced mod p;
    u32 bit operations through 32-bit bit-vectors). Integer arithmetic is far faster in z3
    than 128-bit bit-vector remainders for these mostly linear or low-degree guards."""

    # z3's Python API is untyped: its expressions are `Any` here
    def __init__(self, ctx: ExprContext, a: Assignment, z3: Any, zctx: Any) -> None:
        self.ctx, self.a, self.z3, self.zctx = ctx, a, z3, zctx
        self.vars: dict[int, object] = {}
        self.side: list[Any] = []
        self._memo: dict[int, object] = {}
        # the same polynomial (a guard's operand, a shared subterm) and the same constant
        # recur across a path's guards: each is encoded once (building z3 terms through its
        # Python API was most of the solver's time on std.crypto.lut_sponge)
        self._polys: dict[int, object] = {}
        self._consts: dict[int, object] = {}
        self._p = z3.IntVal(P, zctx)
        self._ev = Evaluator(ctx, a)
        #: free variables an operation concretized at its current value depends on: they
        #: keep their current values in the query, so that the concretization stays true
        self.pinned: set[int] = set()

    def const(self, v: int) -> Any:
        v %= P
        got = self._consts.get(v)
        if got is None:
            got = self._consts[v] = self.z3.IntVal(v, self.zctx)
        return got

    def poly_id(self, pid: int) -> Any:
        """The encoding of the context's polynomial ``pid`` (memoized)."""
        got = self._polys.get(pid)
        if got is None:
            got = self._polys[pid] = self.poly(self.ctx._by_id[pid])
        return got

    def guard(self, g: Guard) -> Any:
        z3 = self.z3
        kind = g[0]
        if kind == "sponge_initialized":
            if self.a.sponge is None:
                self.a.sponge = [0] * 16
            return z3.BoolVal(True, self.zctx)
        if kind == "xnonzero":
            return z3.Or(*[self.poly_id(x) != 0 for x in g[1:]])
        v = self.poly_id(g[1])
        if kind == "zero":
            return v == 0
        if kind == "nonzero":
            return v != 0
        if kind == "u32":
            return v < _U32
        return z3.BoolVal(False, self.zctx)

    # Terms are built with z3's C API on the operands' ASTs: its Python operators coerce and
    # re-check both operands' sorts on every call (0.9 s of std.crypto.lut_sponge's 4 s in
    # the solver, against 1.7 s in z3's own checks).
    def mul(self, x: Any, y: Any) -> Any:
        return self._mod(self._arith(self.z3.Z3_mk_mul, x, y))

    def _add(self, x: Any, y: Any) -> Any:
        return self._arith(self.z3.Z3_mk_add, x, y)

    def _mod(self, x: Any) -> Any:
        z3, zctx = self.z3, self.zctx
        return z3.ArithRef(z3.Z3_mk_mod(zctx.ref(), x.as_ast(), self._p.as_ast()), zctx)

    def _arith(self, make: Any, x: Any, y: Any) -> Any:
        """``make`` (``Z3_mk_add``/``Z3_mk_mul``) of the two terms, in this query's context."""
        z3, zctx = self.z3, self.zctx
        return z3.ArithRef(make(zctx.ref(), 2, (z3.Ast * 2)(x.as_ast(), y.as_ast())), zctx)

    def poly(self, p: Poly) -> Any:
        total = None
        for mono, c in sorted(p.terms.items()):
            t = self.const(c) if c != 1 or not mono else None
            for aid, e in mono:
                if e > 16:
                    raise _Frozen
                base = self.atom(aid)
                for _ in range(e):
                    t = base if t is None else self.mul(t, base)
            total = t if total is None else self._add(total, t)
        if total is None:
            return self.const(0)
        if len(p.terms) == 1 and next(iter(p.terms.values())) == 1:
            return total  # one atom or one product: already in [0, p)
        return self._mod(total)

    def atom(self, aid: int) -> Any:
        got = self._memo.get(aid)
        if got is not None:
            return got
        z3 = self.z3
        key = self.ctx.atom_keys[aid]
        if key[0] == "var" and key[1] in ("s", "public", "secret", "digest", "sponge0"):
            v = z3.Int(f"a{aid}", self.zctx)
            self.side += [v >= 0, v < P]
            self.vars[aid] = v
        else:
            v = self._op(key)
        self._memo[aid] = v
        return v

    def _u32(self, x: Any) -> Any:
        return self.z3.Int2BV(x, 32)

    def _op(self, key: AtomKey) -> Any:
        z3 = self.z3
        name = key[0]
        args = key[1:]

        def arg(i: int) -> Any:
            tag, val = args[i]
            return self.poly_id(val) if tag == "p" else self.const(val)

        one, zero = self.const(1), self.const(0)
        if name == "iszero":
            return z3.If(arg(0) == 0, one, zero)
        if name == "inv":
            x = arg(0)
            y = z3.Int(f"inv{len(self.side)}", self.zctx)
            self.side += [y >= 0, y < P, z3.Implies(x != 0, self.mul(x, y) == 1)]
            return y
        if name == "split_hi":
            return arg(0) / _U32
        if name == "split_lo":
            return arg(0) % _U32
        if name == "lt":
            return z3.If(arg(0) < arg(1), one, zero)
        if name in ("and", "xor"):
            x, y = self._u32(arg(0)), self._u32(arg(1))
            return z3.BV2Int(x & y if name == "and" else x ^ y)
        if name == "half":
            return arg(0) / 2
        if name in ("div", "mod"):
            n, d = arg(0), arg(1)
            return n / d if name == "div" else n % d
        if name == "mul":
            return self.mul(arg(0), arg(1))
        if name == "pow" and args[1][0] == "i" and args[1][1] <= 16:
            t, b = one, arg(0)
            for _ in range(args[1][1]):
                t = self.mul(t, b)
            return t
        # Tip5, Merkle, aliasing RAM reads, mem0, log_2_floor, ...: concretized at the
        # current value, and every free variable it depends on is pinned to its current
        # value in the query (`_smt`), so that a model keeps the concretization true
        # (unpinned, a lookup-table S-box read at a computed address gave 242 of 305 models
        # that the evaluation then rejected, on std.crypto.lut_sponge). The model is still
        # re-checked by evaluation.
        try:
            aid = self.ctx._atoms[key]
            value = self.const(self._ev.atom(aid))
        except (KeyError, Unevaluable):
            raise _Frozen from None
        self.pinned |= self.ctx.depends_on([self.ctx.poly({((aid, 1),): 1})])
        return value
