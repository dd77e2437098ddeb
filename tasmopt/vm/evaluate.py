"""Concrete evaluation of symbolic expressions (`tasmopt.vm.expr`) under an assignment.

The guard solver (`tasmopt.vm.guards`) and the cross-check of the symbolic semantics against
the simulator both need the value an expression takes in one entry state. An `Assignment`
gives every free variable of the symbolic executor a value: entry stack elements ``s k``,
input tokens, secret digests, the entry sponge state and initial RAM (``mem0`` at a
*concrete* address, so two reads that land on one address agree). Opaque operations are
evaluated with the VM's own semantics (Triton VM spec §5): `split`, `lt`, `and`, `xor`,
`div_mod`, `pow`, inverses, Tip5, Merkle steps and RAM reads through possibly aliasing
writes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tasmopt.isa import P
from tasmopt.vm import xfield
from tasmopt.vm.expr import AtomKey, ExprContext, Poly

__all__ = ["Assignment", "Evaluator"]

_U32 = 1 << 32


@dataclass
class Assignment:
    """Values of the symbolic executor's free variables (all canonical, in ``[0, p)``).

    Attributes:
        stack: entry op stack by depth (``stack[k]`` is st_k at entry).
        public, secret: input tokens by position in their stream.
        digests: secret digests by position, 5 words each.
        sponge: the 16-word entry sponge state (None: the sponge is uninitialised).
        ram: initial RAM at addresses that were chosen explicitly.
        fill: initial RAM everywhere else, ``address -> value``.
    """

    stack: dict[int, int] = field(default_factory=dict)
    public: dict[int, int] = field(default_factory=dict)
    secret: dict[int, int] = field(default_factory=dict)
    digests: dict[int, list[int]] = field(default_factory=dict)
    sponge: list[int] | None = None
    ram: dict[int, int] = field(default_factory=dict)
    fill: Callable[[int], int] = lambda addr: 0

    def copy(self) -> Assignment:
        return Assignment(
            dict(self.stack),
            dict(self.public),
            dict(self.secret),
            {k: list(v) for k, v in self.digests.items()},
            None if self.sponge is None else list(self.sponge),
            dict(self.ram),
            self.fill,
        )

    def ram_at(self, addr: int) -> int:
        v = self.ram.get(addr)
        return self.fill(addr) % P if v is None else v


class Evaluator:
    """Evaluates polynomials of one `ExprContext` under one `Assignment` (memoized per atom).

    Raises (from `value`): `Unevaluable` for an atom whose value is undefined in this state
    (e.g. a field inverse of zero): the run fails there, so the guards are violated anyway.
    """

    def __init__(
        self,
        ctx: ExprContext,
        assignment: Assignment,
        default: Callable[[AtomKey], int] | None = None,
    ) -> None:
        self.ctx = ctx
        self.a = assignment
        self._atoms: dict[int, int] = {}
        self._polys: dict[int, int] = {}
        self._default = default

    def value(self, p: Poly) -> int:
        """The value of ``p`` (an int in ``[0, p)``)."""
        v = self._polys.get(p.id)
        if v is not None:
            return v
        self._warm(p)
        return self._polys[p.id]

    def _warm(self, root: Poly) -> None:
        """Evaluate everything ``root`` depends on, children before parents, without
        recursion (a loop unrolled symbolically nests atoms thousands deep), in the order
        the recursive definition would (free variables draw their values in that order)."""
        todo: list[tuple[bool, Poly | int, bool]] = [(True, root, False)]
        while todo:
            is_poly, x, ready = todo.pop()
            if is_poly:
                assert isinstance(x, Poly)
                if x.id in self._polys:
                    continue
                if ready:
                    self._polys[x.id] = self._poly_value(x)
                    continue
                todo.append((True, x, True))
                aids = [aid for mono in x.terms for aid, _ in mono]
                todo.extend((False, aid, False) for aid in reversed(aids) if aid not in self._atoms)
            else:
                assert isinstance(x, int)
                if x in self._atoms:
                    continue
                key = self.ctx.atom_keys[x]
                if ready:
                    self._atoms[x] = self._atom(key) % P
                    continue
                todo.append((False, x, True))
                kids = self._children(key)
                todo.extend((True, c, False) for c in reversed(kids) if c.id not in self._polys)

    def _children(self, key: AtomKey) -> list[Poly]:
        """The polynomials an atom's value is computed from."""
        if key[0] == "var":
            return [self.ctx._by_id[key[2]]] if key[1] == "mem0" else []
        return [self.ctx._by_id[val] for tag, val in key[1:] if tag == "p"]

    def _poly_value(self, p: Poly) -> int:
        total = 0
        for mono, c in p.terms.items():
            t = c
            for aid, e in mono:
                t = t * pow(self.atom(aid), e, P) % P
            total += t
        return total % P

    def atom(self, aid: int) -> int:
        v = self._atoms.get(aid)
        if v is None:
            v = self._atom(self.ctx.atom_keys[aid]) % P
            self._atoms[aid] = v
        return v

    def _arg(self, a: tuple[Any, ...]) -> int:
        tag, val = a
        return self.value(self.ctx._by_id[val]) if tag == "p" else val

    def _atom(self, key: AtomKey) -> int:  # noqa: C901 - one branch per opaque operation
        a = self.a
        if key[0] == "var":
            kind = key[1]
            if kind == "s":
                return self._free(a.stack, key[2], key)
            if kind == "public":
                return self._free(a.public, key[2], key)
            if kind == "secret":
                return self._free(a.secret, key[2], key)
            if kind == "digest":
                d = a.digests.get(key[2])
                if d is None:
                    d = [self._fresh(key[:3] + (j,)) for j in range(5)]
                    a.digests[key[2]] = d
                return d[key[3]]
            if kind == "sponge0":
                if a.sponge is None:
                    a.sponge = [self._fresh(("var", "sponge0", j)) for j in range(16)]
                return a.sponge[key[2]]
            if kind == "mem0":
                return a.ram_at(self.value(self.ctx._by_id[key[2]]))
            raise Unevaluable(f"unknown variable {key}")
        name, args = key[0], [self._arg(x) for x in key[1:]]
        if name == "iszero":
            return int(args[0] == 0)
        if name == "inv":
            if args[0] == 0:
                raise Unevaluable("inverse of zero")
            return pow(args[0], P - 2, P)
        if name == "split_hi":
            return args[0] >> 32
        if name == "split_lo":
            return args[0] & 0xFFFFFFFF
        if name == "lt":
            return int(args[0] < args[1])
        if name == "and":
            return args[0] & args[1]
        if name == "xor":
            return args[0] ^ args[1]
        if name == "log_2_floor":
            if args[0] == 0:
                raise Unevaluable("log_2_floor of zero")
            return args[0].bit_length() - 1
        if name == "pop_count":
            return bin(args[0]).count("1")
        if name in ("pow", "powv"):
            return pow(args[0], args[1], P)
        if name in ("div", "mod"):
            if args[1] == 0:
                raise Unevaluable("division by zero")
            q, r = divmod(args[0], args[1])
            return q if name == "div" else r
        if name == "mul":
            return args[0] * args[1] % P
        if name == "tip5":
            from tasmopt.vm.tip5 import permutation

            return permutation(args[:16])[args[16]]
        if name == "xinv":
            if not any(args[:3]):
                raise Unevaluable("inverse of zero")
            return xfield.inv((args[0], args[1], args[2]))[args[3]]
        if name == "merkle":
            from tasmopt.vm.tip5 import permutation

            i, cur, sib, j = args[0], args[1:6], args[6:11], args[11]
            left, right = (cur, sib) if i % 2 == 0 else (sib, cur)
            return permutation(list(left) + list(right) + [1] * 6)[j]
        if name == "half":
            return args[0] // 2
        if name == "mem":
            addr, hist = args[0], args[1:]
            for k in range(len(hist) - 2, -1, -2):
                if hist[k] == addr:
                    return hist[k + 1]
            return a.ram_at(addr)
        raise Unevaluable(f"no evaluation rule for {name}")

    def _free(self, table: dict[int, int], k: int, key: AtomKey) -> int:
        v = table.get(k)
        if v is None:
            v = self._fresh(key)
            table[k] = v
        return v

    def _fresh(self, key: AtomKey) -> int:
        return self._default(key) % P if self._default is not None else 0


class Unevaluable(ArithmeticError):
    """An expression has no value in this state (the run fails before it is used)."""


__all__.append("Unevaluable")
