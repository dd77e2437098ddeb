"""Alembic environment: where the URL comes from and how migrations run.

Precedence: a live connection handed in by code (``config.attributes["connection"]``, what
the service and the tests do), then ``sqlalchemy.url`` set on the config, then the service
settings (``DATABASE_URL``, default ``sqlite:///var/tasmopt.db``).
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from tasmopt.store.engine import make_engine
from tasmopt.store.models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from service.core.config import Settings  # the one reader of the environment

    return Settings().database_url


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite cannot ALTER much
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline() -> None:
    context.configure(
        url=_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_engine(_url())
    try:
        with engine.connect() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
