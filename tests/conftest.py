"""Shared fixtures. Append yours; keep each block self-contained.

Service, store and worker fixtures below talk to the real PostgreSQL and Redis of the
machine: a fresh database per test session (``tasmopt_test_<random>``, migrated with Alembic,
dropped at the end) and a Redis database number that was empty when the session claimed it
(flushed at the end only if the claim still holds). Connection points can be overridden with
TASMOPT_TEST_POSTGRES (an admin URL) and TASMOPT_TEST_REDIS (a server URL without db).
"""

from __future__ import annotations

import os
import random
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"

#: Admin connection used to create and drop the per-session database.
PG_ADMIN_URL = os.environ.get("TASMOPT_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
#: Redis server (no db number): the session claims an empty db on it.
REDIS_SERVER_URL = os.environ.get("TASMOPT_TEST_REDIS", "redis://127.0.0.1:6379")


# -- PostgreSQL -------------------------------------------------------------------------------

def _pg_admin():
    import psycopg

    return psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=3)


def _with_database(url: str, name: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).set(database=name).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def pg_database_factory() -> Iterator:
    """``make(migrate=True) -> url``: a fresh PostgreSQL database, dropped at session end."""
    try:
        admin = _pg_admin()
    except Exception as exc:  # pragma: no cover - depends on the machine
        pytest.skip(f"PostgreSQL not reachable at {PG_ADMIN_URL}: {exc}")
    created: list[str] = []

    def make(*, migrate: bool = True) -> str:
        name = f"tasmopt_test_{secrets.token_hex(6)}"
        admin.execute(f'CREATE DATABASE "{name}"')
        created.append(name)
        url = _with_database(PG_ADMIN_URL, name)
        if migrate:
            from service.core.db import migrate as upgrade
            from tasmopt.store import make_engine

            engine = make_engine(url)
            try:
                upgrade(engine)
            finally:
                engine.dispose()
        return url

    yield make
    for name in created:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.close()


@pytest.fixture(scope="session")
def pg_url(pg_database_factory) -> str:
    """URL of this session's PostgreSQL database, migrated to head."""
    return pg_database_factory()


@pytest.fixture(scope="session")
def pg_engine(pg_url):
    from tasmopt.store import make_engine

    engine = make_engine(pg_url)
    yield engine
    engine.dispose()


@pytest.fixture()
def pg_session(pg_engine):
    from tasmopt.store import make_sessionmaker

    with make_sessionmaker(pg_engine)() as session:
        yield session


# -- Redis ------------------------------------------------------------------------------------

_CLAIM_KEY = "tasmopt:test:claim"


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of a Redis database this session has to itself (empty when claimed)."""
    from redis import Redis
    from redis.exceptions import RedisError

    token = secrets.token_hex(8)
    dbs = list(range(1, 16))
    random.shuffle(dbs)
    try:
        Redis.from_url(f"{REDIS_SERVER_URL}/0", socket_connect_timeout=2).ping()
    except RedisError as exc:  # pragma: no cover - depends on the machine
        pytest.skip(f"Redis not reachable at {REDIS_SERVER_URL}: {exc}")
    for db in dbs:
        r = Redis.from_url(f"{REDIS_SERVER_URL}/{db}")
        if r.set(_CLAIM_KEY, token, nx=True):
            if r.dbsize() == 1:
                break
            r.delete(_CLAIM_KEY)
        r.close()
    else:  # pragma: no cover
        pytest.skip("no empty Redis database to claim")
    try:
        yield f"{REDIS_SERVER_URL}/{db}"
    finally:
        if r.get(_CLAIM_KEY) == token.encode():
            r.flushdb()
        r.close()


@pytest.fixture()
def redis_conn(redis_url):
    """A client on the session's Redis db; keys other than the claim are removed afterwards."""
    from redis import Redis

    conn = Redis.from_url(redis_url)
    yield conn
    for key in conn.scan_iter():
        if key != _CLAIM_KEY.encode():
            conn.delete(key)
    conn.close()


# -- TIR and requests -------------------------------------------------------------------------

#: spec/tir.md §2.1, example A: one straight-line function.
ADD_MUL_TIR = [{"FnStart": "add_mul"}, {"Dup": 1}, {"Dup": 1}, "Add", {"Dup": 0}, {"Dup": 3},
               "Mul", {"Swap": 3}, {"Pop": 3}, "Return", "FnEnd"]


@pytest.fixture()
def add_mul_tir() -> list:
    return [dict(o) if isinstance(o, dict) else o for o in ADD_MUL_TIR]


@pytest.fixture(scope="session")
def example_request() -> dict:
    """examples/lock_generation.json: a request with the compiler's baseline_tasm."""
    import json

    return json.loads((EXAMPLES / "lock_generation.json").read_text())
