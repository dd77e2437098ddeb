"""Stages 3 and 4a, ``candidates``: every source in the `SourceSet` proposes rewrites of every
block (a source that fails or answers the wrong number of blocks is skipped), and the checks
the verify backend runs are built: the baseline of each block once (it measures the block),
then each distinct candidate."""

from __future__ import annotations

import logging

from tasmopt.report import (
    CompileOptions,
)
from tasmopt.rules import RulesSource, rewrite
from tasmopt.sources import BlockTask, SourceSet
from tasmopt.tasm.program import Instr
from tasmopt.vm.equivalence import (
    BlockCheck,
)

__all__ = ["propose", "build_checks", "candidate_logprobs"]

log = logging.getLogger(__name__)


def propose(
    tasks: list[BlockTask], options: CompileOptions, sources: SourceSet
) -> dict[str, list[list[list[Instr]]]]:
    out: dict[str, list[list[list[Instr]]]] = {}
    for name in options.sources:
        src = sources.get(name)
        if src is None or not tasks:
            continue
        try:
            proposals = src.propose(tasks, options)
        except Exception:  # a source must never break a compile
            log.exception("candidate source %r failed; continuing without it", name)
            continue
        if len(proposals) != len(tasks):
            log.error(
                "source %r returned %d proposal lists for %d blocks",
                name,
                len(proposals),
                len(tasks),
            )
            continue
        out[name] = proposals
    return polish(out)


def polish(
    proposals: dict[str, list[list[list[Instr]]]],
) -> dict[str, list[list[list[Instr]]]]:
    """The rules source's candidates extended by the peephole-polished versions
    (`tasmopt.rules.rewrite`, all rules to a fixpoint) of every other source's candidates
    where those differ: a scheduler or a model may leave a ``dup 0; pop 1`` the rules remove.
    A polished candidate is the rules' text, so it is attributed to them (the proposing
    model's log-probability belongs to its own text only); without the rules source in the
    request nothing is polished. Still only a proposal: the verifier decides."""
    if RulesSource.name not in proposals:
        return proposals
    others = [per_task for name, per_task in proposals.items() if name != RulesSource.name]
    lists: list[list[list[Instr]]] = []
    for ti, cands in enumerate(proposals[RulesSource.name]):
        theirs = [c for per_task in others for c in per_task[ti]]
        seen = {tuple(c) for c in [*cands, *theirs]}
        extra: list[list[Instr]] = []
        for cand in theirs:
            better = rewrite(cand)
            if tuple(better) not in seen:
                seen.add(tuple(better))
                extra.append(better)
        lists.append(list(cands) + extra)
    return {**proposals, RulesSource.name: lists}


def build_checks(
    tasks: list[BlockTask], proposals: dict[str, list[list[list[Instr]]]], options: CompileOptions
) -> tuple[list[BlockCheck], list[tuple[int, str]]]:
    """One check for each distinct candidate, and for each task with a candidate one of its
    baseline against itself (it measures the baseline's cycles and heights, which a
    candidate must not exceed). A task without candidates keeps its baseline unmeasured
    (its block report has no heights): checking it would only cost time, a third of a
    request's checks on keccak256. ``owners[k] = (task index, source)``; source ``""`` =
    baseline."""
    checks: list[BlockCheck] = []
    owners: list[tuple[int, str]] = []
    for ti, task in enumerate(tasks):
        base = tuple(str(i) for i in task.baseline)
        seen = {base}
        dead, slots = task.dead_cells, task.dead_slots
        mine: list[tuple[BlockCheck, tuple[int, str]]] = []
        for name, per_task in proposals.items():
            for cand in per_task[ti]:
                text = tuple(str(i) for i in cand)
                if text in seen:
                    continue
                seen.add(text)
                check = BlockCheck(
                    base, text, options.isa, options.witnesses, options.seed, dead, slots
                )
                mine.append((check, (ti, name)))
        if not mine:
            continue
        checks.append(
            BlockCheck(base, base, options.isa, options.witnesses, options.seed, dead, slots)
        )
        owners.append((ti, ""))
        for check, owner in mine:
            checks.append(check)
            owners.append(owner)
    return checks, owners


def candidate_logprobs(
    tasks: list[BlockTask],
    proposals: dict[str, list[list[list[Instr]]]],
    sources: SourceSet,
) -> dict[tuple[int, tuple[str, ...]], float]:
    """The proposing model's total log-probability of each candidate it proposed, by task
    index and candidate lines (sources with a ``logprob(task, candidate)`` method: the model
    source), for the replay buffer."""
    out: dict[tuple[int, tuple[str, ...]], float] = {}
    for name, per_task in proposals.items():
        score = getattr(sources.get(name), "logprob", None)
        if score is None:
            continue
        for ti, cands in enumerate(per_task):
            for cand in cands:
                lp = score(tasks[ti], cand)
                if lp is not None:
                    out[(ti, tuple(str(i) for i in cand))] = float(lp)
    return out
