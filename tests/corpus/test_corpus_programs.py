"""Run every corpus test program (``corpus/*/tests/*.tri``) in the simulator and compare its
public output with an independent Python reference (`corpus_ref`).

Each case: compile with the frontend (search path ``corpus``), lower, parse, run with the
given public input / secret input / secret digests / RAM, then require no VM error and the
expected public output (or, for ``*_fail`` programs, a VM error).
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import corpus_ref as R
import pytest
from corpus_ref import MASK32, U32, P, bit, inv, neg

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "corpus"
STEP_LIMIT = 2_000_000


@dataclass(frozen=True)
class Case:
    program: str  # path under corpus/
    public: tuple[int, ...]
    expected: tuple[int, ...] | None  # None: the run must fail with `fails_with`
    secret: tuple[int, ...] = ()
    digests: tuple[tuple[int, ...], ...] = ()
    ram: dict = field(default_factory=dict, hash=False)
    name: str = ""
    fails_with: str = ""  # VmError kind of a `*_fail` program

    @property
    def id(self) -> str:
        return self.name or Path(self.program).stem


def case(
    program: str, public, expected, *, secret=(), digests=(), ram=None, name="", fails_with=""
):
    assert (expected is None) == bool(fails_with)
    return Case(
        program,
        tuple(x % P for x in public),
        None if expected is None else tuple(x % P for x in expected),
        tuple(x % P for x in secret),
        tuple(tuple(d) for d in digests),
        dict(ram or {}),
        name,
        fails_with,
    )


# == field ====================================================================================


def ref_basic(a, b, c):
    return [
        2 * a,
        3 * a,
        b * b,
        b**3,
        a * b + c,
        a * b - c,
        a - b,
        a + b + c,
        b * a + c,
        (a - b) ** 2,
        bit(c == 0),
        1,
        a if c == 0 else b,
        P - 1,
        a * inv(2),
        a + c * (b - a),
    ]


def ref_pow(x, e, big):
    return [pow(x, k, P) for k in (4, 5, 7, 8, 32)] + [
        pow(x, e, P),
        pow(x, big, P),
        3**20,
        sum(pow(x, i, P) for i in range(10)),
        pow(x, 13, P),
    ]


def ref_inverse(x, y):
    return [
        inv(x),
        inv(x),
        x * inv(y),
        0,
        inv(y),
        1,
        bit(x * y % P == 1),
        inv(x),
        inv(y),
        inv(x),
        inv(y),
        inv(x + y),
        pow(y, 2**32 - 1, P),
        pow(x, (P - 1) // 2, P),
        1,
        0,
        1,
    ]


def ref_poly(c0, c1, c2, c3, x):
    p = [c0, c1, c2, c3]
    px = R.horner(p, x)
    q = (c0 + c1 * x) * (c2 + c3 * x)
    return [
        px,
        R.horner([c1, 2 * c2, 3 * c3], x),
        3 * px,
        q,
        x * q + 5,
        R.horner([1, 2, 3], x),
        px,
        px,
        5,
        0,
        R.horner(p, x + 1),
    ]


def ref_linalg(*w):
    u, v, z = w[0:3], w[3:6], w[6:9]

    def dot(a, b):
        return sum(s * t for s, t in zip(a, b))

    def cross(a, b):
        return [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]

    def mm(a, b):
        return [[sum(a[i][k] * b[k][j] for k in range(2)) % P for j in range(2)] for i in range(2)]

    m = [[u[0], u[1]], [v[0], v[1]]]
    n = [[z[0], z[1]], [z[2], u[2]]]
    m5 = [[1, 0], [0, 1]]
    for _ in range(5):
        m5 = mm(m5, m)
    flat = lambda a: [a[0][0], a[0][1], a[1][0], a[1][1]]  # noqa: E731
    return (
        [
            dot(u, v),
            u[0] * v[0] + u[1] * v[1],
            u[0] * v[0] + u[1] * v[1] + u[2] * v[2] + z[0] * z[1],
        ]
        + [s + t for s, t in zip(u, v)]
        + [s * z[2] for s in u]
        + cross(u, v)
        + [m[0][0] * z[0] + m[0][1] * z[1], m[1][0] * z[0] + m[1][1] * z[1]]
        + flat(mm(m, n))
        + [m[0][0] * m[1][1] - m[0][1] * m[1][0]]
        + [m[0][0], m[1][0], m[0][1], m[1][1]]
        + flat(m5)
        + [dot(u, cross(v, z))]
        + [dot(u, u), dot(v, u), dot(z, u)]
    )


def ref_lagrange(y0, y1, y2, x):
    std = R.lagrange_eval([(0, y0), (1, y1), (2, y2)], x)
    vals = [x + i for i in range(5)]
    return (
        [
            std,
            std,
            R.lagrange_eval([(5, y0), (11, y1), (17, y2)], x),
            R.lagrange_eval([(3, y0), (8, y1)], x),
            inv((y0 - y1) * (y0 - y2)),
            math.prod(x - i for i in range(5)),
            0,
        ]
        + [inv(v) for v in vals]
        + [sum(inv(v) for v in vals)]
    )


def ref_ntt(*w):
    u, v = list(w[:4]), list(w[4:])
    om = pow(2, 48, P)

    def dft(a, root):
        return [sum(a[j] * pow(root, j * k, P) for j in range(4)) % P for k in range(4)]

    conv = [sum(u[i] * v[(k - i) % 4] for i in range(4)) for k in range(4)]
    w4 = pow(7, (P - 1) // 4, P)
    return (
        dft(u, om)
        + u
        + conv
        + [u[0] + v[0] * u[1], u[0] - v[0] * u[1], 2 * u[0], 2 * u[1], w4, pow(7, (P - 1) // 8, P)]
        + dft(u, w4)
    )


def ref_rational(an, ad, bn, bd):
    a, b = R.fdiv(an, ad), R.fdiv(bn, bd)
    hn, hd = 0, 1
    for i in range(6):
        hn, hd = (hn * (i + 1) + hd) % P, hd * (i + 1) % P
    return [
        a + b,
        a - b,
        a * b,
        R.fdiv(a, b),
        R.fdiv(ad, an),
        an * bd + bn * ad,
        ad * bd,
        1,
        bit((an * bd - bn * ad) % P == 0),
        1,
        hn,
        hd,
        R.fdiv(49, 20),
    ]


def _collatz(x, limit):
    steps = 0
    for _ in range(limit):
        if x > 1:
            x = 3 * x + 1 if x % 2 else x // 2
            steps += 1
    return steps


def _fib(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def ref_series(n):
    luc = [2, 1]
    trib = [0, 0, 1]
    for _ in range(n):
        luc.append(luc[-1] + luc[-2])
        trib.append(trib[-1] + trib[-2] + trib[-3])
    return [
        _fib(n),
        luc[n],
        trib[n],
        math.factorial(n),
        n * (n + 1) // 2,
        sum(k * k for k in range(1, n + 1)),
        math.comb(n, 3),
        1,
        42,
        _collatz(27, 200),
        _collatz(n, 5),
        _fib(100),
    ]


def ref_compare(a, b, c):
    half = (P - 1) // 2

    def clamp(x, lo, hi):
        return lo if x < lo else hi if hi < x else x

    def centered(x):
        return (P - x) % P if x > half else x

    return [
        bit(a < b),
        bit(b < a),
        1,
        bit(b <= a),
        min(a, b),
        max(a, b),
        min(b, c),
        max(b, c),
        sorted([a, b, c])[1],
        sorted([a, b, c])[1],
        bit(a < U32),
        bit(c < U32),
        1,
        bit(c > half),
        centered(neg(a)),
        centered(a),
        clamp(c, a, b),
        clamp(a, b, c),
    ]


# == extension field ==========================================================================


def ref_xarith(a0, a1, a2, b0, b1, b2, s, e):
    a, b = [a0, a1, a2], [b0, b1, b2]
    by_x = R.x_mul(a, [0, 1, 0])
    return (
        R.x_add(a, b)
        + R.x_sub(a, b)
        + R.x_sub([0, 0, 0], a)
        + [x * s % P for x in a]
        + R.x_mul(a, b)
        + R.x_mul(b, b)
        + by_x
        + [s, 0, 0]
        + R.x_pow_fast(a, e)
        + [1, bit(a == b), 1, bit(a == [0, 0, 0]), 0]
    )


def ref_xpoly(z0, z1, z2, c0, c1, c2, c3):
    z = [z0, z1, z2]
    ev = [0, 0, 0]
    for c in (c3, c2, c1, c0):
        ev = R.x_add(R.x_mul(ev, z), [c, 0, 0])
    z2_ = R.x_mul(z, z)
    return ev + ev + R.x_pow(z, 7) + R.x_pow(z, 3) + ev + R.x_add(z2_, R.x_mul(z2_, z2_))


def ref_xnative(a0, a1, a2, b0, b1, b2, s):
    a, b = [a0, a1, a2], [b0, b1, b2]
    ab = R.x_mul(a, b)
    return (
        a
        + [x * s % P for x in a]
        + [x * inv(s) % P for x in a]
        + R.x_inv(a)
        + R.x_inv(b)
        + [s, 0, 0]
        + ab
        + [1]
        + R.x_add(R.x_add(ab, ab), [x * s % P for x in b])
        + b
        + R.x_add([2 * x % P for x in a], [x * s % P for x in b])
    )


# == poseidon =================================================================================


def ref_state(x, y):
    s = [x, y, x + y, x * y]
    return (
        s
        + [0, 0, 0, 0]
        + [x, y, 0, 0]
        + [sum(s)]
        + [x + y, y + x, x + y, x * y]
        + [42, y, x + y, x * y]
        + [x + 1, y + 2, x + y, x * y]
        + [x]
    )


def ref_sbox(x):
    s = [x, x + 1, x + 2, x + 3]
    return (
        [pow(x, 7, P), pow(x, 7, P), pow(x, 343, P)]
        + [pow(t, 7, P) for t in s]
        + [pow(x, 7, P)]
        + s[1:]
    )


def ref_linear(*s):
    m = R.matvec(R.M4, s)
    i = R.p2_internal(s)
    return m + m + i + R.matvec(R.M4, i) + [s[0] + 2 * s[1] + 3 * s[2] + 4 * s[3], 1]


def ref_constants(k):
    return (
        [R.p2_rc(k), R.p2_rc(k + 1)]
        + [R.p2_rc(k + i) for i in range(4)]
        + [sum(R.p2_rc(i) for i in range(44))]
    )


def ref_rounds(*s):
    two = R.p2_full_round(R.p2_full_round(s, 0), 4)
    three = s
    for b in (16, 17, 18):
        three = R.p2_partial_round(three, b)
    return R.p2_full_round(s, 0) + R.p2_partial_round(s, 16) + two + list(three)


def ref_permutation(*s):
    t = R.p2_permute(s)
    u = R.p2_permute(t)
    pc = R.p2_permute([s[2], s[3], 0, 0])
    return t + [R.p2_compress(s[0], s[1]), pc[0], pc[1], u[0], u[3]]


def ref_p2sponge(n, *xs):
    s = [0, 0, n, 0]
    for i in range(n // 2):
        s = R.p2_permute([s[0] + xs[2 * i], s[1] + xs[2 * i + 1], s[2], s[3]])
    if n % 2:
        s = R.p2_permute([s[0] + xs[n - 1], s[1] + 1, s[2], s[3]])
    else:
        s = R.p2_permute([s[0] + 1, s[1], s[2], s[3]])
    h = xs[0]
    for i in range(3):
        h = R.p2_hash2(h, i)
    c = R.p2_compress
    return [s[0], R.p2_hash2(xs[0], xs[1]), c(c(xs[0], xs[1]), c(xs[2], xs[3])), h]


def ref_wide(*s):
    u, v = R.matvec(R.M4, s[:4]), R.matvec(R.M4, s[4:])
    w = [a + b for a, b in zip(u, v)]
    t = sum(s)
    return (
        [a + b for a, b in zip(u, w)]
        + [a + b for a, b in zip(v, w)]
        + [t + (i + 2) * x for i, x in enumerate(s)]
        + [t, pow(s[0], 7, P), pow(s[7], 7, P), s[4], s[3]]
    )


# == uint =====================================================================================


def ref_ops(a, b):
    return [
        (a + b) & MASK32,
        (a - b) & MASK32,
        (b - a) & MASK32,
        (a * b) & MASK32,
        (a * b) >> 32,
        min(a, b),
        max(a, b),
        abs(a - b),
        a // b,
        a % b,
        (a + b) // 2,
        max(1000, min(a, b)),
        7 + b,
        max(a, b) - min(a, b),
        bit(a >= b),
    ]


def ref_bits(a, b, k):
    def rotl(x, r):
        return ((x << r) | (x >> (32 - r))) & MASK32

    return [
        (a << k) & MASK32,
        a >> k,
        rotl(a, k),
        rotl(a, 32 - k),
        a | b,
        a ^ MASK32,
        a & ~b & MASK32,
        (a >> k) & 1,
        b | (1 << k),
        a & ~(1 << k) & MASK32,
        (1 << k) - 1,
        bit(a and a & (a - 1) == 0),
        1,
        bin(a).count("1") & 1,
        32 - b.bit_length(),
        32,
        0b11010000,
        a & b,
        a ^ b,
        a.bit_length() - 1,
        bin(b).count("1"),
    ]


def ref_range(x, y):
    bs = x.to_bytes(4, "little")
    return (
        [x, y, 200, y, bit(10 <= y < 100000)] + list(bs) + [x, int.from_bytes(bs, "big"), sum(bs)]
    )


def ref_numth(a, b):
    return [
        math.gcd(a, b),
        36,
        bit(math.gcd(a, b) == 1),
        1,
        math.isqrt(a),
        65535,
        1234 * 4321 % 65521,
        pow(3, 1000, 65521),
        1,
        0,
        1,
        sum(map(int, str(a))),
    ]


# == bigint ===================================================================================


def ref_carry(a, b, c):
    s = a + b + 1
    d1 = a - b - 1
    d2 = b - a
    m = a * b + c
    m2 = a * b + 2 * c
    sq = a * a
    return [
        s >> 32,
        s & MASK32,
        bit(d1 < 0),
        d1 & MASK32,
        bit(d2 < 0),
        d2 & MASK32,
        m >> 32,
        m & MASK32,
        m2 >> 32,
        m2 & MASK32,
        sq >> 32,
        sq & MASK32,
        a,
        b,
    ]


def ref_u64(x, bh, bl):
    a, b = x, (bh << 32) | bl
    M = 2**64 - 1

    def w(v):
        return [v >> 32, v & MASK32]

    s, d = a + b, a - b
    return (
        w(a)
        + [b % P]
        + w(s & M)
        + [s >> 64]
        + w((a + 1) & M)
        + w(d & M)
        + [bit(d < 0), bit(a < b), bit(b < a), 1, bit(a == 0), 1]
        + w((a & MASK32) * bl)
        + w(a * b & M)
        + w(a ^ b)
        + w(a & b)
        + w(a >> 1)
        + w(max(a, b))
    )


def ref_u128(ah, al, bh, bl):
    A, B = (ah << 64) | al, (bh << 64) | bl
    M = 2**128 - 1

    def limbs(v):
        return [(v >> (32 * i)) & MASK32 for i in range(4)]

    m = A * 4000000000
    return (
        limbs(A)
        + limbs((A + B) & M)
        + [(A + B) >> 128]
        + limbs((A - B) & M)
        + [bit(A < B), bit(A < B), bit(A == B)]
        + limbs(m & M)
        + [m >> 128]
        + limbs(al * bh)
        + [ah >> 32]
    )


def ref_limbs(n, *w):
    a, b = w[:n], w[n : 2 * n]
    A = sum(x << (32 * i) for i, x in enumerate(a))
    B = sum(x << (32 * i) for i, x in enumerate(b))
    M = 2 ** (32 * n)

    def limbs(v):
        return [(v >> (32 * i)) & MASK32 for i in range(n)]

    s, d, m = A + B, A - B, A * 3000000000

    def cmp(x, y):
        return P - 1 if x < y else 1 if x > y else 0

    return (
        [s >> (32 * n)]
        + limbs(s % M)
        + [bit(d < 0)]
        + limbs(d % M)
        + [m >> (32 * n)]
        + [
            cmp(A, B),
            cmp(B, A),
            0,
            bit(A == 0),
            1,
            (a[0] + (a[1] << 32)) % P,
            (m % M) % P,
            max((i + 1 for i in range(n) if b[i]), default=0),
        ]
    )


# == hash =====================================================================================


def ref_digest(x, y):
    lx, ly = R.leaf(x), R.leaf(y)
    d = lx
    for v in (y, x + y, 7):
        d = R.hash_pair(d, R.leaf(v))
    return (
        lx
        + R.hash10([3, 2, 1, y, x, 0, 0, 0, 0, 0])
        + R.hash_pair(lx, ly)
        + R.trident_hash(6, 7, 8, 9, 10, 1, 2, 3, 4, 5)
        + [lx[0], sum(ly) % P, 1, 0, 1, 0]
        + d
    )


def ref_sponge(*v):
    from tasmopt.vm.tip5 import Sponge

    s = Sponge()
    s.absorb(v[:10])
    s.absorb(v[10:20])
    first = s.squeeze()[:5]
    s = Sponge()
    s.absorb(v[:10])
    q1 = s.squeeze()
    q2 = s.squeeze()
    t = Sponge()
    t.absorb([v[0]] + [0] * 9)
    stream = sum(t.squeeze()[0] for _ in range(3)) % P
    return first + [q1[0], q2[0], q2[4], q2[9], stream]


MERKLE_VALUES = [11, 22, 33, 44, 55, 66, 77, 88]
MERKLE_TREE = R.MerkleTree([R.leaf(v) for v in MERKLE_VALUES])


def merkle_case(pos: int) -> Case:
    t = MERKLE_TREE
    path = t.path(pos)
    idx = 8 + pos
    tokens = [w for d in path for w in R.digest_input(d)]
    public = R.digest_input(t.root) + [MERKLE_VALUES[pos], pos] + MERKLE_VALUES
    expected = (
        [idx]
        + t.root
        + [idx // 2]
        + t.node[idx // 2]
        + R.hash_pair(R.leaf(MERKLE_VALUES[2]), R.leaf(MERKLE_VALUES[3]))
    )
    return case(
        "hash/tests/t_merkle.tri",
        public,
        expected,
        secret=tokens,
        digests=path + [path[0]] + path,
        name=f"t_merkle_pos{pos}",
    )


def merkle_fail_case(pos: int) -> Case:
    t = MERKLE_TREE
    public = R.digest_input(t.root) + [MERKLE_VALUES[pos], pos]
    return case(
        "hash/tests/t_merkle_fail.tri",
        public,
        None,
        digests=t.path(pos),
        fails_with="VectorAssertionFailed",
    )


def ref_commit(v, s):
    c = R.hash10([v, s] + [0] * 8)
    chain = c
    for _ in range(4):
        chain = R.hash10(chain + [0] * 5)
    return (
        c
        + R.hash10([s, 3, 1] + [0] * 7)
        + R.hash10(c + [9, 0, 0, 0, 0])
        + chain
        + [v, R.hash10([s, 77, 1] + [0] * 7)[0]]
    )


# == array ====================================================================================


def ref_reduce(n, *xs):
    return [
        sum(xs),
        math.prod(xs),
        sum(x * x for x in xs),
        sum(xs[i] * xs[i + 1] for i in range(n - 1)),
        max(xs),
        min(xs),
        xs.count(0),
        sum((i + 1) * x for i, x in enumerate(xs)),
        xs[1] + xs[4],
    ]


def reduce_ram_case(xs) -> Case:
    expected = [sum(xs), max(xs), min(xs), sum(x * x for x in xs), xs.count(0)]
    return case(
        "array/tests/t_reduce_ram.tri",
        [len(xs)],
        expected,
        ram={4096 + i: x for i, x in enumerate(xs)},
    )


def ref_scan(n, *xs):
    pre = [sum(xs[: i + 1]) % P for i in range(n)]
    prod = [math.prod(xs[: i + 1]) % P for i in range(n)]
    rmax = [max(xs[: i + 1]) for i in range(n)]
    return (
        [pre[-1]]
        + pre
        + list(xs)
        + [xs[2] + xs[3] + xs[4], xs[0] + xs[1] + xs[2]]
        + [prod[-1]]
        + prod
        + rmax
        + pre
    )


def ref_copy(n, *xs):
    xs = list(xs)
    rev = xs[::-1]
    rot = xs[1:] + xs[:1]
    return xs + rev + rev + [1, bit(xs == rev)] + rot + [9, 9, 9, 0] + [10, 15, 20, 25] + rot[:5]


def ref_search(n, *w):
    xs, v = list(w[:n]), w[n]
    table = [10 * i for i in range(8)]

    def lower_bound(t):
        return next((i for i, x in enumerate(table) if x >= t), 8)

    return [
        xs.index(v) if v in xs else n,
        n,
        bit(v in xs),
        0,
        xs.count(v),
        xs.index(max(xs)),
        bit(xs == sorted(xs)),
        1,
        lower_bound(35),
        lower_bound(40),
        lower_bound(1000),
    ]


def fixed_case(v, x) -> Case:
    d1, d2 = list(range(1, 6)), list(range(6, 11))
    expected = (
        [sum(v), sum((i + 1) * a for i, a in enumerate(v))]
        + v[::-1]
        + [v[2]]
        + [v[0], x, v[2], v[3]]
        + [R.horner(v, x)]
        + [sum(v[: i + 1]) for i in range(4)]
        + [1]
        + v
        + [d2[0], d2[4]]
    )
    return case("array/tests/t_fixed.tri", [*v, x], expected, secret=d1 + d2)


def dispatch_case(code, name: str) -> Case:
    stack = []
    for op, arg in code:
        if op == 0:
            stack.append(arg)
        elif op == 4:
            stack.append(stack[-1])
        elif op == 5:
            stack[-1], stack[-2] = stack[-2], stack[-1]
        elif op in (1, 2, 3):
            b, a = stack.pop(), stack.pop()
            stack.append({1: a + b, 2: a * b, 3: a - b}[op] % P)
        elif op == 6:
            stack[-1] = neg(stack[-1])
        elif op == 7:
            stack[-1] = stack[-1] ** 2 % P
    expected = [stack[-1], len(stack), neg(2), neg(5), 5, 42, 1]
    return case(
        "kernel/tests/t_dispatch.tri",
        [len(code), *[w for pair in code for w in pair]],
        expected,
        name=name,
    )


def ref_matrix(*w):
    m = [list(w[3 * r : 3 * r + 3]) for r in range(3)]
    v = w[9:12]
    t = [[m[c][r] for c in range(3)] for r in range(3)]
    mt = [[sum(m[r][k] * t[k][c] for k in range(3)) % P for c in range(3)] for r in range(3)]
    return (
        [m[0][0] + m[1][1] + m[2][2], m[1][2]]
        + [sum(m[r][c] * v[c] for c in range(3)) for r in range(3)]
        + [x for row in t for x in row]
        + [1, 0, 0, 0, 1, 0, 0, 0, 1]
        + [x for row in mt for x in row]
        + [mt[1][1] + mt[2][2]]
    )


# == kernel ===================================================================================


def ref_io(public, secret):
    a, p_, q = public[0:3]
    d = public[3:8]
    b = public[8]
    ram = public[9:12]
    n = public[12]
    echo = public[13 : 13 + n]
    return [p_, q, a] + d[::-1] + [b] + ram + list(secret[:2]) + echo + [sum(echo)]


def ref_ledger(ab, bb, amt):
    a2 = [1, ab - amt, 1]
    b2 = [2, bb + amt, 6]
    com = R.hash10([1, ab - amt, 1] + [0] * 7)
    return a2 + b2 + [amt * 30 // 10000, com[0], com[4]] + b2 + [ab + bb] + [1, ab - amt + 7, 2]


def auth_case() -> Case:
    v, s, owner, now = 1234, 987654321, 424242, 150
    c = R.hash10([v, s] + [0] * 8)
    lock = R.leaf(owner)
    public = R.digest_input(c) + [now] + R.digest_input(lock)
    secret = [v, s, owner, 11, 0, 33, 0, 22, 33]
    expected = [v, R.hash10([owner, 5, 1] + [0] * 7)[0], 2, R.leaf(22)[0]]
    return case("kernel/tests/t_auth.tri", public, expected, secret=secret)


def vote_case(ballots, weights, binary, name: str) -> Case:
    n, m = len(ballots), len(binary)
    counts = [ballots.count(c) for c in range(3)]
    yes = sum(binary)
    expected = [
        counts[2],
        m - yes,
        yes,
        bit(2 * yes > m),
        1,
        0,
        counts.index(max(counts)),
        sum(w for b, w in zip(ballots, weights) if b == 1),
    ]
    return case("kernel/tests/t_vote.tri", [n, *ballots, *weights, m, *binary], expected, name=name)


# == events ===================================================================================


def ref_token(a, b, amt):
    out = R.reveal(0, [a, b, amt]) + R.reveal(1, [a, amt]) + R.reveal(2, [b, 3])
    out += R.reveal(0, [a, b, amt]) + [100 - amt, 50 + amt]
    for i in range(3):
        out += R.reveal(1, [a + i, amt * i])
    return out + [3 * amt] + R.reveal(2, [a, 9]) + R.reveal(1, [b, 8])


def notes_case(owner, value, salt, secret) -> Case:
    n = R.hash10([secret, 3] + [0] * 8)[0]
    expected = (
        R.seal(0, [owner, value, salt])
        + R.reveal(1, [7, value])
        + R.seal(2, [7])
        + R.seal(0, [owner, 10, salt])
        + R.seal(0, [owner, value - 10, salt + 1])
        + R.reveal(1, [n, value])
        + R.seal(2, [n])
        + [n]
    )
    return case("events/tests/t_notes.tri", [owner, value, salt], expected, secret=[secret])


def ref_audit(k, v):
    d = R.hash10([k, v] + [0] * 8)
    return (
        R.reveal(0, list(range(1, 10)))
        + R.reveal(1, [k, v])
        + [2]
        + d
        + R.reveal(1, [k, 2**32 + 2])
        + R.seal(1, [k, v])
        + R.seal(0, [k, v, 3, 4, 5, 6, 7, 8, 9])
        + R.reveal(1, [k, 0])
        + R.reveal(1, [k + 1, v])
        + R.reveal(3, [2])
    )


def ref_audit_wide(k, v):
    return R.reveal(0, list(range(1, 10))) + R.seal(0, [k, v, 3, 4, 5, 6, 7, 8, 9])


# == the table ================================================================================


def simple(program: str, public, ref, **kw) -> Case:
    return case(program, public, ref(*public), **kw)


# == lib (library-sized: 16-word states, 8-limb numbers, wide records) ==========================

P16_C = [
    12345701,
    23456789,
    34567891,
    45678923,
    56789017,
    67890131,
    78901249,
    89012357,
    90123467,
    101234579,
    112345687,
    123456791,
    134567903,
    145679011,
    156790123,
    167901239,
]


def p16_seed(x):
    m = [x, x + 1, x + 2, x + 3, 2 * x, 3 * x, 5 * x, 7 * x, x + 11, x + 13, x + 17, x + 19]
    return [v % P for v in m + [x * x, 11 * x, 13 * x, 17 * x]]


def p16_round(s, r):
    s = [(w + c * (r + 1)) % P for w, c in zip(s, P16_C, strict=True)]
    s = [pow(w, 5, P) for w in s[:4]] + s[4:]
    t = sum(s) % P
    return [((i + 2) * w + t) % P for i, w in enumerate(s)]


def ref_perm16(x):
    s = p16_seed(x)

    def out(st):
        return [st[0], st[5], st[10], st[15], sum((i + 1) * w for i, w in enumerate(st)) % P]

    t = sum(s) % P
    consts = [(w + c * 6) % P for w, c in zip(s, P16_C, strict=True)]
    sboxed = [pow(w, 5, P) for w in s[:4]] + s[4:]
    mixed = [((i + 2) * w + t) % P for i, w in enumerate(s)]
    st = s
    for r in range(4):
        st = p16_round(st, r)
    return (
        [t, pow(x, 5, P)] + out(consts) + out(sboxed) + out(mixed) + out(p16_round(s, 0)) + out(st)
    )


def _u256(*fields):
    return sum(((f % P) & MASK32 | ((f % P) >> 32) << 32) << (64 * i) for i, f in enumerate(fields))


def ref_u256(*v):
    a, b, k, x = _u256(*v[0:4]), _u256(*v[4:8]), v[8], v[9]
    m256 = 2**256

    def out(n):
        limbs = [(n >> (32 * i)) & MASK32 for i in range(8)]
        return [limbs[0], limbs[3], limbs[7], sum(limbs)]

    return (
        out((a + b) % m256)
        + [(a + b) >> 256]
        + out((a - b) % m256)
        + [bit(a < b)]
        + [bit(a < b), bit(b < a)]
        + out(a * k % m256)
        + [(a * k) >> 256, x % P]
    )


def ref_record(id_, *owner):
    a = {"id": id_, "balance": 0, "nonce": 0, "limit": 1000000, "flags": 1, "created": 100}
    a |= {"updated": 100, "kind": 2, "fee": 7, "tag": id_ * 7 + 2}

    def score(r):
        return (
            r["balance"] * 3
            + r["nonce"] * 5
            + r["limit"]
            + r["flags"] * 7
            + r["created"]
            + r["updated"] * 11
            + r["kind"]
            + r["fee"] * 13
            + r["tag"]
            + r["id"]
        ) % P

    def deposit(r, amount):
        return r | {"balance": r["balance"] + amount, "nonce": r["nonce"] + 1}

    def withdraw(r, amount):
        total = amount + r["fee"]
        return r | {
            "balance": r["balance"] - total,
            "nonce": r["nonce"] + 1,
            "limit": r["limit"] - amount,
        }

    def touch(r, now):
        return r | {"updated": now, "flags": r["flags"] * 2}

    b = deposit(a, 500)
    c = withdraw(b, 120)
    d = touch(c, 777)
    e = withdraw(touch(deposit(d, 80), 900), 40)
    o = owner
    w = R.trident_hash(
        e["id"],
        e["balance"],
        e["nonce"],
        e["limit"] + e["flags"],
        e["created"] + e["updated"],
        e["kind"],
        o[0],
        o[1] + o[2],
        o[3] + o[4],
        e["fee"] + e["tag"],
    )
    return [score(a), score(b), score(c), score(d), score(e), e["balance"] % P, w[4], w[0]]


def ref_mstep(x, y, idx, *s1):
    def digest(*args):
        w = R.trident_hash(*args)
        return tuple(w[4 - i] for i in range(5))

    def parent(n, sib):
        d, i, level, weight = n
        q, r = divmod(i, 2)
        kids = (*d, *sib) if r == 0 else (*sib, *d)
        return (digest(*kids), q, level + 1, (weight * 2 + r) % P)

    def out(n):
        return [n[0][0], n[0][4], n[1], n[2], n[3]]

    leaf = (digest(x, y, 0, 0, 0, 0, 0, 0, 0, 0), idx, 0, x + y)
    s2 = (x, y, x + y, x * y % P, 5)
    s3 = (7, 8, 9, 10, 11)
    one = parent(leaf, s1)
    two = parent(one, s2)
    root = parent(two, s3)[0]
    return out(leaf) + out(one) + out(two) + [root[0], root[4], 1]


X = 0x1234_5678_9ABC_DEF0 % P
Y = 0xFEDC_BA98_7654_3210 % P

CASES: list[Case] = [
    simple("lib/tests/t_perm16.tri", [X], ref_perm16),
    simple("lib/tests/t_perm16.tri", [3], ref_perm16, name="t_perm16_small"),
    simple(
        "lib/tests/t_u256.tri",
        [2**63 + 5, 2**64 - 2**32, 7, 2**40, 12345, 2**63, 99, 2**40 - 1, 1000003, 2**50 + 7],
        ref_u256,
    ),
    simple(
        "lib/tests/t_u256.tri",
        [P - 1, P - 1, P - 1, P - 1, 1, 0, 0, 0, MASK32, Y],
        ref_u256,
        name="t_u256_carry",
    ),
    simple("lib/tests/t_record.tri", [42, 1, 2, 3, 4, X], ref_record),
    simple("lib/tests/t_mstep.tri", [11, 22, 5, 1, 2, 3, 4, 5], ref_mstep),
    simple("lib/tests/t_mstep.tri", [X, Y, 6, 9, 8, 7, 6, 5], ref_mstep, name="t_mstep_even"),
    simple("field/tests/t_basic.tri", [X, Y, 77], ref_basic),
    simple("field/tests/t_basic.tri", [5, 9, 0], ref_basic, name="t_basic_zero"),
    simple("field/tests/t_pow.tri", [X, 1_000_003, P - 2], ref_pow),
    simple("field/tests/t_inverse.tri", [X, Y], ref_inverse),
    simple("field/tests/t_poly.tri", [3, P - 7, 11, 2**40, 123456789], ref_poly),
    simple("field/tests/t_linalg.tri", [2, 3, 5, 7, 11, 13, 17, 19, P - 23], ref_linalg),
    simple("field/tests/t_lagrange.tri", [10, 20, 45, 1000], ref_lagrange),
    simple("field/tests/t_ntt.tri", [1, 2, 3, 4, 5, 6, 7, X], ref_ntt),
    simple("field/tests/t_rational.tri", [3, 4, 5, 7], ref_rational),
    simple("field/tests/t_series.tri", [12], ref_series),
    simple("field/tests/t_compare.tri", [70, 2**40 + 3, P - 9], ref_compare),
    simple("field/tests/t_compare.tri", [2**33, 2**33 + 1, 12], ref_compare, name="t_compare_hi"),
    simple("ext/tests/t_xarith.tri", [3, 5, 7, X, 11, Y, 13, 1_000_003], ref_xarith),
    simple("ext/tests/t_xpoly.tri", [13, 2, 3, 5, 7, 11, X], ref_xpoly),
    simple("ext/tests/t_xnative.tri", [3, 5, 7, X, 11, Y, 13], ref_xnative),
    simple("poseidon/tests/t_state.tri", [X, 19], ref_state),
    simple("poseidon/tests/t_sbox.tri", [X], ref_sbox),
    simple("poseidon/tests/t_linear.tri", [1, 2, 3, X], ref_linear),
    simple("poseidon/tests/t_constants.tri", [17], ref_constants),
    simple("poseidon/tests/t_rounds.tri", [1, 2, 3, 4], ref_rounds),
    simple("poseidon/tests/t_permutation.tri", [0, 1, 2, 3], ref_permutation),
    simple("poseidon/tests/t_p2sponge.tri", [5, 10, 20, 30, 40, 50], ref_p2sponge),
    simple("poseidon/tests/t_p2sponge.tri", [4, 7, 8, 9, X], ref_p2sponge, name="t_p2sponge_even"),
    simple("poseidon/tests/t_wide.tri", [1, 2, 3, 4, 5, 6, 7, X], ref_wide),
    simple("uint/tests/t_ops.tri", [3_000_000_000, 1_234_567], ref_ops),
    simple("uint/tests/t_ops.tri", [17, 4_000_000_000], ref_ops, name="t_ops_small_a"),
    simple("uint/tests/t_bits.tri", [0xDEADBEEF, 0x0F0F1234, 7], ref_bits),
    simple("uint/tests/t_bits.tri", [0x80000000, 1, 31], ref_bits, name="t_bits_edge"),
    simple("uint/tests/t_range.tri", [0x12345678, 54321], ref_range),
    case("uint/tests/t_range_fail.tri", [70000], None, fails_with="AssertionFailed"),
    simple("uint/tests/t_numth.tri", [1_234_567_890, 987_654_330], ref_numth),
    simple("bigint/tests/t_carry.tri", [MASK32, 3_000_000_000, MASK32], ref_carry),
    simple("bigint/tests/t_carry.tri", [5, 9, 1], ref_carry, name="t_carry_small"),
    simple("bigint/tests/t_u64.tri", [X, 0x12345678, 0x9ABCDEF0], ref_u64),
    simple("bigint/tests/t_u64.tri", [0, 0, 1], ref_u64, name="t_u64_zero"),
    simple("bigint/tests/t_u128.tri", [X, Y, 0x0123_4567_89AB_CDEF, 2**63 + 5], ref_u128),
    simple(
        "bigint/tests/t_limbs.tri", [3, MASK32, 5, 0x8000_0000, 1, MASK32, 0x7FFF_FFFF], ref_limbs
    ),
    simple("bigint/tests/t_limbs.tri", [2, 1, 0, 0, 0], ref_limbs, name="t_limbs_zero_b"),
    simple("hash/tests/t_digest.tri", [X, 42], ref_digest),
    simple("hash/tests/t_sponge.tri", list(range(101, 121)), ref_sponge),
    merkle_case(5),
    merkle_case(2),
    merkle_fail_case(5),
    simple("hash/tests/t_commit.tri", [31337, X], ref_commit, secret=[31337, X]),
    simple("array/tests/t_reduce.tri", [6, 4, 0, 9, 2, 7, 3], ref_reduce),
    reduce_ram_case([MASK32, 0, 17, 2**31, 5, 0, 99, 123456, 7, 1]),
    simple("array/tests/t_scan.tri", [6, 4, 1, 9, 2, 7, 3], ref_scan),
    simple("array/tests/t_copy.tri", [7, 1, 2, 3, 4, 5, 6, 7], ref_copy),
    simple("array/tests/t_copy.tri", [5, 1, 2, 3, 2, 1], ref_copy, name="t_copy_palindrome"),
    simple("array/tests/t_search.tri", [6, 5, 8, 3, 8, 1, 2, 8], ref_search),
    simple("array/tests/t_search.tri", [4, 1, 2, 3, 4, 9], ref_search, name="t_search_miss"),
    fixed_case([3, 1, 4, 1_000_000_007], 17),
    simple("array/tests/t_matrix.tri", [1, 2, 3, 4, 5, 6, 7, 8, 10, 1, 0, P - 1], ref_matrix),
    case(
        "kernel/tests/t_io.tri",
        [7, 8, 9, 1, 2, 3, 4, 5, 1, 10, 11, 12, 3, 100, 200, 300],
        ref_io([7, 8, 9, 1, 2, 3, 4, 5, 1, 10, 11, 12, 3, 100, 200, 300], [55, 66]),
        secret=[55, 66],
    ),
    case("kernel/tests/t_guards.tri", [0, 3], [3, 3]),
    case("kernel/tests/t_guards_fail.tri", [1024], None, fails_with="AssertionFailed"),
    simple("kernel/tests/t_ledger.tri", [500, 20, 120], ref_ledger),
    case("kernel/tests/t_ledger_fail.tri", [50, 51], None, fails_with="AssertionFailed"),
    auth_case(),
    dispatch_case(
        [(0, 3), (0, 4), (1, 0), (4, 0), (2, 0), (0, 10), (5, 0), (3, 0), (6, 0), (7, 0), (9, 0)],
        "t_dispatch",
    ),
    dispatch_case(
        [(0, X), (0, Y), (2, 0), (0, 5), (4, 0), (1, 0), (5, 0), (3, 0)], "t_dispatch_deep"
    ),
    vote_case([0, 1, 2, 1, 1, 2, 0], [5, 1, 2, 3, 4, 5, 6], [1, 0, 1, 1], "t_vote"),
    vote_case([2, 2, 0, 1], [1, 1, 1, 9], [0, 0, 1], "t_vote_no_majority"),
    simple("events/tests/t_token.tri", [1001, 2002, 40], ref_token),
    notes_case(77, 250, 5, 999),
    simple("events/tests/t_audit.tri", [X, 8], ref_audit),
    simple("events/tests/t_audit_wide.tri", [X, 8], ref_audit_wide),
]


# == running ==================================================================================


@functools.cache
def compiled(program: str, spill: str = "lru"):
    """Compile, link, lower and parse one program (cached: several cases share one);
    ``spill`` is the frontend's spill policy.

    `compile_project` concatenates the per-module TIR with module-local labels (like
    upstream ``build_tir_project``): two modules' ``loop__1`` collide and cross-module
    calls stay ``@module__fn``. `link` gives the runnable whole-program op list.
    """
    from tasmopt.frontend import compile_modules, link
    from tasmopt.lower.triton import lower
    from tasmopt.tasm.parser import parse

    ops = link(compile_modules(str(CORPUS / program), [str(CORPUS)], spill=spill))
    return parse(lower(ops).text())


def run_case(c: Case, spill: str = "lru"):
    return run_on(compiled(c.program, spill), c)


def run_on(prog, c: Case):
    """Run a parsed program on the case's inputs (no table measurement)."""
    from tasmopt.vm.simulator import VmInput, run

    return run(
        prog,
        VmInput(public_input=c.public, secret_input=c.secret, secret_digests=c.digests, ram=c.ram),
        step_limit=STEP_LIMIT,
        measure=False,
    )


