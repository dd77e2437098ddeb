"""Independent Python references for the corpus test programs (`corpus/`).

Plain integer arithmetic mod p = 2^64 - 2^32 + 1; nothing here runs our VM. Tip5 comes from
`tasmopt.vm.tip5` (checked against the official test vectors), used as a hash function only.

Stack conventions the references encode (spec/trident-language.md §3.1, §4; triton-vm.md §5):
a Trident ``Digest`` binds ``(d0, .., d4)`` with ``d4`` on top of the stack, which is word 0
of the VM digest; ``hash(a0, .., a9)`` hashes the Tip5 input ``[a9, .., a0]``; a digest read
with ``pub_read5``/``divine5`` must be listed word 4 first; ``reveal`` writes the tag and then
the fields last-declared first; ``seal`` writes ``hash([tag, 0 * (9 - n), f1, .., fn])``.
"""

from __future__ import annotations

from collections.abc import Sequence

from tasmopt.vm import tip5

P = 2**64 - 2**32 + 1
U32 = 2**32
MASK32 = U32 - 1


# -- base field -------------------------------------------------------------------------------


def inv(x: int) -> int:
    """Multiplicative inverse by Fermat (x != 0)."""
    x %= P
    assert x, "inverse of zero"
    return pow(x, P - 2, P)


def neg(x: int) -> int:
    return (-x) % P


def fdiv(a: int, b: int) -> int:
    return a * inv(b) % P


def horner(coeffs: Sequence[int], x: int) -> int:
    """sum coeffs[i] * x^i mod p."""
    acc = 0
    for c in reversed(coeffs):
        acc = (acc * x + c) % P
    return acc


def lagrange_eval(points: Sequence[tuple[int, int]], x: int) -> int:
    """The interpolating polynomial through ``points`` at ``x``."""
    total = 0
    for j, (xj, yj) in enumerate(points):
        num, den = 1, 1
        for k, (xk, _) in enumerate(points):
            if k != j:
                num = num * (x - xk) % P
                den = den * (xj - xk) % P
        total = (total + yj * num * inv(den)) % P
    return total


def bit(b: bool) -> int:
    return 1 if b else 0


# -- cubic extension F_p[x] / (x^3 - x + 1) ---------------------------------------------------


def x_add(a: Sequence[int], b: Sequence[int]) -> list[int]:
    return [(u + v) % P for u, v in zip(a, b)]


def x_sub(a: Sequence[int], b: Sequence[int]) -> list[int]:
    return [(u - v) % P for u, v in zip(a, b)]


def x_mul(a: Sequence[int], b: Sequence[int]) -> list[int]:
    """Schoolbook product of degree <= 4, reduced with x^3 = x - 1 and x^4 = x^2 - x."""
    prod = [0] * 5
    for i in range(3):
        for j in range(3):
            prod[i + j] += a[i] * b[j]
    c0, c1, c2, c3, c4 = prod
    # x^3 -> x - 1 ; x^4 -> x^2 - x
    return [(c0 - c3) % P, (c1 + c3 - c4) % P, (c2 + c4) % P]


def x_pow(a: Sequence[int], e: int) -> list[int]:
    out = [1, 0, 0]
    for _ in range(e):
        out = x_mul(out, a)
    return out


def x_pow_fast(a: Sequence[int], e: int) -> list[int]:
    out, base = [1, 0, 0], list(a)
    while e:
        if e & 1:
            out = x_mul(out, base)
        base = x_mul(base, base)
        e >>= 1
    return out


# -- the corpus' Poseidon2-style permutation over 4 words ---------------------------------------

M4 = ((5, 7, 1, 3), (4, 6, 1, 1), (1, 3, 5, 7), (1, 1, 4, 6))
DIAG4 = (2, 3, 5, 9)


def matvec(m: Sequence[Sequence[int]], v: Sequence[int]) -> list[int]:
    return [sum(r * x for r, x in zip(row, v)) % P for row in m]


