"""Goldilocks base field F_p, p = 2^64 - 2^32 + 1, on plain Python ints (Triton VM spec §1).

Elements are canonical ints in ``[0, P)``. Everything is a plain function on ints for speed.
"""

from __future__ import annotations

import builtins

from tasmopt.isa import P  # the Goldilocks prime 2^64 - 2^32 + 1, defined once

MONTGOMERY_R: int = 0xFFFF_FFFF
"""R = 2^64 mod p = 2^32 - 1 (Triton VM spec §7.8, §9)."""

U32_MAX: int = 0xFFFF_FFFF


def add(a: int, b: int) -> int:
    """Return ``a + b mod p`` for canonical a, b."""
    s = a + b
    return s - P if s >= P else s


def sub(a: int, b: int) -> int:
    """Return ``a - b mod p`` for canonical a, b."""
    d = a - b
    return d + P if d < 0 else d


def mul(a: int, b: int) -> int:
    """Return ``a * b mod p``."""
    return a * b % P


def neg(a: int) -> int:
    """Return ``-a mod p`` for canonical a."""
    return P - a if a else 0


def pow(base: int, exponent: int) -> int:  # noqa: A001 - mirrors the VM instruction name
    """Return ``base ** exponent mod p``; ``exponent`` is a non-negative int (0**0 = 1)."""
    return builtins.pow(base, exponent, P)


def inv(a: int) -> int:
    """Return the multiplicative inverse of ``a``.

    Raises:
        ZeroDivisionError: if ``a == 0 mod p`` (the simulator maps this to InverseOfZero).
    """
    a %= P
    if a == 0:
        raise ZeroDivisionError("inverse of zero in F_p")
    return builtins.pow(a, P - 2, P)


def canon(x: int) -> int:
    """Reduce any Python int (possibly negative) to its canonical representative."""
    return x % P


def montgomery(x: int) -> int:
    """Return the Montgomery form ``x * (2^32 - 1) mod p`` (Triton VM spec §7.8, §9)."""
    return x * MONTGOMERY_R % P


def from_montgomery(m: int) -> int:
    """Inverse of :func:`montgomery`: return ``m * R^-1 mod p``."""
    return m * _R_INV % P


def is_u32(x: int) -> bool:
    """True iff the canonical element ``x`` is < 2^32 (Triton VM spec §5.7)."""
    return 0 <= x <= U32_MAX


_R_INV: int = builtins.pow(MONTGOMERY_R, P - 2, P)
