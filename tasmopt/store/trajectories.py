"""Queries over the replay buffer's steps (`Trajectory`) and their block contexts.

Keyword-only functions over a caller-provided `Session`; the caller commits.

Retention (design §4 Stage 3): replay samples from the newest `REPLAY_WINDOW` judged
candidates; `prune_trajectories` (run by every finetune job) deletes all but the newest
`KEEP_TRAJECTORIES` rows, so the table stays bounded (~1 KB per row: about 200 MB at the
bound). Block rows (`BuildResult`) are kept: they are the served results.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from tasmopt.store.models import BuildResult, Trajectory

__all__ = [
    "REPLAY_WINDOW",
    "KEEP_TRAJECTORIES",
    "ReplayBlock",
    "count_trajectories",
    "replay_blocks",
    "prune_trajectories",
]

#: Judged candidates replay draws from, newest first (design §4: the last 10,000).
REPLAY_WINDOW = 10_000

#: Rows kept by `prune_trajectories`.
KEEP_TRAJECTORIES = 200_000


@dataclass(frozen=True)
class ReplayBlock:
    """One served block with what its candidates taught.

    Attributes:
        build_result_id: the block's `BuildResult` row.
        tir_hash: the block's TIR hash.
        context: its model input (`tasmopt.store.records.block_context`).
        best: lines of the cheapest accepted candidate (the baseline when none beat it).
        best_cycles, baseline_cycles: clock cycles of ``best`` and of the baseline.
        reward: the largest design §4 reward among its candidates.
        judged, accepted: candidates judged, and how many were accepted.
        created_at: when the block was served (UTC).
    """

    build_result_id: uuid.UUID
    tir_hash: str
    context: dict[str, Any]
    best: list[str]
    best_cycles: int
    baseline_cycles: int
    reward: float
    judged: int
    accepted: int
    created_at: datetime


def _utc(when: datetime) -> datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def count_trajectories(session: Session, *, after: datetime | None = None) -> int:
    """Judged candidates stored (newer than ``after`` when given)."""
    stmt = select(func.count()).select_from(Trajectory)
    if after is not None:
        stmt = stmt.where(Trajectory.created_at > after)
    return int(session.scalar(stmt) or 0)


def replay_blocks(session: Session, *, window: int = REPLAY_WINDOW) -> list[ReplayBlock]:
    """The blocks of the newest ``window`` judged candidates, newest first, each with its
    best accepted candidate (a candidate no cheaper than the baseline leaves the baseline as
    ``best``). Blocks whose row has no context (written before contexts were stored) are
    left out."""
    rows = session.execute(
        select(Trajectory).order_by(Trajectory.created_at.desc()).limit(window)
    ).scalars()
    by_block: dict[uuid.UUID, list[Trajectory]] = {}
    for t in rows:
        by_block.setdefault(t.build_result_id, []).append(t)
    if not by_block:
        return []
    contexts: dict[uuid.UUID, BuildResult] = {}
    ids = list(by_block)
    for i in range(0, len(ids), 500):
        for r in session.scalars(select(BuildResult).where(BuildResult.id.in_(ids[i : i + 500]))):
            if r.context:
                contexts[r.id] = r
    out = []
    for bid, steps in by_block.items():
        row = contexts.get(bid)
        if row is None or row.context is None:
            continue
        ctx = row.context
        base_cycles = int(ctx.get("baseline_cycles") or steps[0].baseline_cycles)
        best, best_cycles = list(ctx["baseline"]), base_cycles
        for t in steps:
            if t.accepted and t.cycles < best_cycles:
                best, best_cycles = t.tasm.split("\n"), t.cycles
        out.append(
            ReplayBlock(
                build_result_id=bid,
                tir_hash=steps[0].tir_hash,
                context=ctx,
                best=best,
                best_cycles=best_cycles,
                baseline_cycles=base_cycles,
                reward=max(t.reward for t in steps),
                judged=len(steps),
                accepted=sum(t.accepted for t in steps),
                created_at=_utc(max(t.created_at for t in steps)),
            )
        )
    out.sort(key=lambda b: b.created_at, reverse=True)
    return out


def prune_trajectories(session: Session, *, keep: int = KEEP_TRAJECTORIES) -> int:
    """Delete all but the newest ``keep`` judged candidates; returns how many went."""
    cutoff = session.scalar(
        select(Trajectory.created_at).order_by(Trajectory.created_at.desc()).offset(keep).limit(1)
    )
    if cutoff is None:
        return 0
    result = session.execute(delete(Trajectory).where(Trajectory.created_at <= cutoff))
    return int(getattr(result, "rowcount", 0) or 0)
