"""Keyword-only queries over `CompileJob` (``POST /compile/jobs``) and `FinetuneRun`.
The caller owns the session and the commit."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from tasmopt.store.models import BuildResult, CompileJob, FinetuneRun, Trajectory

__all__ = [
    "save_compile_job",
    "get_compile_job",
    "record_finetune_run",
    "last_finetune_run",
    "list_finetune_runs",
    "results_since",
    "buffer_counts",
]

#: Order of job statuses: a write never moves a job backwards (a late "started" after
#: "finished" is ignored).
_RANK = {"queued": 0, "started": 1, "finished": 2, "failed": 2}


def save_compile_job(
    session: Session,
    *,
    id: uuid.UUID,
    status: str,
    backend: str,
    request: dict[str, Any] | None = None,
    response: dict[str, Any] | None = None,
    error: str | None = None,
    at: datetime | None = None,
) -> CompileJob:
    """Create or advance a job (idempotent; flushed, not committed).

    Args:
        id: the job id.
        status: ``queued``, ``started``, ``finished`` or ``failed``; ignored when the stored
            status is further along (a finished job stays finished).
        request: the request body; needed when the row does not exist yet.
        at: when the status was reached (UTC, default now): sets ``started_at`` or
            ``finished_at``.
    """
    at = at or datetime.now(UTC)
    row = session.get(CompileJob, id)
    if row is None:
        row = CompileJob(
            id=id, status="queued", backend=backend, request=request or {}, created_at=at
        )
        session.add(row)
    elif _RANK[status] < _RANK[row.status] or row.status == "finished":
        return row
    row.status = status
    row.backend = backend
    if status == "started":
        row.started_at = at
    if status in ("finished", "failed"):
        row.finished_at = at
        row.started_at = row.started_at or at
    if response is not None:
        row.response = response
    if error is not None:
        row.error = error
    session.flush()
    return row


def get_compile_job(session: Session, *, id: uuid.UUID) -> CompileJob | None:
    """The job, or None."""
    return session.get(CompileJob, id)


def record_finetune_run(
    session: Session,
    *,
    trigger: str,
    outcome: str,
    new_results: int,
    watermark: datetime | None,
    started_at: datetime,
    checkpoint_version: str | None = None,
    job_id: str | None = None,
    detail: dict[str, Any] | None = None,
) -> FinetuneRun:
    """Append a finished run (flushed, not committed)."""
    row = FinetuneRun(
        trigger=trigger,
        outcome=outcome,
        new_results=new_results,
        watermark=watermark,
        started_at=started_at,
        finished_at=datetime.now(UTC),
        checkpoint_version=checkpoint_version,
        job_id=job_id,
        detail=detail or {},
    )
    session.add(row)
    session.flush()
    return row


def last_finetune_run(session: Session, *, outcome: str | None = None) -> FinetuneRun | None:
    """The most recent run (of one outcome, if given)."""
    stmt = select(FinetuneRun)
    if outcome is not None:
        stmt = stmt.where(FinetuneRun.outcome == outcome)
    return session.scalars(stmt.order_by(FinetuneRun.id.desc()).limit(1)).first()


def list_finetune_runs(session: Session, *, limit: int = 20) -> list[FinetuneRun]:
    """The most recent runs, newest first."""
    return list(session.scalars(select(FinetuneRun).order_by(FinetuneRun.id.desc()).limit(limit)))


def results_since(
    session: Session, *, after: datetime | None
) -> tuple[int, datetime | None, datetime | None]:
    """Block results (the unit the learner trains on) served after `after` (all if None).

    Returns:
        (count, created_at of the oldest and of the newest one; None when there are none).
    """
    stmt = select(
        func.count(), func.min(BuildResult.created_at), func.max(BuildResult.created_at)
    ).where(BuildResult.block_index.is_not(None))
    if after is not None:
        stmt = stmt.where(BuildResult.created_at > after)
    count, oldest, newest = session.execute(stmt).one()
    return int(count or 0), _utc(oldest), _utc(newest)


def _utc(when: datetime | None) -> datetime | None:
    # SQLite hands timezone-aware columns back naive; they were written in UTC.
    if when is not None and when.tzinfo is None:
        return when.replace(tzinfo=UTC)
    return when


def buffer_counts(session: Session) -> dict[str, Any]:
    """Replay-buffer counts and the online figures of design §4's Phase B.

    Keys: ``rows``, ``functions``, ``blocks``, ``by_source`` (rows per source);
    ``online``: served block rows that the **model** proposed, valid, not a fallback and
    strictly cheaper than the baseline (so not a copy of it) — what design §4 counts
    towards Phase B; ``model``: over the model's judged candidates (`Trajectory`, which
    never holds a copy of the baseline: identical candidates are not checked) ``judged``,
    ``accepted``, ``beats_compiler`` (accepted and cheaper) and ``reductions`` (relative
    cycle reduction of each accepted one, for the median and its CI); ``fallback``:
    function rows served as the baseline, of ``functions``; ``latency_ms``: per-function
    latencies of the newest 1000 function rows (for the P90).
    """
    is_block = BuildResult.block_index.is_not(None)
    rows, blocks, online = session.execute(
        select(
            func.count(),
            func.count().filter(is_block),
            func.count().filter(
                is_block,
                BuildResult.source == "model",
                BuildResult.valid.is_(True),
                BuildResult.fallback_used.is_(False),
                BuildResult.clock_cycles < BuildResult.compiler_cycles,
            ),
        ).select_from(BuildResult)
    ).one()
    by_source = dict(
        session.execute(select(BuildResult.source, func.count()).group_by(BuildResult.source)).all()
    )
    fallback = session.scalar(
        select(func.count()).where(~is_block, BuildResult.fallback_used.is_(True))
    )
    latency = list(
        session.scalars(
            select(BuildResult.latency_ms)
            .where(~is_block)
            .order_by(BuildResult.created_at.desc())
            .limit(1000)
        )
    )
    model = session.execute(
        select(Trajectory.accepted, Trajectory.cycles, Trajectory.baseline_cycles)
        .where(Trajectory.source == "model")
        .order_by(Trajectory.created_at.desc())
        .limit(10_000)
    ).all()
    accepted = [(c, b) for ok, c, b in model if ok]
    return {
        "rows": int(rows),
        "functions": int(rows) - int(blocks),
        "blocks": int(blocks),
        "online": int(online),
        "by_source": {k: int(v) for k, v in by_source.items()},
        "fallback": int(fallback or 0),
        "latency_ms": [float(x) for x in latency],
        "model": {
            "judged": len(model),
            "accepted": len(accepted),
            "beats_compiler": sum(c < b for c, b in accepted),
            "reductions": [(b - c) / b if b else 0.0 for c, b in accepted],
        },
    }
