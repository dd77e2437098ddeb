"""Shared fixtures. Append yours; keep each block self-contained.

Service, store and worker fixtures below talk to the real PostgreSQL and Redis of the
machine: a fresh database per test session (``tasmopt_test_<random>``, migrated with Alembic,
dropped at the end) and a Redis database number that was empty when the session claimed it
(flushed at the end only if the claim still holds). Connection points can be overridden with
TASMOPT_TEST_POSTGRES (an admin URL) and TASMOPT_TEST_REDIS (a server URL without db).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import shutil
import socket
import subprocess
import threading
import time
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
ADD_MUL_TIR = [
    {"FnStart": "add_mul"},
    {"Dup": 1},
    {"Dup": 1},
    "Add",
    {"Dup": 0},
    {"Dup": 3},
    "Mul",
    {"Swap": 3},
    {"Pop": 3},
    "Return",
    "FnEnd",
]


@pytest.fixture()
def add_mul_tir() -> list:
    return [dict(o) if isinstance(o, dict) else o for o in ADD_MUL_TIR]


@pytest.fixture(scope="session")
def example_request() -> dict:
    """examples/lock_generation.json: a request with the compiler's baseline_tasm."""
    import json

    return json.loads((EXAMPLES / "lock_generation.json").read_text())


# -- checkpoints (registry, admin API, model watcher) ------------------------------------------


@pytest.fixture()
def make_checkpoint(tmp_path):
    """``make(version, *, store=None, metrics=None, weights=None) -> Path``: a checkpoint
    directory ``<store>/<version>/`` with config.json, metrics.json and model.safetensors
    (`weights` bytes, random by default: registrable, not loadable by the real model)."""

    def make(
        version: str,
        *,
        store: Path | None = None,
        metrics: dict | None = None,
        weights: bytes | None = None,
        stage: str = "supervised",
        parent: str | None = None,
    ) -> Path:
        import json

        directory = (store or tmp_path / "model_store") / version
        directory.mkdir(parents=True, exist_ok=True)
        config = {"version": version, "model": {"d": 8}, "stage": stage}
        if parent:
            config["parent"] = parent
        (directory / "config.json").write_text(json.dumps(config))
        (directory / "metrics.json").write_text(json.dumps(metrics or {"holdout_validity": 0.5}))
        (directory / "model.safetensors").write_bytes(
            weights if weights is not None else secrets.token_bytes(256)
        )
        return directory

    return make


# -- faults: a TCP proxy that can make PostgreSQL unreachable, a redis-server we can stop ------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TcpProxy:
    """Forwards 127.0.0.1:<port> to a target; `stop` closes the port and every connection
    (clients then get "connection refused"), `start` opens it again on the same port; with
    `blackhole` set, new connections are accepted and then left unanswered."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self.blackhole = False  # accept connections but never answer (a dead host)
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()

    def start(self) -> None:
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", self.port))
        srv.listen(64)
        self._listener = srv
        threading.Thread(target=self._accept, args=(srv,), daemon=True).start()

    def stop(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(OSError):  # wakes the thread blocked in accept()
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None
        with self._lock:
            for c in self._conns:
                with contextlib.suppress(OSError):
                    c.shutdown(socket.SHUT_RDWR)
                c.close()
            self._conns.clear()

    def _accept(self, srv: socket.socket) -> None:
        while True:
            try:
                client, _ = srv.accept()
            except OSError:
                return
            if self.blackhole:
                with self._lock:
                    self._conns.add(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=3)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)


@pytest.fixture()
def pg_proxy(pg_url) -> Iterator[tuple[TcpProxy, str]]:
    """(proxy, database URL through the proxy) to the session's database."""
    from sqlalchemy.engine import make_url

    u = make_url(pg_url)
    proxy = TcpProxy(u.port or 5432, u.host or "127.0.0.1")
    proxy.start()
    try:
        yield proxy, u.set(host="127.0.0.1", port=proxy.port).render_as_string(False)
    finally:
        proxy.stop()


@pytest.fixture()
def private_redis(tmp_path) -> Iterator[tuple[str, subprocess.Popen]]:
    """(URL, process) of a redis-server of our own on a free port, so stopping it disturbs
    nobody. Stopped at the end if the test has not stopped it."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server not installed")
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    from redis import Redis

    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 10
    while True:
        try:
            Redis.from_url(url, socket_connect_timeout=0.2).ping()
            break
        except Exception:
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail("private redis-server did not start")
            time.sleep(0.02)
    try:
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)


# -- the real TIR of the Trident standard library (shared/data/trident-std) ----------------

#: Where the 30 modules live; override with TASMOPT_TRIDENT_STD.
STD_DIR = Path(
    os.environ.get(
        "TASMOPT_TRIDENT_STD",
        Path(__file__).resolve().parents[1].parent / "shared" / "data" / "trident-std",
    )
)
#: Module names, for parametrization (`pytest_configure` refuses to run without them).
STD_MODULES = sorted(p.stem for p in STD_DIR.glob("*.json")) if STD_DIR.is_dir() else []
SHARED_DIR = Path(__file__).resolve().parents[1].parent / "shared"


def pytest_configure(config: pytest.Config) -> None:
    """The suite tests every stage on the real toolchain data and the specs in ``../shared``:
    without them it stops here with a clear message instead of skipping those tests."""
    missing = [p for p in (SHARED_DIR / "spec" / "triton_isa.json",) if not p.is_file()]
    if not STD_MODULES:
        missing.append(STD_DIR)
    if missing:
        raise pytest.UsageError(
            "tasmopt's tests need the shared specs and data beside the checkout "
            f"(../shared, expected at {SHARED_DIR}); missing: "
            + ", ".join(str(p) for p in missing)
            + ". Clone or link it there (TASMOPT_TRIDENT_STD may point at trident-std)."
        )
    mutant = os.environ.get("TASMOPT_MUTANT")
    if mutant:  # benchmarks/proof_mutants.py: one proof check dropped for this whole run
        from tasmopt.mutants import apply

        apply(mutant)


def pytest_report_header(config: pytest.Config) -> str | None:
    mutant = os.environ.get("TASMOPT_MUTANT")
    return f"tasmopt mutant: {mutant}" if mutant else None


@pytest.fixture(scope="session")
def trident_std() -> dict[str, dict]:
    """Module name -> its JSON (``tir``, ``compiler_tasm``, ``functions``, ...)."""
    return {name: json.loads((STD_DIR / f"{name}.json").read_text()) for name in STD_MODULES}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test that takes ``std_module`` runs once per trident-std module."""
    if "std_module" in metafunc.fixturenames:
        params = STD_MODULES or [
            pytest.param(
                "", marks=pytest.mark.skip(reason=f"trident-std data not found at {STD_DIR}")
            )
        ]
        metafunc.parametrize("std_module", params)