@pytest.mark.parametrize("spill", ["lru", "next-use"])
@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_program(c: Case, spill: str):
    """Every program under both spill policies of the frontend (``next-use``: furthest next
    use first, dead variables dropped; issue 11 item 3)."""
    r = run_case(c, spill)
    if c.expected is None:
        assert r.error is not None, f"expected a failure, got output {r.public_output}"
        assert r.error.kind == c.fails_with, r.error
        return
    assert r.error is None, r.error
    assert list(r.public_output) == list(c.expected)


def test_every_module_has_a_test_program():
    modules = {p.relative_to(CORPUS).with_suffix("").as_posix() for p in CORPUS.glob("*/*.tri")}
    used = set()
    for c in CASES:
        text = (CORPUS / c.program).read_text()
        used |= {u.replace(".", "/") for u in re.findall(r"^use\s+([\w.]+)", text, re.M)}
    assert modules <= used, sorted(modules - used)


# == corpus size ==============================================================================

FN_WITH_BODY = re.compile(r"^\s*(?:#\[[^\]]*\]\s*)*(?:pub\s+)?fn\s+\w+[^{\n]*\{", re.M)


def corpus_counts() -> tuple[int, int]:
    """(modules, functions with bodies) over corpus/*/*.tri (test programs excluded)."""
    files = sorted(CORPUS.glob("*/*.tri"))
    return len(files), sum(len(FN_WITH_BODY.findall(f.read_text())) for f in files)


def test_corpus_size():
    modules, functions = corpus_counts()
    assert modules >= 40, modules
    assert functions >= 300, functions


def test_holdout_is_whole_modules():
    names = [
        ln.strip()
        for ln in (CORPUS / "holdout.txt").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    modules = {
        p.relative_to(CORPUS).with_suffix("").as_posix().replace("/", ".")
        for p in CORPUS.glob("*/*.tri")
    }
    assert set(names) <= modules, sorted(set(names) - modules)
    assert 0.10 <= len(names) / len(modules) <= 0.20
