"""Candidate sources: what proposes cheaper TASM for straight-line blocks (design §1).

A source sees every block of a request at once (the model decodes them as one batch) and
returns, per block, candidate instruction lists. Sources only propose; the verifier decides.
Registered sources are looked up by name from `CompileOptions.sources`; a source that is not
registered (e.g. ``model`` before a checkpoint is loaded) is skipped.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from tasmopt import rules
from tasmopt.report import CompileOptions
from tasmopt.tasm.program import Instr
from tasmopt.tir.ops import Op

__all__ = ["BlockTask", "CandidateSource", "RulesSource", "register", "unregister", "get",
           "registered"]


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
    """

    function: str
    index: int
    path: str
    ops: tuple[Op, ...]
    baseline: tuple[Instr, ...]
    entry_depth: int
    net_effect: int
    tir_hash: str


class CandidateSource(Protocol):
    """What a candidate source implements."""

    name: str

    def propose(self, tasks: Sequence[BlockTask],
                options: CompileOptions) -> list[list[list[Instr]]]:
        """Candidates per task, in task order (``[]`` for a task it has nothing for)."""
        ...


class RulesSource:
    """Classical rewrite rules (`tasmopt.rules`)."""

    name = "rules"

    def propose(self, tasks: Sequence[BlockTask],
                options: CompileOptions) -> list[list[list[Instr]]]:
        return [rules.candidates(t.baseline) for t in tasks]


_LOCK = threading.Lock()
_REGISTRY: dict[str, CandidateSource] = {}
_BUILTINS_LOADED = False


def _builtins() -> None:
    """Register the built-in sources on first use (the search imports this module)."""
    global _BUILTINS_LOADED
    if _BUILTINS_LOADED:
        return
    _BUILTINS_LOADED = True
    from tasmopt.search.source import SearchSource

    _REGISTRY.setdefault("rules", RulesSource())
    _REGISTRY.setdefault("search", SearchSource())


def register(source: CandidateSource) -> None:
    """Register (or replace) a source under ``source.name``."""
    with _LOCK:
        _builtins()
        _REGISTRY[source.name] = source


def unregister(name: str) -> None:
    with _LOCK:
        _builtins()
        _REGISTRY.pop(name, None)


def get(name: str) -> CandidateSource | None:
    with _LOCK:
        _builtins()
        return _REGISTRY.get(name)


def registered() -> tuple[str, ...]:
    with _LOCK:
        _builtins()
        return tuple(_REGISTRY)
