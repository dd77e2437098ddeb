"""Engine and session-factory helpers: the only connection policy the store has.

SQLite URLs (the embedded default) get their parent directory created and a connection that
may cross threads; network databases get a bounded connect timeout so that an unreachable
database fails fast instead of stalling a compile.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

__all__ = ["make_engine", "make_sessionmaker"]

#: Seconds a new PostgreSQL connection may take before the attempt fails.
DEFAULT_CONNECT_TIMEOUT_S = 3


def make_engine(
    url: str, *, connect_timeout_s: int = DEFAULT_CONNECT_TIMEOUT_S, echo: bool = False
) -> Engine:
    """Create an engine for `url` (any SQLAlchemy URL; ``postgresql://`` uses psycopg 3).

    Args:
        url: e.g. ``sqlite:///var/tasmopt.db`` or ``postgresql://postgres@127.0.0.1/tasmopt``.
        connect_timeout_s: PostgreSQL connect timeout, seconds (ignored for SQLite).
        echo: log every SQL statement.

    Raises:
        sqlalchemy.exc.ArgumentError: for a URL SQLAlchemy cannot parse.
    """
    u = make_url(url)
    if u.drivername in ("postgresql", "postgres"):
        u = u.set(drivername="postgresql+psycopg")
    kwargs: dict = {"echo": echo, "pool_pre_ping": True}
    if u.get_backend_name() == "sqlite":
        if u.database and u.database != ":memory:":
            Path(u.database).parent.mkdir(parents=True, exist_ok=True)
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": 15}
    elif u.get_backend_name() == "postgresql":
        kwargs["connect_args"] = {"connect_timeout": connect_timeout_s}
    engine = create_engine(u, **kwargs)
    if u.get_backend_name() == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    # WAL lets the spool drainer and request threads write without blocking readers.
    cur = dbapi_connection.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=15000")
    cur.close()


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    """Session factory bound to `engine`; objects stay readable after commit."""
    return sessionmaker(bind=engine, expire_on_commit=False)