def p2_rc(k: int) -> int:
    """rc(k) = (k + 3)^7 + 11 k."""
    return (pow(k + 3, 7, P) + 11 * k) % P


def p2_internal(s: Sequence[int]) -> list[int]:
    total = sum(s)
    return [(total + d * x) % P for d, x in zip(DIAG4, s)]


def p2_full_round(s: Sequence[int], base: int) -> list[int]:
    t = [pow((x + p2_rc(base + i)) % P, 7, P) for i, x in enumerate(s)]
    return matvec(M4, t)


def p2_partial_round(s: Sequence[int], base: int) -> list[int]:
    t = list(s)
    t[0] = pow((t[0] + p2_rc(base)) % P, 7, P)
    return p2_internal(t)


def p2_permute(s: Sequence[int]) -> list[int]:
    t = matvec(M4, s)
    for r in range(4):
        t = p2_full_round(t, 4 * r)
    for r in range(12):
        t = p2_partial_round(t, 16 + r)
    for r in range(4):
        t = p2_full_round(t, 28 + 4 * r)
    return t


def p2_compress(x: int, y: int) -> int:
    return (p2_permute([x, y, 0, 0])[0] + x) % P


def p2_hash2(x: int, y: int) -> int:
    return p2_permute([x, y, 0, 0])[0]


# -- Tip5 digests in VM word order (word 0 = top of stack) --------------------------------------


def hash10(words: Sequence[int]) -> list[int]:
    """Tip5 fixed-length hash of the 10-word input ``words`` (x0 first)."""
    return tip5.hash_fixed([w % P for w in words])


def trident_hash(*args: int) -> list[int]:
    """Digest words of the Trident call ``hash(args[0], .., args[9])``."""
    assert len(args) == 10
    return hash10(list(reversed(args)))


def hash_pair(left: Sequence[int], right: Sequence[int]) -> list[int]:
    """Parent digest as ``merkle_step`` computes it (left child's words first)."""
    return tip5.hash_pair(left, right)


def leaf(x: int) -> list[int]:
    """``hash.digest.leaf(x)`` = hash(0, .., 0, x)."""
    return hash10([x] + [0] * 9)


def digest_input(words: Sequence[int]) -> list[int]:
    """Public/secret input tokens that ``pub_read5``/``divine5`` turn into this digest."""
    return list(reversed(words))


def seal(tag: int, fields: Sequence[int]) -> list[int]:
    """Public output of ``seal E { f1, .., fn }`` (n <= 9)."""
    return hash10([tag] + [0] * (9 - len(fields)) + list(fields))


def reveal(tag: int, fields: Sequence[int]) -> list[int]:
    """Public output of ``reveal E { f1, .., fn }``."""
    return [tag] + [f % P for f in reversed(fields)]


class MerkleTree:
    """A complete binary tree of leaf digests; node 1 is the root, leaf j is node 2^h + j."""

    def __init__(self, leaves: Sequence[Sequence[int]]) -> None:
        n = len(leaves)
        assert n & (n - 1) == 0
        self.n = n
        self.node: dict[int, list[int]] = {n + j: list(d) for j, d in enumerate(leaves)}
        for i in range(n - 1, 0, -1):
            self.node[i] = hash_pair(self.node[2 * i], self.node[2 * i + 1])

    @property
    def root(self) -> list[int]:
        return self.node[1]

    def path(self, pos: int) -> list[tuple[int, ...]]:
        """Sibling digests from the leaf up, as ``merkle_step`` consumes them."""
        out, i = [], self.n + pos
        while i > 1:
            out.append(tuple(self.node[i ^ 1]))
            i //= 2
        return out


def x_inv(a: Sequence[int]) -> list[int]:
    """Inverse in the cubic extension as a^(p^3 - 2) (a != 0)."""
    assert any(x % P for x in a)
    return x_pow_fast(a, P**3 - 2)
