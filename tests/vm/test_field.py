"""Goldilocks base field and its cubic extension (Triton VM spec §1, §2)."""

import random

import pytest

from tasmopt.vm import field as F
from tasmopt.vm import xfield as X

P = F.P
rng = random.Random(7)
SAMPLES = [0, 1, 2, P - 1, P - 2, 2**32 - 1, 2**32, 2**63] + [rng.randrange(P) for _ in range(20)]


def test_prime():
    assert P == 2**64 - 2**32 + 1 == 18446744069414584321


def test_add_sub_neg_wrap():
    assert F.add(P - 1, 1) == 0
    assert F.add(P - 1, P - 1) == P - 2
    assert F.sub(0, 1) == P - 1
    assert F.neg(1) == P - 1 and F.neg(0) == 0
    for a in SAMPLES:
        for b in SAMPLES[:8]:
            assert F.add(a, b) == (a + b) % P
            assert F.sub(a, b) == (a - b) % P
            assert F.add(F.sub(a, b), b) == a


def test_mul_pow_inv():
    assert F.mul(P - 1, P - 1) == 1
    assert F.pow(2, 64) == 2**32 - 1  # 2^64 = 2^32 - 1 mod p
    assert F.pow(0, 0) == 1
    for a in SAMPLES:
        if a:
            assert F.mul(a, F.inv(a)) == 1
    with pytest.raises(ZeroDivisionError):
        F.inv(0)
    with pytest.raises(ZeroDivisionError):
        F.inv(P)


def test_montgomery_roundtrip():
    assert F.montgomery(1) == 2**32 - 1
    for a in SAMPLES:
        assert F.from_montgomery(F.montgomery(a)) == a
        assert F.montgomery(a) == a * (2**32 - 1) % P


def test_is_u32():
    assert F.is_u32(0) and F.is_u32(2**32 - 1)
    assert not F.is_u32(2**32) and not F.is_u32(P - 1)


def test_xfield_mul_twenty_first_vectors():
    # twenty-first x_field_mul_test (spec §2)
    assert X.mul((13, 2, 3), (19, 0, 5)) == (237, 33, 137)
    assert X.mul((0, 0, 1), (0, 0, 1)) == (0, P - 1, 1)  # x^2 * x^2 = x^4 = x^2 - x
    assert X.mul((0, 1, 0), (0, 0, 1)) == (P - 1, 1, 0)  # x^3 = x - 1


def test_xfield_ring_properties():
    xs = [tuple(rng.randrange(P) for _ in range(3)) for _ in range(10)]
    for a in xs:
        assert X.mul(a, X.ONE) == a
        assert X.add(a, X.neg(a)) == X.ZERO
        assert X.sub(a, a) == X.ZERO
        for b in xs[:3]:
            assert X.mul(a, b) == X.mul(b, a)
            for c in xs[:2]:
                assert X.mul(a, X.add(b, c)) == X.add(X.mul(a, b), X.mul(a, c))
                assert X.mul(X.mul(a, b), c) == X.mul(a, X.mul(b, c))


def test_xfield_scalar_and_lift():
    a = (5, 6, 7)
    assert X.scalar_mul(3, a) == (15, 18, 21)
    assert X.mul(X.lift(3), a) == X.scalar_mul(3, a)
    assert X.lift(-1) == (P - 1, 0, 0)


def test_xfield_inverse():
    for a in [(1, 0, 0), (0, 1, 0), (0, 0, 1), (P - 1, P - 1, P - 1)] + [
        tuple(rng.randrange(P) for _ in range(3)) for _ in range(20)
    ]:
        assert X.mul(a, X.inv(a)) == X.ONE
    assert X.inv((5, 0, 0)) == (F.inv(5), 0, 0)
    # agrees with a^(p^3 - 2)
    a = (3, 1, 4)
    assert X.inv(a) == X.pow(a, P**3 - 2)
    with pytest.raises(ZeroDivisionError):
        X.inv(X.ZERO)
