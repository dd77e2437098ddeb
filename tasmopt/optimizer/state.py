"""Shared pieces of the optimizer's stages: the per-function working state and the stage timer."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from tasmopt.report import (
    FunctionReport,
)
from tasmopt.sources import BlockTask
from tasmopt.tasm.program import Program
from tasmopt.vm.equivalence import (
    BlockCheck,
    Verdict,
)

__all__ = ["VerifyBackend", "stage", "FunctionState"]

log = logging.getLogger(__name__)


VerifyBackend = Callable[[list[BlockCheck]], list[Verdict]]


@contextmanager
def stage(timings: dict[str, float], name: str) -> Iterator[None]:
    """Add the seconds spent in the ``with`` body to ``timings[name]`` (a stage may run in
    pieces, e.g. ``verify``)."""
    t = time.perf_counter()
    try:
        yield
    finally:
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - t


@dataclass
class FunctionState:
    """Working state of one function during a compile, filled stage by stage.

    Attributes:
        name: the function's name.
        report: its `FunctionReport` (costs, fallback reason, blocks, rejections).
        reference: the program to beat and to prove against: the client's (when proven equal
            to our lowering) or ours; None if the function cannot even be harnessed.
        reference_is_client: ``reference`` is the client's program.
        passthrough: the baseline text is returned unchanged (unlowerable, a mismatch, ...).
        tasks: its rewritable blocks (prepare).
        block_ranges: ``(start, end)`` line range of each task in our lowering's text.
        chosen: per task index, the accepted ``(source, candidate lines, verdict)`` (rank).
        new_lines: our sections with the chosen blocks spliced in, once re-verified (splice).
    """

    name: str
    report: FunctionReport
    reference: Program | None = None  # what we must beat (client's or ours)
    reference_is_client: bool = False
    passthrough: bool = False  # emit the baseline text unchanged
    tasks: list[BlockTask] = field(default_factory=list)
    block_ranges: list[tuple[int, int]] = field(default_factory=list)
    chosen: dict[int, tuple[str, list[str], Verdict]] = field(default_factory=dict)
    new_lines: list[str] | None = None  # our sections with chosen blocks spliced
