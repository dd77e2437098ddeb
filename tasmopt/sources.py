"""Candidate sources: what proposes cheaper TASM for straight-line blocks (design §1).

A source sees every block of a request at once (the model decodes them as one batch) and
returns, per block, candidate instruction lists. Sources only propose; the verifier decides.
The optimizer receives a `SourceSet` (no global registry: whoever calls it decides what may
propose) and looks sources up by the names in `CompileOptions.sources`; a name without a
source (e.g. ``model`` before a checkpoint is loaded) is skipped.
`tasmopt.optimizer.default_sources` builds the built-in set (rules and search).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from tasmopt.report import CompileOptions
from tasmopt.tasm.program import Instr
from tasmopt.tir.ops import Op

__all__ = ["BlockTask", "CandidateSource", "SourceSet"]


@dataclass(frozen=True)
class BlockTask:
    """One block to optimize.

    Attributes:
        function: enclosing function name.
        index: block index within the function.
        path: TIR path of its first op.
        ops: the block's TIR ops.
        baseline: the baseline's instructions for the block.
        entry_depth: stack elements the block reads on entry.
        net_effect: change of the stack length over the block.
        tir_hash: sha256 of the block's canonical TIR.
        dead_cells: private scratch cells dead after the block (`tasmopt.vm.scratch`): their
            final values are not observable, so a candidate may leave them unwritten.
        dead_slots: op-stack slots (st index) dead after the block in the reference's text
            (`tasmopt.vm.stack_liveness`): a candidate may leave anything there (same stack
            length).
    """

    function: str
    index: int
    path: str
    ops: tuple[Op, ...]
    baseline: tuple[Instr, ...]
    entry_depth: int
    net_effect: int
    tir_hash: str
    dead_cells: tuple[int, ...] = ()
    dead_slots: tuple[int, ...] = ()


class CandidateSource(Protocol):
    """What a candidate source implements."""

    name: str

    def propose(
        self, tasks: Sequence[BlockTask], options: CompileOptions
    ) -> list[list[list[Instr]]]:
        """Candidates per task, in task order (``[]`` for a task it has nothing for)."""
        ...


class SourceSet:
    """The candidate sources one caller (a service, a worker, a training run, a test) lets
    propose, by name. Thread-safe: the service's model watcher adds or removes ``model`` while
    compiles look sources up.

    Args:
        sources: initial sources; a later one replaces an earlier one of the same name.
    """

    def __init__(self, sources: Iterable[CandidateSource] = ()) -> None:
        self._lock = threading.Lock()
        self._by_name: dict[str, CandidateSource] = {s.name: s for s in sources}

    def add(self, source: CandidateSource) -> None:
        """Add (or replace) the source named ``source.name``."""
        with self._lock:
            self._by_name[source.name] = source

    def remove(self, name: str) -> None:
        """Remove the source ``name``; no error if there is none."""
        with self._lock:
            self._by_name.pop(name, None)

    def get(self, name: str) -> CandidateSource | None:
        with self._lock:
            return self._by_name.get(name)

    def names(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._by_name)

    def __repr__(self) -> str:
        return f"SourceSet({', '.join(self.names())})"
