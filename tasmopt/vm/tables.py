"""Heights of the nine algebraic execution tables of a run, and their bookkeeping (spec §7).

The simulator counts static rows per instruction (from the instruction table) and collects
two value-dependent sets: the distinct U32 keys and the 16-bit limbs looked up by Tip5
permutations (Cascade). Program attestation depends only on the program and is cached on it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import NamedTuple

from tasmopt.isa import P
from tasmopt.tasm.program import Program
from tasmopt.vm import tip5
from tasmopt.vm.field import MONTGOMERY_R

__all__ = [
    "LOOKUP_HEIGHT",
    "TableHeights",
    "Attestation",
    "attestation",
    "next_power_of_two",
    "u32_rows",
    "u32_height",
    "add_cascade_limbs",
    "cascade_limbs_of_trace",
    "measured_permutation",
]

#: The Lookup table always has 256 rows (spec §7.9), hence the minimum padded height.
LOOKUP_HEIGHT = 256

_PACK20 = struct.Struct("<20Q").pack
_UNPACK80 = struct.Struct("<80H").unpack


def next_power_of_two(n: int) -> int:
    """Smallest power of two ``>= n`` (1 for ``n <= 1``)."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


@dataclass(frozen=True)
class TableHeights:
    """Unpadded heights of the nine AET tables (Triton VM spec §7), in rows."""

    program: int
    processor: int
    op_stack: int
    ram: int
    jump_stack: int
    hash: int
    u32: int
    cascade: int
    lookup: int = LOOKUP_HEIGHT

    @property
    def padded_height(self) -> int:
        """Next power of two of the tallest table; at least 256 because Lookup has 256 rows."""
        return next_power_of_two(max(self.as_dict().values()))

    @property
    def log2_padded_height(self) -> int:
        return self.padded_height.bit_length() - 1

    def as_dict(self) -> dict[str, int]:
        """Table name -> height, in the field order above."""
        return {name: getattr(self, name) for name in _TABLE_NAMES}

    def max_table(self) -> str:
        """Name of the tallest table (first in field order on ties)."""
        d = self.as_dict()
        return max(d, key=d.__getitem__)


_TABLE_NAMES = tuple(f.name for f in fields(TableHeights))


def u32_rows(key: tuple[str, int, int]) -> int:
    """U32 rows of one distinct key ``(instruction, lhs, rhs)``: ``1 + bitlen(D)``, with
    ``D = rhs`` for ``pow`` and ``max(lhs, rhs)`` otherwise (spec §7.7)."""
    name, lhs, rhs = key
    d = rhs if name == "pow" else max(lhs, rhs)
    return 1 + d.bit_length()


def u32_height(keys: Iterable[tuple[str, int, int]]) -> int:
    """Height of the U32 table for a set of distinct keys."""
    return sum(u32_rows(k) for k in keys)


def add_cascade_limbs(limbs: set[int], montgomery: list[int]) -> None:
    """Add the four 16-bit limbs of each of the 20 Montgomery-form words of one permutation
    (words 0..3 of trace rows 0..4, see `tip5.permutation_with_lookups`) to ``limbs``
    (spec §7.8)."""
    limbs.update(_UNPACK80(_PACK20(*montgomery)))


def cascade_limbs_of_trace(trace: list[list[int]]) -> set[int]:
    """The Cascade limbs of one permutation given its 6-state trace (spec §7.8)."""
    limbs: set[int] = set()
    add_cascade_limbs(limbs, [x * MONTGOMERY_R % P for row in trace[:5] for x in row[:4]])
    return limbs


def measured_permutation(limbs: set[int]) -> Callable[[list[int]], list[int]]:
    """A Tip5 permutation that also records its Cascade limbs into ``limbs``."""
    permute = tip5.permutation_with_lookups
    update = limbs.update

    def measured(state: list[int]) -> list[int]:
        out, montgomery = permute(state)
        update(_UNPACK80(_PACK20(*montgomery)))
        return out

    return measured


class Attestation(NamedTuple):
    """What program attestation contributes, computed once per program (spec §8, §7).

    Attributes:
        digest: ``hash_varlen(words)``, 5 words ``d0..d4``.
        program_rows: Program table height ``10·ceil((L+1)/10)``.
        hash_rows: ``6·ceil((L+1)/10)``.
        limbs: Cascade limbs of the attestation permutations.
    """

    digest: tuple[int, ...]
    program_rows: int
    hash_rows: int
    limbs: frozenset[int]


def attestation(program: Program) -> Attestation:
    """Program attestation of ``program``: digest, rows and limbs (cached on the program, and
    by the program's words: the verifier rebuilds the same baseline for every candidate)."""
    cached = program._cache.get("vm.attestation")
    if isinstance(cached, Attestation):
        return cached
    att = _attest(tuple(program.words()))
    program._cache.setdefault("vm.attestation", att)
    return att


@lru_cache(maxsize=4096)
def _attest(words: tuple[int, ...]) -> Attestation:
    padded = tip5.pad_varlen(words)
    chunks = len(padded) // tip5.RATE
    limbs: set[int] = set()
    state = [0] * tip5.STATE_SIZE
    for c in range(chunks):
        state, montgomery = tip5.permutation_with_lookups(
            padded[c * tip5.RATE : (c + 1) * tip5.RATE] + state[tip5.RATE :]
        )
        add_cascade_limbs(limbs, montgomery)
    return Attestation(
        tuple(state[: tip5.DIGEST_LENGTH]), tip5.RATE * chunks, 6 * chunks, frozenset(limbs)
    )
