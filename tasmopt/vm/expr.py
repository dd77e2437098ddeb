"""Canonical expressions over F_p for the symbolic verifier (design §2, layer 1).

A value is a `Poly`: a polynomial with coefficients in F_p over *atoms*. An atom is either a
free variable (an entry stack element, an input token, an initial RAM cell, ...) or an opaque
operation the normal form does not see through (``invert``, ``lt``, a Tip5 output, ...)
applied to canonical arguments. Everything is hash-consed in one `ExprContext`, so two values
are equal as expressions iff their ids are equal: commutativity, associativity,
distributivity and constant folding are decided exactly by the normal form.

Atoms carry an ``algebraic`` flag. Algebraic atoms (free variables, field inverses, Tip5
outputs) behave like independent random values, so a difference of two polynomials over them
that vanishes on random witnesses is zero with probability >= 1 - deg/p per witness
(Schwartz–Zippel). Non-algebraic atoms (comparisons, bit operations, RAM reads that may alias)
take few values, so random testing proves nothing about them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tasmopt.isa import P

__all__ = ["ExprContext", "Poly", "MAX_TERMS"]

#: A product whose expansion would exceed this many monomials stays an opaque (algebraic)
#: ``mul`` atom instead; equality then falls back to testing.
MAX_TERMS = 512

Monomial = tuple[tuple[int, int], ...]  # ((atom id, exponent), ...) sorted by atom id
#: A polynomial's interning key: its (monomial, coefficient) pairs, sorted.
PolyKey = tuple[tuple[Monomial, int], ...]
#: An atom's identity, e.g. ``("var", "s", 0)`` (entry slot 0) or ``("op", "lt", id, id)``.
AtomKey = tuple[Any, ...]
#: A failure condition of a symbolic run, e.g. ``("u32", poly id)``: the run fails iff one of
#: its guards is violated (`tasmopt.vm.guards`).
Guard = tuple[Any, ...]


class Poly:
    """An interned polynomial. Compare with ``is`` or by ``id`` (same context only)."""

    __slots__ = ("terms", "key", "id")

    def __init__(self, terms: dict[Monomial, int], key: PolyKey, pid: int) -> None:
        self.terms = terms
        self.key = key
        self.id = pid

    @property
    def is_const(self) -> bool:
        return not self.terms or (len(self.terms) == 1 and () in self.terms)

    @property
    def const(self) -> int:
        """The value of a constant polynomial (raises if not constant)."""
        if not self.terms:
            return 0
        if len(self.terms) == 1 and () in self.terms:
            return self.terms[()]
        raise ValueError("not a constant")

    def __repr__(self) -> str:
        return f"Poly#{self.id}({len(self.terms)} terms)"


class ExprContext:
    """Interning tables shared by the runs that are compared against each other."""

    def __init__(self) -> None:
        self._polys: dict[PolyKey, Poly] = {}
        self._by_id: list[Poly] = []
        self._atoms: dict[AtomKey, int] = {}
        self.atom_keys: list[AtomKey] = []
        self.atom_algebraic: list[bool] = []
        self.zero = self.poly({})
        self.one = self.const(1)

    # -- construction ---------------------------------------------------------------------
    def poly(self, terms: dict[Monomial, int]) -> Poly:
        clean = {m: c % P for m, c in terms.items() if c % P}
        key = tuple(sorted(clean.items()))
        found = self._polys.get(key)
        if found is None:
            found = Poly(clean, key, len(self._by_id))
            self._polys[key] = found
            self._by_id.append(found)
        return found

    def const(self, value: int) -> Poly:
        value %= P
        return self.poly({(): value} if value else {})

    def atom(self, key: AtomKey, *, algebraic: bool) -> Poly:
        """The polynomial consisting of one atom with identity ``key``."""
        aid = self._atoms.get(key)
        if aid is None:
            aid = len(self.atom_keys)
            self._atoms[key] = aid
            self.atom_keys.append(key)
            self.atom_algebraic.append(algebraic)
        return self.poly({((aid, 1),): 1})

    def var(self, *name: object) -> Poly:
        """A free variable, e.g. ``var("s", 3)`` for entry stack element st3."""
        return self.atom(("var",) + name, algebraic=True)

    def op(self, name: str, *args: Poly | int, algebraic: bool = False) -> Poly:
        """An opaque operation on canonical arguments (polys by id, ints as literals)."""
        key = (name,) + tuple(("p", a.id) if isinstance(a, Poly) else ("i", a) for a in args)
        return self.atom(key, algebraic=algebraic)

    # -- arithmetic -----------------------------------------------------------------------
    def add(self, a: Poly, b: Poly) -> Poly:
        if not b.terms:
            return a
        if not a.terms:
            return b
        out = dict(a.terms)
        for m, c in b.terms.items():
            out[m] = out.get(m, 0) + c
        return self.poly(out)

    def neg(self, a: Poly) -> Poly:
        return self.poly({m: -c for m, c in a.terms.items()})

    def sub(self, a: Poly, b: Poly) -> Poly:
        return self.add(a, self.neg(b))

    def scale(self, a: Poly, k: int) -> Poly:
        return self.poly({m: c * k for m, c in a.terms.items()})

    def mul(self, a: Poly, b: Poly) -> Poly:
        if a.is_const:
            return self.scale(b, a.const)
        if b.is_const:
            return self.scale(a, b.const)
        if len(a.terms) * len(b.terms) > 4 * MAX_TERMS:
            return self._opaque_mul(a, b)
        out: dict[Monomial, int] = {}
        for ma, ca in a.terms.items():
            for mb, cb in b.terms.items():
                m = _mono_mul(ma, mb)
                out[m] = out.get(m, 0) + ca * cb
        result = self.poly(out)
        if len(result.terms) > MAX_TERMS:
            return self._opaque_mul(a, b)
        return result

    def _opaque_mul(self, a: Poly, b: Poly) -> Poly:
        lo, hi = sorted((a, b), key=lambda p: p.key)
        return self.op("mul", lo, hi, algebraic=True)

    def pow_const(self, a: Poly, e: int) -> Poly:
        """``a ** e`` for a known exponent ``e >= 0`` (``0 ** 0 = 1``, Triton VM spec §5.7)."""
        if e == 0:
            return self.one
        if a.is_const:
            return self.const(pow(a.const, e, P))
        if len(a.terms) == 1:
            ((m, c),) = a.terms.items()
            return self.poly({tuple((aid, x * e) for aid, x in m): pow(c, e, P)})
        if e > 16:
            return self.op("pow", a, e, algebraic=True)
        result, base = self.one, a
        while e:
            if e & 1:
                result = self.mul(result, base)
            e >>= 1
            if e:
                base = self.mul(base, base)
        return result

    def canonical_sign(self, a: Poly) -> Poly:
        """Pick one of ``a`` and ``-a`` deterministically (for ``a == 0`` style facts)."""
        b = self.neg(a)
        return a if a.key <= b.key else b

    # -- inspection -----------------------------------------------------------------------
    def atoms_of(self, polys: Iterable[Poly]) -> set[int]:
        """All atom ids reachable from ``polys``, through opaque arguments too."""
        seen: set[int] = set()
        stack = list(polys)
        by_id = self._by_id
        while stack:
            p = stack.pop()
            for m in p.terms:
                for aid, _ in m:
                    if aid in seen:
                        continue
                    seen.add(aid)
                    key = self.atom_keys[aid]
                    if key[0] == "var":
                        continue
                    for tag, val in key[1:]:
                        if tag == "p":
                            stack.append(by_id[val])
        return seen

    def depends_on(self, polys: Iterable[Poly]) -> set[int]:
        """`atoms_of` closed under initial-RAM cells' addresses: every atom the *value* of
        ``polys`` depends on. A ``mem0`` cell is a free variable keyed by its address, so
        `atoms_of` stops at it; a cell read at ``base + c`` depends on ``c`` all the same
        (a rewrite that changes ``c`` reads another cell). Use this, not `atoms_of`, to
        establish that a value does not depend on an element."""
        seen = self.atoms_of(polys)
        todo = [a for a in seen if self.atom_keys[a][:2] == ("var", "mem0")]
        while todo:
            addr = self._by_id[self.atom_keys[todo.pop()][2]]
            for a in self.atoms_of([addr]):
                if a not in seen:
                    seen.add(a)
                    if self.atom_keys[a][:2] == ("var", "mem0"):
                        todo.append(a)
        return seen

    def cells(self, polys: Iterable[Poly]) -> list[Poly]:
        """The addresses of the initial-RAM cells (``mem0`` variables) whose values
        ``polys`` read, through opaque arguments too, in the order their atoms were made."""
        return self._addresses(self.atoms_of(polys))

    def read_addresses(self, polys: Iterable[Poly]) -> list[Poly]:
        """The addresses of every initial-RAM cell the *value* of ``polys`` depends on
        (`depends_on`: the cells whose addresses hold cells too), in atom order."""
        return self._addresses(self.depends_on(polys))

    def _addresses(self, atoms: Iterable[int]) -> list[Poly]:
        ids = sorted(a for a in atoms if self.atom_keys[a][:2] == ("var", "mem0"))
        return [self._by_id[self.atom_keys[a][2]] for a in ids]

    def alias_degree(self, addresses: Sequence[Poly]) -> int | None:
        """The sum over every pair of distinct ``addresses`` of the degree of their
        difference (`degree`); None if one is unbounded.

        A polynomial-identity test treats two initial-RAM cells as independent random
        values. That holds at a random point only where their addresses differ there: a
        nonzero difference of degree d vanishes with probability <= d/p (Schwartz–Zippel),
        so the sum bounds the probability that two cells coincide on a random witness. An
        unbounded difference (``x·((y+c)^(p-1) - 1)``: zero except at ``y = -c``) may
        coincide on every random witness and differ at one point, where the two programs
        read different cells: no random test can see it.
        """
        total = 0
        for i, a in enumerate(addresses):
            for b in addresses[i + 1 :]:
                d = self.degree(self.sub(a, b))
                if d is None:
                    return None
                total += d
        return total

    def is_algebraic(self, polys: Iterable[Poly]) -> bool:
        """True if every atom reachable from ``polys`` is algebraic (see module docstring).

        An initial-RAM variable ``mem0`` counts only if its *address* is algebraic too: two
        cells at addresses built from comparisons or bit operations may coincide on every
        random witness while the normal form treats them as independent values.
        """
        return all(self.atom_algebraic[a] for a in self.depends_on(polys))

    def degree(self, p: Poly) -> int | None:
        """An upper bound on the total degree of ``p`` as a polynomial in the free variables
        after clearing the denominators of field inverses; None if unbounded or unknown.

        Free variables (and ``mem0`` cells) have degree 1; an opaque product ``mul(a, b)``
        has ``deg a + deg b``; ``pow(a, e)`` has ``e · deg a``; an inverse ``inv(a)``
        contributes ``deg a`` per unit of its largest exponent (clearing it multiplies the
        whole expression by a power of ``a``; nested inverses are not bounded); Tip5
        outputs, extension-field inverses, comparisons and bit operations are unbounded.
        The bound is ``sum over atoms of (largest exponent x degree of the atom)``, which
        dominates every monomial of the cleared polynomial.
        """
        return self._degree(p, set())

    def _degree(self, p: Poly, stack: set[int]) -> int | None:
        maxexp: dict[int, int] = {}
        for mono in p.terms:
            for aid, e in mono:
                if e > maxexp.get(aid, 0):
                    maxexp[aid] = e
        total = 0
        for aid, e in maxexp.items():
            d = self._atom_degree(aid, stack)
            if d is None:
                return None
            total += e * d
        return total

    def _atom_degree(self, aid: int, stack: set[int]) -> int | None:
        if aid in stack:
            return None
        key = self.atom_keys[aid]
        if key[0] == "var":
            return 1
        if not self.atom_algebraic[aid]:
            return None
        stack = stack | {aid}
        args = [self._by_id[v] for t, v in key[1:] if t == "p"]
        if key[0] == "mul":
            ds = [self._degree(a, stack) for a in args]
            return None if None in ds else sum(ds)  # type: ignore[arg-type]  # no degree is None on this branch
        if key[0] == "pow":
            d = self._degree(args[0], stack)
            return None if d is None else d * key[2][1]
        if key[0] == "inv":
            if any(self.atom_keys[x][0] == "inv" for x in self.atoms_of(args)):
                return None
            return self._degree(args[0], stack)
        return None  # tip5, xinv, ...: no useful bound

    def describe(self, p: Poly, limit: int = 80) -> str:
        """Short human-readable form, for rejection reasons."""
        if p.is_const:
            c = p.const
            return str(c) if c < P - 256 else f"-{P - c}"
        parts = []
        for m, c in sorted(p.terms.items())[:4]:
            names = "*".join(self._atom_name(aid) + (f"^{x}" if x > 1 else "") for aid, x in m)
            coef = "" if c == 1 else (f"-{P - c}*" if c >= P - 256 else f"{c}*")
            parts.append(coef + (names or "1"))
        text = " + ".join(parts) + (" + ..." if len(p.terms) > 4 else "")
        return text if len(text) <= limit else text[: limit - 3] + "..."

    def _atom_name(self, aid: int) -> str:
        key = self.atom_keys[aid]
        if key[0] == "var":
            return "".join(str(k) for k in key[1:])
        return f"{key[0]}(..)"


def _mono_mul(a: Monomial, b: Monomial) -> Monomial:
    if not a:
        return b
    if not b:
        return a
    out = dict(a)
    for aid, e in b:
        out[aid] = out.get(aid, 0) + e
    return tuple(sorted(out.items()))
