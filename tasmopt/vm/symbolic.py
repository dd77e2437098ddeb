"""Symbolic execution of straight-line TASM (design §2, verifier layer 1).

Runs a list of instructions on an op stack of canonical expressions (`tasmopt.vm.expr`)
instead of numbers, starting from an unknown entry stack (st_k at entry is the variable
``s k``; the stack is materialized lazily as deeper elements are touched), unknown input
streams, unknown RAM and an unknown sponge. The result records every observable of design §2:
the op stack, public output, how much input of each kind was consumed, the RAM writes, the
sponge state, and the failure condition as a set of guards (the run fails iff some guard is
violated). Two runs in one `ExprContext` with equal observables are equivalent for every
entry state: that is a proof. Semantics follow Triton VM spec §5.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tasmopt.isa import IsaVariant, P, instruction_set, names_where
from tasmopt.tasm.program import Instr
from tasmopt.vm import xfield
from tasmopt.vm.expr import ExprContext, Guard, Poly

__all__ = ["SymbolicRun", "run_symbolic", "continue_symbolic", "CONTROL_FLOW"]

#: Instructions a straight-line fragment cannot contain (derived from the ISA table).
CONTROL_FLOW = names_where(lambda i: i.is_control_flow)

_U32 = 1 << 32


@dataclass
class SymbolicRun:
    """The observable outcome of a symbolic run.

    Attributes:
        stack: materialized op stack, bottom..top. Below it lie the untouched entry elements
            ``s base``, ``s base+1``, ... (``s 0`` was st0 at entry).
        base: number of entry elements materialized.
        delta: net change of the op stack length.
        low_water: lowest ``delta`` any shrinking instruction asked for (spec §4: TooShallow
            iff entry length + low_water < 16); 0 if the fragment never shrinks the stack.
        outputs: values written by ``write_io``, in order.
        consumed: tokens consumed per stream: ``public``, ``secret``, ``digests``.
        guards: the failure condition: the run fails iff one guard is violated.
        ram: RAM writes in order, ``(address, value)``.
        sponge: the final sponge state (16 values), or None if the fragment leaves the entry
            sponge untouched.
        unsupported: the first instruction that cannot run symbolically (control flow).
    """

    ctx: ExprContext
    stack: list[Poly] = field(default_factory=list)
    base: int = 0
    delta: int = 0
    low_water: int = 0
    outputs: list[Poly] = field(default_factory=list)
    consumed: dict[str, int] = field(
        default_factory=lambda: {"public": 0, "secret": 0, "digests": 0}
    )
    guards: set[Guard] = field(default_factory=set)
    ram: list[tuple[Poly, Poly]] = field(default_factory=list)
    sponge: tuple[Poly, ...] | None = None
    sponge_initialized: bool = False
    unsupported: str | None = None

    def fork(self) -> SymbolicRun:
        """An independent copy (for exploring two branches from one state)."""
        return replace(
            self,
            stack=list(self.stack),
            outputs=list(self.outputs),
            consumed=dict(self.consumed),
            guards=set(self.guards),
            ram=list(self.ram),
        )

    # -- stack helpers --------------------------------------------------------------------
    def ensure(self, n: int) -> None:
        """Materialize entry elements until at least ``n`` values are on the stack."""
        missing = n - len(self.stack)
        if missing > 0:
            deeper = [self.ctx.var("s", self.base + k) for k in range(missing)]
            self.stack[:0] = reversed(deeper)
            self.base += missing

    def pop(self) -> Poly:
        self.ensure(1)
        return self.stack.pop()

    def push(self, v: Poly) -> None:
        self.stack.append(v)

    def peek(self, i: int) -> Poly:
        self.ensure(i + 1)
        return self.stack[-1 - i]

    def set_at(self, i: int, v: Poly) -> None:
        self.ensure(i + 1)
        self.stack[-1 - i] = v

    def top_down(self, depth: int) -> list[Poly]:
        """The stack from the top down to ``depth`` elements, entry variables filled in."""
        out = list(reversed(self.stack[-depth:] if depth else []))
        k = self.base
        while len(out) < depth:
            out.append(self.ctx.var("s", k))
            k += 1
        return out

    # -- guards ---------------------------------------------------------------------------
    def guard_u32(self, v: Poly) -> None:
        if v.is_const:
            if v.const >= _U32:
                self.guards.add(("false",))
        else:
            self.guards.add(("u32", v.id))

    def guard_nonzero(self, v: Poly) -> None:
        if v.is_const:
            if v.const == 0:
                self.guards.add(("false",))
        else:
            self.guards.add(("nonzero", self.ctx.canonical_sign(v).id))

    def guard_zero(self, v: Poly) -> None:
        """The run fails unless ``v == 0`` (``assert``, ``assert_vector``)."""
        if v.is_const:
            if v.const != 0:
                self.guards.add(("false",))
        else:
            self.guards.add(("zero", self.ctx.canonical_sign(v).id))

    def guard_sponge(self) -> None:
        if not self.sponge_initialized:
            self.guards.add(("sponge_initialized",))

    # -- RAM --------------------------------------------------------------------------------
    def read(self, addr: Poly) -> Poly:
        ctx = self.ctx
        for k in range(len(self.ram) - 1, -1, -1):
            wa, wv = self.ram[k]
            if wa is addr:
                return wv
            if not _provably_distinct(ctx, wa, addr):
                history = tuple(x for pair in self.ram[: k + 1] for x in pair)
                return ctx.op("mem", addr, *history)  # may alias: not algebraic
        return ctx.var("mem0", addr.id)

    def write(self, addr: Poly, value: Poly) -> None:
        self.ram.append((addr, value))

    def ram_effect(self, hidden: frozenset[int] = frozenset()) -> tuple[Any, ...]:
        """A normal form of the RAM writes: shadowed writes and write-backs of unchanged
        initial values dropped; sorted when all addresses are provably distinct. Writes to
        ``hidden`` cells (constant addresses whose final values are not observable) are left
        out: a write at another address lands either in a hidden cell or in a cell no hidden
        write touches, so the rest still decides every observable cell."""
        ctx = self.ctx
        entries: list[tuple[Poly, Poly]] = []
        for addr, value in self.ram:
            if hidden and addr.is_const and addr.const in hidden:
                continue
            for j in range(len(entries) - 1, -1, -1):
                if entries[j][0] is addr:
                    if all(_provably_distinct(ctx, e[0], addr) for e in entries[j + 1 :]):
                        del entries[j]
                    break
            entries.append((addr, value))
        entries = [
            (a, v)
            for a, v in entries
            if not (
                v is ctx.var("mem0", a.id)
                and all(e[0] is a or _provably_distinct(ctx, e[0], a) for e in entries)
            )
        ]
        if all(
            _provably_distinct(ctx, a, b)
            for i, (a, _) in enumerate(entries)
            for b, _ in entries[i + 1 :]
        ):
            entries.sort(key=lambda e: e[0].key)
        return tuple((a.id, v.id) for a, v in entries)

    # -- sponge -----------------------------------------------------------------------------
    def sponge_state(self) -> tuple[Poly, ...]:
        if self.sponge is None:
            self.sponge = tuple(self.ctx.var("sponge0", k) for k in range(16))
        return self.sponge


def _provably_distinct(ctx: ExprContext, a: Poly, b: Poly) -> bool:
    d = ctx.sub(a, b)
    return d.is_const and d.const != 0


def _permute(ctx: ExprContext, state: Sequence[Poly]) -> tuple[Poly, ...]:
    """Tip5 on symbolic input: folded when constant, else 16 opaque (algebraic) outputs."""
    if all(v.is_const for v in state):
        from tasmopt.vm.tip5 import permutation

        return tuple(ctx.const(x) for x in permutation([v.const for v in state]))
    return tuple(ctx.op("tip5", *state, k, algebraic=True) for k in range(16))


def _xfe(run: SymbolicRun, top: int) -> list[Poly]:
    """The XFE at st_top..st_top+2 as [c0, c1, c2]."""
    return [run.peek(top), run.peek(top + 1), run.peek(top + 2)]


def _xmul(ctx: ExprContext, a: Sequence[Poly], b: Sequence[Poly]) -> list[Poly]:
    """XFE product mod x^3 - x + 1 (Triton VM spec §2)."""
    m, ad, sb = ctx.mul, ctx.add, ctx.sub
    a0, a1, a2 = a
    b0, b1, b2 = b
    r0 = sb(sb(m(a0, b0), m(a2, b1)), m(a1, b2))
    r1 = ad(ad(sb(ad(m(a1, b0), m(a0, b1)), m(a2, b2)), m(a2, b1)), m(a1, b2))
    r2 = ad(ad(ad(m(a2, b0), m(a1, b1)), m(a0, b2)), m(a2, b2))
    return [r0, r1, r2]


def _push_xfe(run: SymbolicRun, x: Sequence[Poly]) -> None:
    run.push(x[2])
    run.push(x[1])
    run.push(x[0])


def _u32_binop(
    run: SymbolicRun, name: str, fn: Callable[[int, int], int], commutative: bool
) -> None:
    ctx = run.ctx
    a, b = run.pop(), run.pop()
    run.guard_u32(a)
    run.guard_u32(b)
    if a.is_const and b.is_const and a.const < _U32 and b.const < _U32:
        run.push(ctx.const(fn(a.const, b.const)))
        return
    if commutative:
        a, b = sorted((a, b), key=lambda p: p.key)
    run.push(ctx.op(name, a, b))


def _step(run: SymbolicRun, ins: Instr) -> None:  # noqa: C901 - one branch per instruction
    ctx = run.ctx
    name = ins.name
    # every argument here is an int: labels (`call`) are control flow, which never gets here
    arg = ins.arg if isinstance(ins.arg, int) else 0
    if name == "push":
        run.push(ctx.const(arg))
    elif name == "pop":
        run.ensure(arg)
        del run.stack[-arg:]
    elif name == "dup":
        run.push(run.peek(arg))
    elif name == "swap":
        run.ensure(arg + 1)
        s = run.stack
        s[-1], s[-1 - arg] = s[-1 - arg], s[-1]
    elif name == "pick":
        run.ensure(arg + 1)
        run.push(run.stack.pop(-1 - arg))
    elif name == "place":
        run.ensure(arg + 1)
        v = run.stack.pop()
        run.stack.insert(len(run.stack) - arg, v)
    elif name == "nop":
        pass
    elif name == "divine":
        k = run.consumed["secret"]
        for j in range(arg):
            run.push(ctx.var("secret", k + j))
        run.consumed["secret"] = k + arg
    elif name == "read_io":
        k = run.consumed["public"]
        for j in range(arg):
            run.push(ctx.var("public", k + j))
        run.consumed["public"] = k + arg
    elif name == "write_io":
        for _ in range(arg):
            run.outputs.append(run.pop())
    elif name == "add":
        a, b = run.pop(), run.pop()
        run.push(ctx.add(a, b))
    elif name == "addi":
        run.push(ctx.add(run.pop(), ctx.const(arg)))
    elif name == "mul":
        a, b = run.pop(), run.pop()
        run.push(ctx.mul(a, b))
    elif name == "eq":
        a, b = run.pop(), run.pop()
        d = ctx.sub(a, b)
        if d.is_const:
            run.push(ctx.const(1 if d.const == 0 else 0))
        else:
            run.push(ctx.op("iszero", ctx.canonical_sign(d)))
    elif name == "invert":
        a = run.pop()
        run.guard_nonzero(a)
        if a.is_const:
            run.push(ctx.const(pow(a.const, P - 2, P) if a.const else 0))
        else:
            run.push(ctx.op("inv", a, algebraic=True))
    elif name == "split":
        a = run.pop()
        if a.is_const:
            run.push(ctx.const(a.const >> 32))
            run.push(ctx.const(a.const & 0xFFFFFFFF))
        else:
            run.push(ctx.op("split_hi", a))
            run.push(ctx.op("split_lo", a))
    elif name == "lt":
        _u32_binop(run, "lt", lambda a, b: int(a < b), False)
    elif name == "and":
        _u32_binop(run, "and", lambda a, b: a & b, True)
    elif name == "xor":
        _u32_binop(run, "xor", lambda a, b: a ^ b, True)
    elif name in ("log_2_floor", "pop_count"):
        a = run.pop()
        run.guard_u32(a)
        if name == "log_2_floor":
            run.guard_nonzero(a)
        if a.is_const and a.const < _U32 and (a.const or name == "pop_count"):
            bits = a.const.bit_length() - 1 if name == "log_2_floor" else bin(a.const).count("1")
            run.push(ctx.const(bits))
        else:
            run.push(ctx.op(name, a))
    elif name == "pow":
        base, e = run.pop(), run.pop()
        run.guard_u32(e)
        if e.is_const and e.const < _U32:
            run.push(ctx.pow_const(base, e.const))
        else:
            run.push(ctx.op("powv", base, e))
    elif name == "div_mod":
        n, d = run.pop(), run.pop()
        run.guard_u32(n)
        run.guard_u32(d)
        run.guard_nonzero(d)
        if n.is_const and d.is_const and n.const < _U32 and 0 < d.const < _U32:
            q, r = divmod(n.const, d.const)
            run.push(ctx.const(q))
            run.push(ctx.const(r))
        else:
            run.push(ctx.op("div", n, d))
            run.push(ctx.op("mod", n, d))
    elif name == "assert":
        run.guard_zero(ctx.sub(run.peek(0), ctx.one))
        run.pop()
    elif name == "assert_vector":
        for i in range(5):
            run.guard_zero(ctx.sub(run.peek(i), run.peek(i + 5)))
        run.ensure(5)
        del run.stack[-5:]
    elif name == "xx_add" or name == "xx_mul":
        xa = [run.pop() for _ in range(3)]
        xb = [run.pop() for _ in range(3)]
        xr = [ctx.add(x, y) for x, y in zip(xa, xb)] if name == "xx_add" else _xmul(ctx, xa, xb)
        _push_xfe(run, xr)
    elif name == "xb_mul":
        scalar = run.pop()
        xa = [run.pop() for _ in range(3)]
        _push_xfe(run, [ctx.mul(scalar, c) for c in xa])
    elif name == "x_invert":
        xa = [run.pop() for _ in range(3)]
        if all(c.is_const for c in xa):
            vals = (xa[0].const, xa[1].const, xa[2].const)
            if any(vals):
                _push_xfe(run, [ctx.const(c) for c in xfield.inv(vals)])
            else:
                run.guards.add(("false",))
                _push_xfe(run, xa)
        else:
            run.guards.add(("xnonzero",) + tuple(c.id for c in xa))
            _push_xfe(run, [ctx.op("xinv", *xa, k, algebraic=True) for k in range(3)])
    elif name == "read_mem":
        p = run.pop()
        for k in range(arg):
            run.push(run.read(ctx.add(p, ctx.const(-k))))
        run.push(ctx.add(p, ctx.const(-arg)))
    elif name == "write_mem":
        p = run.pop()
        for k in range(arg):
            run.write(ctx.add(p, ctx.const(k)), run.pop())
        run.push(ctx.add(p, ctx.const(arg)))
    elif name == "hash":
        xs = [run.pop() for _ in range(10)]
        out = _permute(ctx, xs + [ctx.one] * 6)
        for k in range(4, -1, -1):
            run.push(out[k])
    elif name == "sponge_init":
        run.sponge = tuple([ctx.zero] * 16)
        run.sponge_initialized = True
    elif name == "sponge_absorb":
        run.guard_sponge()
        state = run.sponge_state()
        xs = [run.pop() for _ in range(10)]
        run.sponge = _permute(ctx, xs + list(state[10:]))
    elif name == "sponge_absorb_mem":
        run.guard_sponge()
        state = run.sponge_state()
        p = run.pop()
        vs = [run.read(ctx.add(p, ctx.const(k))) for k in range(10)]
        run.sponge = _permute(ctx, vs + list(state[10:]))
        run.ensure(4)  # the new st1..st4 (st0 is pushed next) are v0..v3
        run.stack[-4:] = [vs[3], vs[2], vs[1], vs[0]]
        run.push(ctx.add(p, ctx.const(10)))
    elif name == "sponge_squeeze":
        run.guard_sponge()
        state = run.sponge_state()
        for k in range(9, -1, -1):
            run.push(state[k])
        run.sponge = _permute(ctx, state)
    elif name in ("merkle_step", "merkle_step_mem"):
        node = run.peek(5)
        run.guard_u32(node)
        if name == "merkle_step":
            k = run.consumed["digests"]
            sib = [ctx.var("digest", k, j) for j in range(5)]
            run.consumed["digests"] = k + 1
        else:
            ptr = run.peek(7)
            sib = [run.read(ctx.add(ptr, ctx.const(j))) for j in range(5)]
            run.set_at(7, ctx.add(ptr, ctx.const(5)))
        cur = [run.peek(j) for j in range(5)]
        if node.is_const and node.const < _U32:
            left, right = (cur, sib) if node.const % 2 == 0 else (sib, cur)
            h = _permute(ctx, left + right + [ctx.one] * 6)[:5]
            half = ctx.const(node.const // 2)
        else:
            h = tuple(ctx.op("merkle", node, *cur, *sib, j) for j in range(5))
            half = ctx.op("half", node)
        for j in range(5):
            run.set_at(j, h[j])
        run.set_at(5, half)
    elif name in ("xx_dot_step", "xb_dot_step"):
        a, b = run.peek(0), run.peek(1)
        acc = _xfe(run, 2)
        if name == "xx_dot_step":
            rhs: list[Poly] = []
            left = []
            for j in range(3):  # reads interleaved a, b, a+1, b+1, a+2, b+2
                rhs.append(run.read(ctx.add(a, ctx.const(j))))
                left.append(run.read(ctx.add(b, ctx.const(j))))
            prod = _xmul(ctx, rhs, left)
            step_a = 3
        else:
            scalar = run.read(a)
            left = [run.read(ctx.add(b, ctx.const(j))) for j in range(3)]
            prod = [ctx.mul(scalar, c) for c in left]
            step_a = 1
        new = [ctx.add(x, y) for x, y in zip(acc, prod)]
        run.set_at(0, ctx.add(a, ctx.const(step_a)))
        run.set_at(1, ctx.add(b, ctx.const(3)))
        for j in range(3):
            run.set_at(2 + j, new[j])
    elif name in ("b_horner_step", "x_horner_step"):
        p = run.peek(5)
        x = _xfe(run, 0)
        acc = _xfe(run, 7)
        if name == "b_horner_step":
            c = [run.read(p), ctx.zero, ctx.zero]
            step = 1
        else:
            hi = run.read(p)
            mid = run.read(ctx.add(p, ctx.const(-1)))
            lo = run.read(ctx.add(p, ctx.const(-2)))
            c = [lo, mid, hi]
            step = 3
        new = [ctx.add(u, v) for u, v in zip(_xmul(ctx, acc, x), c)]
        for j in range(3):
            run.set_at(7 + j, new[j])
        run.set_at(5, ctx.add(p, ctx.const(-step)))
    else:  # control flow and anything unknown
        run.unsupported = name


def run_symbolic(
    instrs: Sequence[Instr], ctx: ExprContext, isa: IsaVariant = "release"
) -> SymbolicRun:
    """Execute a straight-line fragment symbolically.

    Args:
        instrs: the fragment (no labels); control flow stops the run with ``unsupported`` set.
        ctx: interning context; runs to be compared must share it.
        isa: instruction-set variant, for stack deltas.

    Returns:
        SymbolicRun with the observables; ``unsupported`` names the first instruction that
        could not be executed, in which case the other fields are partial.
    """
    return continue_symbolic(SymbolicRun(ctx), instrs, isa)


def continue_symbolic(
    run: SymbolicRun, instrs: Sequence[Instr], isa: IsaVariant = "release"
) -> SymbolicRun:
    """Run ``instrs`` on after ``run`` (mutated and returned): ``run_symbolic(a + b)`` equals
    ``continue_symbolic(run_symbolic(a), b)`` when ``a`` runs to its end. A run that stopped
    at an unsupported instruction stays stopped."""
    if run.unsupported is not None:
        return run
    table = instruction_set(isa)
    for ins in instrs:
        if ins.name in CONTROL_FLOW or ins.name not in table:
            run.unsupported = ins.name
            break
        d = table[ins.name].stack_delta(ins.arg if isinstance(ins.arg, int) else None)
        if d < 0:
            run.low_water = min(run.low_water, run.delta + d)
        _step(run, ins)
        if run.unsupported:
            break
        run.delta += d
    return run
