"""Queries of the per-function result cache (`FunctionResult`), over a caller's `Session`.

An entry is only ever replaced by a better one: fewer clock cycles, or the same cycles from
a run that is final where the stored one is not; a placeholder (not measured, cycles -1:
the deadline cut the function) is replaced by any measured entry and never replaces one. A worse result of a final run still marks
the stored entry final (the deepening budget was spent on it). Keys carry the verifier
version, so a new version never reads an old entry; `purge_function_results` drops them.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from tasmopt.report import CachedFunction
from tasmopt.store.models import FunctionResult

__all__ = [
    "get_function_results",
    "put_function_result",
    "delete_function_result",
    "count_function_results",
    "purge_function_results",
    "record_cache_hits",
    "record_spot_check",
    "update_as_returned",
]


def _entry(row: FunctionResult) -> CachedFunction:
    return CachedFunction(
        key=row.key,
        name=row.name,
        lines=list(row.lines) if row.lines is not None else None,
        report=dict(row.report),
        final=row.final,
        budget_s=row.budget_s,
        source=row.source,
        measured=row.cycles >= 0,
    )


def get_function_results(session: Session, *, keys: Iterable[str]) -> dict[str, CachedFunction]:
    """The stored entries of ``keys``, by key (absent keys are missing)."""
    wanted = list(dict.fromkeys(keys))
    if not wanted:
        return {}
    rows = session.scalars(select(FunctionResult).where(FunctionResult.key.in_(wanted)))
    return {r.key: _entry(r) for r in rows}


def put_function_result(session: Session, *, entry: CachedFunction, verifier_version: str) -> str:
    """Store ``entry`` unless the stored one is at least as good (see the module docstring).

    Returns:
        ``inserted``, ``improved`` (replaced a worse or non-final one), ``finalized`` (the
        stored entry kept, now final) or ``kept``.
    """
    now = datetime.now(UTC)
    row = session.get(FunctionResult, entry.key, with_for_update=True)
    if row is None:
        session.add(
            FunctionResult(
                key=entry.key,
                name=entry.name,
                verifier_version=verifier_version,
                lines=entry.lines,
                report=entry.report,
                cycles=entry.cycles,
                final=entry.final,
                budget_s=entry.budget_s,
                source=entry.source,
                hits=0,
                spot_checks=0,
                created_at=now,
                updated_at=now,
            )
        )
        session.flush()
        return "inserted"
    if not entry.measured:
        return "kept"
    better = (
        row.cycles < 0
        or entry.cycles < row.cycles
        or (entry.cycles == row.cycles and entry.final and not row.final)
    )
    if better:
        row.lines, row.report, row.cycles = entry.lines, entry.report, entry.cycles
        row.final, row.budget_s, row.source = entry.final, entry.budget_s, entry.source
        row.updated_at = now
        return "improved"
    if entry.final and not row.final:
        row.final, row.budget_s, row.updated_at = True, max(row.budget_s, entry.budget_s), now
        return "finalized"
    return "kept"


def update_as_returned(
    session: Session, *, key: str, lines: list[str] | None, as_returned: dict[str, Any]
) -> bool:
    """Replace the stored entry's ``report["as_returned"]`` (its costs measured with its
    callees' code as returned, and the hash of that closure; `CompileResult.remeasured`),
    only where the entry still holds ``lines`` (a better entry stored since keeps its own).
    True if it was updated."""
    row = session.get(FunctionResult, key, with_for_update=True)
    if row is None or row.cycles < 0 or row.lines != lines:
        return False
    row.report = {**row.report, "as_returned": as_returned}
    return True


def delete_function_result(session: Session, *, key: str) -> bool:
    """Drop one entry (a spot check found it wrong). True if it existed."""
    return bool(session.execute(delete(FunctionResult).where(FunctionResult.key == key)).rowcount)


def count_function_results(session: Session, *, final: bool | None = None) -> int:
    """Entries stored (only final or only improving ones when ``final`` is given)."""
    q = select(func.count()).select_from(FunctionResult)
    if final is not None:
        q = q.where(FunctionResult.final.is_(final))
    return int(session.scalar(q) or 0)


def purge_function_results(session: Session, *, keep_verifier_version: str) -> int:
    """Delete entries proven by any other verifier version; returns how many."""
    res = session.execute(
        delete(FunctionResult).where(FunctionResult.verifier_version != keep_verifier_version)
    )
    return int(res.rowcount or 0)


def record_cache_hits(session: Session, *, keys: Iterable[str]) -> None:
    """Count one served hit for each key."""
    wanted = list(keys)
    if wanted:
        session.execute(
            update(FunctionResult)
            .where(FunctionResult.key.in_(wanted))
            .values(hits=FunctionResult.hits + 1)
        )


def record_spot_check(session: Session, *, key: str) -> None:
    """Count one passed spot check of ``key``."""
    session.execute(
        update(FunctionResult)
        .where(FunctionResult.key == key)
        .values(spot_checks=FunctionResult.spot_checks + 1)
    )
