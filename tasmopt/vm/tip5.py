"""Tip5 permutation and sponge of Triton VM / twenty-first (Triton VM spec §9).

Constants come from package data ``tasmopt/data/tip5_constants.json``, loaded once. States
are sequences of 16 canonical field elements; functions return new lists (or tuples).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources
from typing import Any

from tasmopt.isa import P

__all__ = [
    "STATE_SIZE",
    "RATE",
    "CAPACITY",
    "DIGEST_LENGTH",
    "NUM_ROUNDS",
    "permutation",
    "permutation_trace",
    "permutation_with_lookups",
    "hash_10",
    "hash_fixed",
    "hash_pair",
    "hash_varlen",
    "Sponge",
    "constants",
]

STATE_SIZE = 16
RATE = 10
CAPACITY = 6
DIGEST_LENGTH = 5
NUM_ROUNDS = 5
NUM_SPLIT_AND_LOOKUP = 4

_R = 0xFFFF_FFFF  # Montgomery R = 2^64 mod p
_R_INV = pow(_R, P - 2, P)


def _load() -> dict[str, Any]:
    text = resources.files("tasmopt").joinpath("data/tip5_constants.json").read_text()
    data: dict[str, Any] = json.loads(text)
    if data["field_prime"] != P or data["state_size"] != STATE_SIZE:
        raise ValueError("tip5_constants.json does not describe Tip5 over the Goldilocks field")
    return data


_DATA = _load()


def constants() -> dict[str, Any]:
    """The parsed constants file (lookup table, MDS column, round constants, test vectors)."""
    return _DATA


_LOOKUP = bytes(_DATA["lookup_table"])  # byte -> byte, for bytes.translate
_MDS_COL: tuple[int, ...] = tuple(_DATA["mds_matrix_first_column"])
_RC: tuple[tuple[int, ...], ...] = tuple(tuple(r) for r in _DATA["round_constants_by_round"])

# The circulant MDS product via one big-integer multiplication (the linear layer is the
# inner loop of every hash). Pack the 16 words (< 2^64) as 96-bit limbs of one int S and the
# first column as 96-bit limbs of K; limb t of S·K is the linear convolution
# c[t] = sum_j col[t - j]·s[j] (< 16 · 2^16 · 2^64 = 2^84, so no carry crosses a limb), and
# the cyclic product is new[i] = c[i] + c[i + 16]: the low 16 limbs plus the high ones.
# Each 96-bit limb is read back as a (64-bit lo, 32-bit hi) pair; 2^64 = 2^32 - 1 (mod p).
_LIMB_BITS = 96
_LOW_MASK = (1 << (_LIMB_BITS * 16)) - 1
_HIGH_SHIFT = _LIMB_BITS * 16
_MDS_PACKED = sum(c << (_LIMB_BITS * t) for t, c in enumerate(_MDS_COL))
_PACK_LIMBS = struct.Struct("<" + "Q4x" * 16).pack
_UNPACK_LIMBS = struct.Struct("<" + "QI" * 16).unpack
_PACK4 = struct.Struct("<4Q").pack
_UNPACK4 = struct.Struct("<4Q").unpack


def _mds_reference(state: Sequence[int]) -> list[int]:
    """Plain circulant matrix-vector product (spec §9); the reference for the fast version."""
    return [sum(_MDS_COL[(i - j) % 16] * state[j] for j in range(16)) % P for i in range(16)]


def _permute(
    state: Sequence[int], montgomery: list[int] | None = None, trace: list[list[int]] | None = None
) -> list[int]:
    """The permutation. Between rounds words are kept unreduced (< 2^66) and reduced by the
    next S-box. Optionally collects the Montgomery forms of words 0..3 of each state entering
    a round (what the Cascade table looks up) and the canonical trace."""
    xs = list(state)
    if len(xs) != STATE_SIZE:
        raise ValueError(f"Tip5 state must have {STATE_SIZE} words, got {len(xs)}")
    p, r, r_inv, lut = P, _R, _R_INV, _LOOKUP
    for rc in _RC:
        if trace is not None:
            trace.append([x % p for x in xs])
        # S-box: split-and-lookup on words 0..3 (bytes of the Montgomery form), x^7 on 4..15
        m = [x * r % p for x in xs[:4]]
        if montgomery is not None:
            montgomery += m
        t = [y * r_inv % p for y in _UNPACK4(_PACK4(*m).translate(lut))]
        for x in xs[4:]:
            x3 = x * x * x % p
            t.append(x3 * x3 * x % p)
        # linear layer and round constants
        c = int.from_bytes(_PACK_LIMBS(*t), "little") * _MDS_PACKED
        w = _UNPACK_LIMBS(((c & _LOW_MASK) + (c >> _HIGH_SHIFT)).to_bytes(192, "little"))
        xs = [lo + hi * r + k for lo, hi, k in zip(w[0::2], w[1::2], rc, strict=True)]
    out = [x % p for x in xs]
    if trace is not None:
        trace.append(out)
    return out


def permutation(state: Sequence[int]) -> list[int]:
    """Apply the Tip5 permutation to a 16-word state (canonical ints); returns a new list.

    Memoized (`PERMUTATION_CACHE` states): the verifier and the search run many programs
    that share a prefix on the same inputs (a STOKE chain's proposals differ in one place),
    so the same states are permuted again and again; the permutation is a pure function.

    Raises:
        ValueError: the state does not have 16 words.
    """
    return list(_permutation(tuple(state))[0])


def permutation_with_lookups(state: Sequence[int]) -> tuple[list[int], list[int]]:
    """The permutation, plus the 20 Montgomery-form words its S-box lookups split into limbs:
    words 0..3 of trace rows 0..4, row by row (Triton VM spec §7.8). Memoized like
    `permutation`."""
    out, montgomery = _permutation(tuple(state))
    return list(out), list(montgomery)


#: States whose permutation (and S-box lookups) are remembered, most recently used.
PERMUTATION_CACHE = 1 << 14


@lru_cache(maxsize=PERMUTATION_CACHE)
def _permutation(state: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    montgomery: list[int] = []
    return tuple(_permute(state, montgomery=montgomery)), tuple(montgomery)


def permutation_trace(state: Sequence[int]) -> list[list[int]]:
    """The 6-state trace of one permutation: the input, then the state after each round.

    Rows 0..4 are the states entering a round (the ones the Cascade table looks up, spec §7.8).
    """
    trace: list[list[int]] = []
    _permute(state, trace=trace)
    return trace


def hash_fixed(words: Sequence[int]) -> list[int]:
    """Fixed-length hash of exactly 10 words: capacity set to 1, one permutation, 5-word digest."""
    if len(words) != RATE:
        raise ValueError(f"fixed-length hash takes {RATE} words, got {len(words)}")
    return permutation(list(words) + [1] * CAPACITY)[:DIGEST_LENGTH]


hash_10 = hash_fixed


def hash_pair(left: Sequence[int], right: Sequence[int]) -> list[int]:
    """Hash two 5-word digests (fixed-length domain): ``hash_10(left ++ right)``."""
    return hash_fixed(list(left) + list(right))


def pad_varlen(words: Sequence[int]) -> list[int]:
    """Append a 1 and then 0s up to a multiple of 10 (spec §8)."""
    out = list(words) + [1]
    out += [0] * (-len(out) % RATE)
    return out


def hash_varlen(words: Sequence[int]) -> list[int]:
    """Variable-length sponge hash (program digest, spec §8): zero capacity, pad, absorb, 5 words."""
    sponge = Sponge()
    sponge.absorb_padded(words)
    return sponge.state[:DIGEST_LENGTH]


class Sponge:
    """Tip5 sponge in the variable-length domain (capacity starts at 0), spec §5.5 and §9.

    ``absorb`` overwrites the rate and permutes; ``squeeze`` returns the rate then permutes.
    """

    __slots__ = ("state",)

    def __init__(self, state: Sequence[int] | None = None) -> None:
        self.state: list[int] = [0] * STATE_SIZE if state is None else list(state)

    def absorb(self, chunk: Sequence[int]) -> None:
        """Overwrite ``state[0..10]`` with the 10 words of ``chunk`` and permute."""
        if len(chunk) != RATE:
            raise ValueError(f"absorb takes {RATE} words, got {len(chunk)}")
        self.state = permutation(list(chunk) + self.state[RATE:])

    def absorb_padded(self, words: Sequence[int]) -> None:
        """Pad ``words`` (spec §8) and absorb them chunk by chunk."""
        padded = pad_varlen(words)
        for i in range(0, len(padded), RATE):
            self.absorb(padded[i : i + RATE])

    def squeeze(self) -> list[int]:
        """Return ``state[0..10]``, then permute."""
        out = self.state[:RATE]
        self.state = permutation(self.state)
        return out
