"""Service fixtures: apps on the session's PostgreSQL, real RQ workers, a fake model loader.
(The TCP proxy to the database and the private redis-server are in tests/conftest.py.)"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.core.config import Settings
from service.main import create_app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="session")
def timelock_request() -> dict:
    """examples/lock_timelock.json (trident-std): the rules find a verified saving."""
    return json.loads((EXAMPLES / "lock_timelock.json").read_text())


#: Admin token of the test apps (a deployment refuses to start without one).
ADMIN_TOKEN = "test-admin-token-0123456789"
AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.fixture()
def make_client(pg_url, tmp_path):
    """``make_client(model_loader=None, **settings) -> TestClient`` (lifespan running), closed
    after the test.

    Defaults: the session's PostgreSQL, no Redis, a spool under tmp_path retried every 0.2 s,
    an empty MODEL_STORE under tmp_path, ADMIN_TOKEN `ADMIN_TOKEN`; and, so that tests do not
    see each other's results through the shared database, no result cache and no deepening,
    with a 30 s deadline (tests/service/test_result_cache.py turns them on).
    """
    stack = contextlib.ExitStack()

    def make(model_loader=None, **overrides) -> TestClient:
        values = {
            "database_url": pg_url,
            "redis_url": None,
            "spool_dir": tmp_path / "spool",
            "spool_retry_s": 0.2,
            "model_store": tmp_path / "model_store",
            "admin_token": ADMIN_TOKEN,
            "result_cache": False,
            "deepen": False,
            "default_deadline_ms": 30_000,
            "compile_processes": 0,
            **overrides,
        }
        app = create_app(Settings(**values), model_loader=model_loader)
        client = TestClient(app, raise_server_exceptions=False)
        return stack.enter_context(client)

    with stack:
        yield make


@pytest.fixture()
def client(make_client) -> TestClient:
    return make_client()


@pytest.fixture()
def rq_worker(redis_url, redis_conn) -> Iterator[subprocess.Popen]:
    """A real ``tasmopt worker`` process on the session's Redis db, up when yielded."""
    from rq import Worker

    proc = subprocess.Popen(
        [sys.executable, "-m", "tasmopt.cli", "worker", "--url", redis_url, "--metrics-port", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while not Worker.all(connection=redis_conn):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"worker did not start: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.05)
    try:
        yield proc
    finally:
        proc.terminate()  # rq: warm shutdown on SIGTERM
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


class FakeModelSource:
    """Stands in for ``tasmopt.model.source.ModelSource``: proposes nothing."""

    name = "model"

    def __init__(self, directory: Path, device: str) -> None:
        self.directory, self.device = directory, device
        self.version = json.loads((directory / "config.json").read_text())["version"]

    def propose(self, tasks, options):
        return [[] for _ in tasks]


@pytest.fixture()
def fake_loader():
    """A loader hook that records what it loaded."""
    loaded: list[str] = []

    def load(directory: Path, device: str) -> FakeModelSource:
        src = FakeModelSource(directory, device)
        loaded.append(src.version)
        return src

    load.loaded = loaded  # type: ignore[attr-defined]
    return load


@pytest.fixture()
def clean_registry(pg_engine):
    """Empty checkpoint registry, audit log, jobs and finetune runs before the test."""
    from sqlalchemy import delete

    from tasmopt.store import AdminAction, Checkpoint, CompileJob, FinetuneRun, make_sessionmaker

    with make_sessionmaker(pg_engine)() as s, s.begin():
        for model in (Checkpoint, AdminAction, CompileJob, FinetuneRun):
            s.execute(delete(model))


@pytest.fixture()
def auth() -> dict[str, str]:
    """Authorization header of the test apps' admin token."""
    return dict(AUTH)


@pytest.fixture()
def spawn_worker(redis_url, redis_conn, pg_url, tmp_path):
    """``spawn(**env) -> Popen``: a real ``tasmopt worker`` on the session's Redis db, with
    DATABASE_URL = the session's database and SPOOL_DIR under tmp_path unless `env` says
    otherwise; up (registered with RQ) when returned, stopped after the test."""
    import os

    from rq import Worker

    procs: list[subprocess.Popen] = []

    def spawn(*args: str, **env: str) -> subprocess.Popen:
        before = {w.name for w in Worker.all(connection=redis_conn)}
        full = {
            **os.environ,
            "DATABASE_URL": pg_url,
            "SPOOL_DIR": str(tmp_path / "spool"),
            "ADMIN_TOKEN": ADMIN_TOKEN,
            "MODEL_STORE": str(tmp_path / "model_store"),
            **env,
        }
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tasmopt.cli",
                "worker",
                "--url",
                redis_url,
                "--metrics-port",
                env.get("WORKER_METRICS_PORT", "0"),
                *args,
            ],
            env=full,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        procs.append(proc)
        deadline = time.monotonic() + 30
        while {w.name for w in Worker.all(connection=redis_conn)} <= before:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"worker did not start: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.05)
        return proc

    yield spawn
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
