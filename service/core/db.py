"""Database plumbing: the engine from settings, and Alembic run from code.

Alembic owns the schema: `migrate` is ``alembic upgrade head`` on a live connection, run by
the app at start-up; `schema_status` tells `/readyz` whether the database is at head.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text

from service.core.config import Settings
from tasmopt.store import make_engine

__all__ = [
    "engine_from_settings",
    "alembic_config",
    "migrate",
    "downgrade",
    "schema_status",
    "SchemaStatus",
    "MIGRATIONS_DIR",
]

log = logging.getLogger(__name__)

#: PostgreSQL advisory lock key held while migrating (any constant unique to this app).
MIGRATION_LOCK = 0x7A5E0001

#: The Alembic script directory (repository root ``migrations/``).
MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"


def engine_from_settings(settings: Settings) -> Engine:
    """The service's engine for ``settings.database_url`` (SQLite parent dirs are created)."""
    return make_engine(settings.database_url, connect_timeout_s=settings.db_connect_timeout_s)


def alembic_config(url: str | None = None) -> Config:
    """An Alembic `Config` pointing at `MIGRATIONS_DIR`, independent of the working directory."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def migrate(engine: Engine, revision: str = "head") -> None:
    """``alembic upgrade <revision>`` on `engine`.

    Raises:
        sqlalchemy.exc.OperationalError: the database is unreachable.
    """
    cfg = alembic_config()
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":  # API replicas starting together: one at a time
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
    log.info("database schema at %s", revision)


def downgrade(engine: Engine, revision: str) -> None:
    """``alembic downgrade <revision>`` on `engine` (``base`` removes every table)."""
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


@dataclass(frozen=True)
class SchemaStatus:
    """Where the database stands. ``current`` is None for an empty database."""

    current: str | None
    head: str | None

    @property
    def migrated(self) -> bool:
        return self.current is not None and self.current == self.head


def schema_status(engine: Engine) -> SchemaStatus:
    """Current and head revisions; connects to the database.

    Raises:
        sqlalchemy.exc.OperationalError: the database is unreachable.
    """
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    with engine.connect() as conn:
        conn.execute(text("SELECT 1"))
        current = MigrationContext.configure(conn).get_current_revision()
    return SchemaStatus(current=current, head=head)
