"""Stage 5, ``rank``: per block, the best accepted candidate (verified, cycles <= the
baseline's, no table taller), by cycles, then the other tables, then size; candidate counts and
rejection classes go to the function's report."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence

from tasmopt.optimizer.state import FunctionState
from tasmopt.report import (
    BlockReport,
    BlockTrajectories,
    CandidateRecord,
    CandidateStats,
)
from tasmopt.sources import BlockTask
from tasmopt.vm.equivalence import (
    ACCEPTANCE_TABLES,
    BlockCheck,
    Verdict,
    no_taller,
    rejection_class,
)

__all__ = ["rank"]

log = logging.getLogger(__name__)


def _rank_key(v: Verdict, text: Sequence[str]) -> tuple[int, int, int]:
    others = sum(v.heights.get(t, 0) for t in ACCEPTANCE_TABLES if t != "processor")
    return (v.cycles, others, sum(len(t) for t in text))


def rank(
    fns: list[FunctionState],
    tasks: list[BlockTask],
    owners: list[tuple[int, str]],
    checks: list[BlockCheck],
    verdicts: list[Verdict],
    logprobs: dict[tuple[int, tuple[str, ...]], float] | None = None,
    model_version: str | None = None,
) -> None:
    """Choose each block's best accepted candidate, fill the block reports, and record every
    judged candidate in the function's trajectories (``logprobs``: the model's total
    log-probability of a candidate, by task index and candidate lines)."""
    by_task: dict[int, list[tuple[str, BlockCheck, Verdict]]] = defaultdict(list)
    for (ti, source), check, verdict in zip(owners, checks, verdicts):
        by_task[ti].append((source, check, verdict))
    task_fn: dict[int, tuple[FunctionState, int]] = {}
    k = 0
    for f in fns:
        for j in range(len(f.tasks)):
            task_fn[k] = (f, j)
            k += 1
    for ti, task in enumerate(tasks):
        f, j = task_fn[ti]
        entries = by_task.get(ti, [])
        base_entry = next((e for e in entries if e[0] == ""), None)
        stats: dict[str, CandidateStats] = {}
        base_lines = [str(i) for i in task.baseline]
        base_cycles = base_entry[2].cycles if base_entry and base_entry[2].equivalent else 0
        steps = BlockTrajectories(
            task.function,
            task.index,
            task.tir_hash,
            task.ops,
            task.entry_depth,
            task.net_effect,
            base_lines,
            base_cycles or len(base_lines),
        )
        for source, check, verdict in entries:
            if source:
                st = stats.setdefault(source, CandidateStats())
                st.generated += 1
                st.valid += int(verdict.equivalent)
                cls = None
                if not verdict.equivalent:
                    cls = rejection_class(verdict.reason)
                    f.report.rejections[cls] = f.report.rejections.get(cls, 0) + 1
                logp = (logprobs or {}).get((ti, tuple(check.candidate)))
                steps.candidates.append(
                    CandidateRecord(
                        source,
                        list(check.candidate),
                        verdict.equivalent,
                        verdict.reason,
                        cls,
                        verdict.cycles,
                        dict(verdict.heights),
                        logp,
                        model_version if source == "model" else None,
                    )
                )
        if steps.candidates:
            f.trajectories.append(steps)
        report = BlockReport(
            index=task.index,
            path=task.path,
            source="compiler",
            tasm=base_lines,
            baseline_tasm=base_lines,
            cycles=len(base_lines),
            baseline_cycles=len(base_lines),
            tir_hash=task.tir_hash,
            candidates=stats,
        )
        f.report.blocks.append(report)
        if base_entry is None or not base_entry[2].equivalent:
            continue  # cannot even measure the baseline: keep it
        base_v = base_entry[2]
        report.heights = report.baseline_heights = dict(base_v.heights)
        best = None
        for source, check, verdict in entries:
            if not source or not verdict.equivalent or verdict.cycles > base_v.cycles:
                continue
            if not no_taller(verdict.heights, base_v.heights):
                continue
            key = _rank_key(verdict, check.candidate)
            if best is None or key < best[0]:
                best = (key, source, check, verdict)
        if best is None or best[0] >= _rank_key(base_v, base_lines):
            continue
        _, source, check, verdict = best
        f.chosen[j] = (source, list(check.candidate), verdict)
        report.source = source  # type: ignore[assignment]  # a source name is one of the report's Source values for the sources we ship
        report.tasm = list(check.candidate)
        report.cycles = verdict.cycles
        report.heights = dict(verdict.heights)
        report.verified_by = verdict.method
