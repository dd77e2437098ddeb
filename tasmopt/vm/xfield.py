"""Cubic extension field F_p[x]/(x^3 - x + 1) of Triton VM (spec §2), elements as int triples.

An element ``(c0, c1, c2)`` means ``c0 + c1·x + c2·x²`` with canonical coefficients.
"""

from __future__ import annotations

import builtins

from tasmopt.isa import P

XFE = tuple[int, int, int]

ZERO: XFE = (0, 0, 0)
ONE: XFE = (1, 0, 0)


def lift(b: int) -> XFE:
    """Embed the base-field element ``b`` as ``(b, 0, 0)``."""
    return (b % P, 0, 0)


def add(a: XFE, b: XFE) -> XFE:
    """Coefficient-wise sum."""
    return ((a[0] + b[0]) % P, (a[1] + b[1]) % P, (a[2] + b[2]) % P)


def sub(a: XFE, b: XFE) -> XFE:
    """Coefficient-wise difference."""
    return ((a[0] - b[0]) % P, (a[1] - b[1]) % P, (a[2] - b[2]) % P)


def neg(a: XFE) -> XFE:
    """Additive inverse."""
    return (-a[0] % P, -a[1] % P, -a[2] % P)


def mul(a: XFE, b: XFE) -> XFE:
    """Product modulo ``x^3 - x + 1`` (reduction ``x^3 = x - 1``; spec §2 formulas)."""
    a0, a1, a2 = a
    b0, b1, b2 = b
    return (
        (a0 * b0 - a2 * b1 - a1 * b2) % P,
        (a1 * b0 + a0 * b1 - a2 * b2 + a2 * b1 + a1 * b2) % P,
        (a2 * b0 + a1 * b1 + a0 * b2 + a2 * b2) % P,
    )


def scalar_mul(s: int, a: XFE) -> XFE:
    """Multiply every coefficient of ``a`` by the base-field element ``s``."""
    return (s * a[0] % P, s * a[1] % P, s * a[2] % P)


def pow(a: XFE, exponent: int) -> XFE:  # noqa: A001 - field-style API
    """``a ** exponent`` by square-and-multiply (``exponent >= 0``)."""
    result, base = ONE, a
    while exponent:
        if exponent & 1:
            result = mul(result, base)
        base = mul(base, base)
        exponent >>= 1
    return result


def inv(a: XFE) -> XFE:
    """Multiplicative inverse.

    Computed as ``a^(p^3 - 2)``'s equivalent via the norm: ``a^-1 = a^p · a^(p^2) / N(a)``,
    where ``N(a) = a · a^p · a^(p^2)`` lies in F_p. Same result as the reference's extended
    Euclid (Triton VM spec §2).

    Raises:
        ZeroDivisionError: if ``a`` is zero (the simulator maps this to InverseOfZero).
    """
    if not (a[0] or a[1] or a[2]):
        raise ZeroDivisionError("inverse of zero in F_p^3")
    frob1 = _frobenius(a)
    frob2 = _frobenius(frob1)
    conj = mul(frob1, frob2)
    norm = mul(a, conj)[0]
    norm_inv = builtins.pow(norm, P - 2, P)
    return scalar_mul(norm_inv, conj)


# Frobenius x -> x^p: precompute x^p and x^(2p) in the extension (constants of the field).
def _compute_frobenius_basis() -> tuple[XFE, XFE]:
    xp = pow((0, 1, 0), P)
    return xp, mul(xp, xp)


_XP, _X2P = _compute_frobenius_basis()


def _frobenius(a: XFE) -> XFE:
    """``a^p``: coefficients are fixed by Frobenius, so ``a^p = c0 + c1·x^p + c2·x^(2p)``."""
    c0, c1, c2 = a
    return (
        (c0 + c1 * _XP[0] + c2 * _X2P[0]) % P,
        (c1 * _XP[1] + c2 * _X2P[1]) % P,
        (c1 * _XP[2] + c2 * _X2P[2]) % P,
    )
