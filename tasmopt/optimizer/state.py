"""Shared pieces of the optimizer's stages: the per-function working state, the stage timer,
and the deadline checks (`tasmopt.deadline`): past the deadline a stage returns what is proven."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from tasmopt.report import BlockTrajectories, CachedFunction, CompileOptions, FunctionReport
from tasmopt.sources import BlockTask
from tasmopt.tasm.program import Program
from tasmopt.vm.equivalence import (
    BlockCheck,
    FunctionVerdict,
    Verdict,
    no_taller,
    no_taller_at_runtime,
    padded_height,
)

__all__ = [
    "VerifyBackend",
    "stage",
    "FunctionState",
    "out_of_time",
    "verify_within",
    "apply_costs",
    "adopt",
    "refusal",
]

log = logging.getLogger(__name__)


VerifyBackend = Callable[[list[BlockCheck]], list[Verdict]]


def out_of_time(options: CompileOptions) -> str | None:
    """Why the compile must stop now (``"request deadline reached"``, ``"request cancelled
    (client disconnected)"``), or None while its `Deadline` has time left."""
    dl = options.deadline
    if dl is None or not dl.expired:
        return None
    why = dl.why()
    return "request deadline reached" if why == "deadline" else f"request cancelled ({why})"


#: Checks sent to the verify backend at a time, so that a deadline can stop between chunks.
VERIFY_CHUNK = 16


def verify_within(
    verify: VerifyBackend, checks: list[BlockCheck], options: CompileOptions
) -> list[Verdict]:
    """Run ``checks`` through ``verify`` in chunks while the deadline allows; the checks left
    when it expires are answered unverified (so their blocks keep the baseline: fail closed).

    A backend with its own deadlines (``bounded = True``, e.g. the RQ pool's, which fans one
    call out over the workers) gets every check in one call (chunks would wait in turn),
    with the request's deadline as ``deadline=``; it must not wait past it."""
    if getattr(verify, "bounded", False):  # e.g. worker.verifier.RqVerifier
        bounded: Any = verify  # takes the request's deadline as a keyword
        return list(bounded(checks, deadline=options.deadline)) if checks else []
    if options.deadline is None:
        return verify(checks) if checks else []
    out: list[Verdict] = []
    for k in range(0, len(checks), VERIFY_CHUNK):
        why = out_of_time(options)
        if why is not None:
            out += [Verdict(False, "rejected", f"unverified: {why}")] * (len(checks) - k)
            break
        out += verify(checks[k : k + VERIFY_CHUNK])
    return out


def apply_costs(rep: FunctionReport, v: FunctionVerdict) -> None:
    """A function's report takes the costs of a whole-function measurement: cycles and
    table heights of the candidate and the baseline, their padded heights, halting runs."""
    rep.cycles, rep.baseline_cycles = v.cycles, v.baseline_cycles
    rep.halted = v.halted
    rep.heights, rep.baseline_heights = v.heights, v.baseline_heights
    rep.padded_height = padded_height(v.heights)
    rep.baseline_padded_height = padded_height(v.baseline_heights)


def refusal(
    v: FunctionVerdict,
    best: int,
    *,
    tie: bool = False,
    longer: bool = False,
    current_padded: int = 0,
) -> str | None:
    """Why a function-level rewrite measured by ``v`` (`check_function` against the
    reference) is not kept — not equivalent on the witnesses, not fewer cycles than ``best``
    (not more, with ``tie``: the caller has another reason to prefer it), a table taller
    than the reference's (design §2; with ``longer``, a rewrite that trades program length
    for cycles, only the tables that grow with execution and the padded height count:
    `no_taller_at_runtime`, issue 11 item 7, and the padded height may not exceed
    ``current_padded`` either, that of the version it would replace when known: fewer
    cycles are no gain when the proof gets taller) — or None if it may be."""
    if not v.equivalent:
        return f"not verified: {v.reason}"
    if v.cycles > best or (v.cycles == best and not tie):
        return f"not kept: {v.cycles} cycles, {best} without"
    fits = no_taller_at_runtime if longer and v.cycles < best else no_taller
    if longer and current_padded and padded_height(v.heights) > current_padded:
        return f"not kept: padded height {padded_height(v.heights)}, {current_padded} without"
    if not fits(v.heights, v.baseline_heights):
        taller = sorted(t for t, h in v.heights.items() if h > v.baseline_heights.get(t, 0))
        return f"not kept: taller {', '.join(taller) or 'padded height'}"
    return None


def adopt(f: FunctionState, lines: list[str], best: int, v: FunctionVerdict, note: str) -> None:
    """``f`` takes a function-level rewrite: ``lines`` replace all its sections; ``v``
    measured them, ``best`` is its cycles before. Its own saving is what it had plus what the
    rewrite gained (its callees' savings stay theirs)."""
    rep = f.report
    f.new_lines, f.whole = lines, True
    rep.fallback, rep.reason = False, None
    if rep.source in ("compiler", "client"):
        rep.source = "rules"
    rep.notes.append(f"{note}: {best} -> {v.cycles} cycles")
    rep.rewrites.append(_STAGE.get() or "function")
    own = rep.own_cycles if rep.own_cycles is not None else rep.cycles
    rep.own_cycles = own - (best - v.cycles)
    apply_costs(rep, v)


def rewritable(f: FunctionState) -> bool:
    """A function-level pass may rewrite ``f``: it is worked on in this run (not outside
    ``CompileOptions.only``, not a cache hit), not passed through, and has a reference to be
    proven against; not settled by an earlier tier."""
    return not (
        f.passthrough or f.reference is None or f.cached is not None or f.skipped or f.settled
    )


#: The stage running now (`stage`), for `adopt`'s record of which pass rewrote a function.
_STAGE: ContextVar[str | None] = ContextVar("tasmopt_stage", default=None)


#: Told each stage's name as it starts (`progress`): the CLI's progress bar.
_PROGRESS: ContextVar[Callable[[str], None] | None] = ContextVar("tasmopt_progress", default=None)


@contextmanager
def progress(callback: Callable[[str], None]) -> Iterator[None]:
    """Within the ``with`` body, `stage` calls ``callback(name)`` as each stage of a compile
    starts (``lower``, ``candidates``, ``verify``, ``inline``, ``loops``, ...), in this
    thread or context only. The callback must not raise."""
    token = _PROGRESS.set(callback)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


@contextmanager
def stage(timings: dict[str, float], name: str) -> Iterator[None]:
    """Add the seconds spent in the ``with`` body to ``timings[name]`` (a stage may run in
    pieces, e.g. ``verify``); a rewrite kept by `adopt` inside is credited to ``name``."""
    t = time.perf_counter()
    token = _STAGE.set(name)
    tell = _PROGRESS.get()
    if tell is not None:
        tell(name)
    try:
        yield
    finally:
        _STAGE.reset(token)
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
        key: its result-cache key (`tasmopt.optimizer.keys`), if it may be cached.
        cached: the cache entry it was answered from (then no stage works on it).
        cut: why a stage did less for it than it would have with time left (the deadline),
            else None: a cut result is served but is not final.
        skipped: outside ``CompileOptions.only``: passed through, not measured.
        private: scratch cells its proofs may treat as unobservable once dead
            (`tasmopt.optimizer.contract`).
        whole: ``new_lines`` replace all of its sections (a function-level pass rewrote
            it), not just the chosen blocks.
        trajectories: every candidate judged for its blocks (rank), for the replay buffer.
        settled: an earlier tier of this compile already ran the function-level passes on
            the same spliced blocks (`tasmopt.optimizer.anytime`): later passes leave it.
    """

    name: str
    report: FunctionReport
    reference: Program | None = None  # what we must beat (client's or ours)
    reference_is_client: bool = False
    passthrough: bool = False  # emit the baseline text unchanged
    tasks: list[BlockTask] = field(default_factory=list)
    block_ranges: list[tuple[int, int]] = field(default_factory=list)
    chosen: dict[int, tuple[str, list[str], Verdict]] = field(default_factory=dict)
    new_lines: list[str] | None = None
    key: str | None = None
    cached: CachedFunction | None = None
    cut: str | None = None
    skipped: bool = False
    private: frozenset[int] = frozenset()
    whole: bool = False
    trajectories: list[BlockTrajectories] = field(default_factory=list)
    settled: bool = False

    def give_back_blocks(self) -> None:
        """Every block back to the baseline: its report says ``compiler`` with the baseline's
        code and costs, and the chosen candidates are forgotten."""
        for b in self.report.blocks:
            b.source, b.tasm, b.cycles, b.verified_by = (
                "compiler",
                b.baseline_tasm,
                b.baseline_cycles,
                None,
            )
            b.heights = dict(b.baseline_heights)
        self.chosen.clear()  # our sections with chosen blocks spliced
