"""What a worker process's jobs share: the database of the learning loop.

``tasmopt worker`` calls `configure` with the settings of its environment before it starts
working; tests call it with their own database. Jobs call `current`.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from tasmopt.store import make_engine, make_sessionmaker

__all__ = ["WorkerContext", "configure", "current", "reset"]


@dataclass(frozen=True)
class WorkerContext:
    """Process-wide resources of the jobs."""

    session_factory: sessionmaker[Session]


_CONTEXT: WorkerContext | None = None


def configure(
    *,
    database_url: str | None = None,
    session_factory: sessionmaker[Session] | None = None,
    connect_timeout_s: int = 3,
) -> WorkerContext:
    """Set the process's context from a database URL or an existing session factory."""
    global _CONTEXT
    if session_factory is None:
        if database_url is None:
            raise ValueError("configure() needs database_url or session_factory")
        session_factory = make_sessionmaker(
            make_engine(database_url, connect_timeout_s=connect_timeout_s)
        )
    _CONTEXT = WorkerContext(session_factory=session_factory)
    return _CONTEXT


def current() -> WorkerContext:
    """The context set by `configure`.

    Raises:
        RuntimeError: `configure` was not called in this process.
    """
    if _CONTEXT is None:
        raise RuntimeError("worker context not configured (start workers with `tasmopt worker`)")
    return _CONTEXT


def reset() -> None:
    """Forget the context (tests)."""
    global _CONTEXT
    _CONTEXT = None
