"""Witnesses for differential checks: initial stacks, input streams and RAM (design §2).

Witness ``k`` of a seed draws every value from one *family* so that the values are correlated
enough to exercise comparisons and u32 paths, and random enough for polynomial identity
testing: all zeros, all ones, tiny values, small u32s, random u32s, boundary values
(0, 1, p-1, 2^32-1, ...), one repeated value, and random field elements.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from tasmopt.isa import P
from tasmopt.vm.evaluate import Assignment
from tasmopt.vm.state import VmInput

__all__ = ["Witness", "FAMILIES", "CONTROL_FAMILIES", "witness", "witnesses", "FilledRam"]

_BOUNDARY = (0, 1, 2, P - 1, P - 2, 2**32 - 1, 2**32, 2**31, 2**63, 2**32 + 1, 3, 5)

#: Value families, in the order witnesses cycle through them. Random field elements take
#: half of the witnesses (they carry the Schwartz–Zippel argument).
FAMILIES = (
    "zeros",
    "ones",
    "tiny",
    "small_u32",
    "u32",
    "boundary",
    "repeated",
    "field",
    "field",
    "u32",
    "field",
    "tiny",
    "field",
    "small_u32",
    "field",
    "field",
)

#: Families for whole functions with loops and branches: mostly small values, so that loop
#: counters stay small and u32 paths run to the end (their blocks are proven separately).
CONTROL_FAMILIES = (
    "tiny",
    "small_u32",
    "zeros",
    "ones",
    "u32",
    "tiny",
    "small_u32",
    "boundary",
    "field",
    "tiny",
    "small_u32",
    "tiny",
    "repeated",
    "tiny",
    "small_u32",
    "tiny",
)


class FilledRam(Mapping[int, int]):
    """Initial RAM where every address holds a pseudo-random value of a family.

    Reads of addresses never written see a deterministic value derived from the seed and
    the address, so baseline and candidate read the same "unknown" memory.
    """

    def __init__(self, family: str, seed: int, overrides: Mapping[int, int] | None = None) -> None:
        self.family = family
        self.seed = seed
        self._cache: dict[int, int] = dict(overrides or {})

    def __getitem__(self, addr: int) -> int:
        v = self._cache.get(addr)
        if v is None:
            v = _draw(random.Random((self.seed << 64) | addr), self.family, 0)
            self._cache[addr] = v
        return v

    def get(self, addr: int, default: int | None = None) -> int:  # type: ignore[override]  # RAM reads never take a default: unwritten cells read the fill value
        return self[addr]

    def fill_value(self, addr: int) -> int:
        """The value at ``addr`` (the simulator's hook for RAM defined everywhere)."""
        return self[addr]

    def __contains__(self, addr: object) -> bool:
        return isinstance(addr, int)

    def __iter__(self) -> Iterator[int]:
        return iter(())  # unbounded: nothing to enumerate

    def __len__(self) -> int:
        return 0


def _draw(rng: random.Random, family: str, repeated: int) -> int:
    if family == "zeros":
        return 0
    if family == "ones":
        return 1
    if family == "tiny":
        return rng.randrange(4)
    if family == "small_u32":
        return rng.randrange(256)
    if family == "u32":
        return rng.randrange(2**32)
    if family == "boundary":
        return rng.choice(_BOUNDARY)
    if family == "repeated":
        return repeated
    return rng.randrange(P)


@dataclass(frozen=True)
class Witness:
    """One entry state for a differential run.

    Attributes:
        index: witness number within its seed.
        family: value family (see `FAMILIES`).
        stack: initial op stack, bottom..top (length >= 16).
        public_input, secret_input: token streams.
        secret_digests: digests for ``merkle_step``.
        seed: seed of the RAM fill.
        sponge: the 16-word sponge state at entry, or None (uninitialised).
        ram_overrides: ``(address, value)`` pairs that replace the RAM fill (guard-directed
            witnesses place the values their guards need there).
        directed: the witness was solved from the guards (`tasmopt.vm.guards`).
    """

    index: int
    family: str
    stack: tuple[int, ...]
    public_input: tuple[int, ...]
    secret_input: tuple[int, ...]
    secret_digests: tuple[tuple[int, int, int, int, int], ...]
    seed: int
    sponge: tuple[int, ...] | None = None
    ram_overrides: tuple[tuple[int, int], ...] = ()
    directed: bool = False

    def ram(self) -> FilledRam:
        return FilledRam(self.family, self.seed, dict(self.ram_overrides))

    def vm_input(self) -> VmInput:
        """The simulator input of this witness (stack, streams, RAM, sponge)."""
        return VmInput(
            public_input=self.public_input,
            secret_input=self.secret_input,
            secret_digests=self.secret_digests,
            ram=self.ram(),
            initial_stack=self.stack,
            sponge=self.sponge,
        )

    def assignment(self) -> Assignment:
        """This witness as values of the symbolic executor's free variables."""
        ram = self.ram()
        return Assignment(
            stack={k: v for k, v in enumerate(reversed(self.stack))},
            public=dict(enumerate(self.public_input)),
            secret=dict(enumerate(self.secret_input)),
            digests={k: list(d) for k, d in enumerate(self.secret_digests)},
            sponge=None if self.sponge is None else list(self.sponge),
            ram=dict(self.ram_overrides),
            fill=ram.fill_value,
        )

    def with_assignment(self, a: Assignment) -> Witness:
        """A directed witness: this one with the values of ``a`` (streams and the stack are
        extended where ``a`` names deeper positions)."""
        depth = max([len(self.stack)] + [k + 1 for k in a.stack])
        top_down = [
            a.stack.get(k, self.stack[-1 - k] if k < len(self.stack) else 0) for k in range(depth)
        ]

        def stream(old: tuple[int, ...], new: dict[int, int]) -> tuple[int, ...]:
            n = max([len(old)] + [k + 1 for k in new])
            return tuple(new.get(k, old[k] if k < len(old) else 0) % P for k in range(n))

        n_dig = max([len(self.secret_digests)] + [k + 1 for k in a.digests])
        digs = tuple(
            tuple(
                a.digests.get(
                    k, self.secret_digests[k] if k < len(self.secret_digests) else (0,) * 5
                )
            )
            for k in range(n_dig)
        )
        return replace(
            self,
            stack=tuple(v % P for v in reversed(top_down)),
            public_input=stream(self.public_input, a.public),
            secret_input=stream(self.secret_input, a.secret),
            secret_digests=digs,  # type: ignore[arg-type]  # each digest has five words (built above)
            sponge=None if a.sponge is None else tuple(a.sponge),
            ram_overrides=tuple(sorted(a.ram.items())),
            directed=True,
        )


@lru_cache(maxsize=8192)
def witness(
    index: int,
    seed: int,
    *,
    depth: int,
    inputs: int = 16,
    digests: int = 4,
    families: tuple[str, ...] = FAMILIES,
    sponge: bool = True,
) -> Witness:
    """Witness ``index`` of ``seed``: a stack of ``depth`` elements (>= 16) and input streams
    of ``inputs`` tokens each (``digests`` secret digests), values from
    ``families[index % len(families)]``.

    With ``sponge`` (the default) the sponge starts initialised with 16 random field
    elements on all but every eighth witness (which starts uninitialised), so code that
    absorbs or squeezes runs, and an edit of what it absorbs shows in the final state.

    Deterministic in its arguments, and memoized (a `Witness` is immutable): every check of a
    request draws the same first witnesses of the same seed."""
    rng = random.Random(seed * 1_000_003 + index)
    family = families[index % len(families)]
    rep = rng.randrange(P)

    def draw() -> int:
        return _draw(rng, family, rep)

    stack = tuple(draw() for _ in range(max(depth, 16)))
    return Witness(
        index=index,
        family=family,
        stack=stack,
        public_input=tuple(draw() for _ in range(inputs)),
        secret_input=tuple(draw() for _ in range(inputs)),
        secret_digests=tuple(_digest(draw) for _ in range(digests)),
        seed=rng.randrange(2**62),
        sponge=(tuple(rng.randrange(P) for _ in range(16)) if sponge and index % 8 != 7 else None),
    )


def _digest(draw: Callable[[], int]) -> tuple[int, int, int, int, int]:
    return (draw(), draw(), draw(), draw(), draw())


def witnesses(count: int, seed: int, **kwargs: Any) -> list[Witness]:
    """The first ``count`` witnesses of ``seed``."""
    return [witness(i, seed, **kwargs) for i in range(count)]
