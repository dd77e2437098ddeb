"""Keyword-only queries over `BuildResult`. The caller owns the session and the commit."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from tasmopt.store.models import BuildResult, Trajectory
from tasmopt.store.records import TRAJECTORIES

__all__ = [
    "insert_build_results",
    "existing_ids",
    "get_build_result",
    "list_build_results",
    "count_build_results",
]


def existing_ids(session: Session, *, ids: Iterable[uuid.UUID]) -> set[uuid.UUID]:
    """The subset of `ids` already stored."""
    wanted = list(ids)
    found: set[uuid.UUID] = set()
    for i in range(0, len(wanted), 500):  # stay far below any bind-parameter limit
        chunk = wanted[i : i + 500]
        found.update(session.scalars(select(BuildResult.id).where(BuildResult.id.in_(chunk))))
    return found


def insert_build_results(session: Session, *, rows: Sequence[dict[str, Any]]) -> int:
    """Add the rows whose id is not stored yet (idempotent by id); does not commit.

    Args:
        rows: dicts from `tasmopt.store.build_records`; a block row's ``trajectories`` (its
            judged candidates) are written to `Trajectory` with it.

    Returns:
        How many rows were added (rows already present are skipped).

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database is unreachable or refused the rows.
    """
    present = existing_ids(session, ids=[r["id"] for r in rows])
    new, steps = [], []
    for r in rows:
        if r["id"] in present:
            continue  # its trajectories were written with it
        fields = {k: v for k, v in r.items() if k != TRAJECTORIES}
        new.append(BuildResult(**fields))
        steps += [Trajectory(**t) for t in r.get(TRAJECTORIES) or ()]
    session.add_all(new)
    session.flush()  # the block rows before the rows that point at them
    session.add_all(steps)
    session.flush()
    return len(new)


def get_build_result(session: Session, *, id: uuid.UUID) -> BuildResult | None:
    """The row with this id, or None."""
    return session.get(BuildResult, id)


def list_build_results(
    session: Session,
    *,
    request_id: uuid.UUID | None = None,
    tir_hash: str | None = None,
    source: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[BuildResult]:
    """Rows matching every given filter, newest first (then function, then block index)."""
    stmt = select(BuildResult)
    if request_id is not None:
        stmt = stmt.where(BuildResult.request_id == request_id)
    if tir_hash is not None:
        stmt = stmt.where(BuildResult.tir_hash == tir_hash)
    if source is not None:
        stmt = stmt.where(BuildResult.source == source)
    stmt = (
        stmt.order_by(
            BuildResult.created_at.desc(),
            BuildResult.function,
            BuildResult.block_index.nulls_first(),
        )
        .limit(limit)
        .offset(offset)
    )
    return list(session.scalars(stmt))


def count_build_results(
    session: Session, *, request_id: uuid.UUID | None = None, source: str | None = None
) -> int:
    """Number of rows matching every given filter."""
    stmt = select(func.count()).select_from(BuildResult)
    if request_id is not None:
        stmt = stmt.where(BuildResult.request_id == request_id)
    if source is not None:
        stmt = stmt.where(BuildResult.source == source)
    return int(session.scalar(stmt) or 0)
