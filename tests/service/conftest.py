"""Service fixtures: apps on the session's PostgreSQL, a TCP proxy that can make the database
unreachable for real, a private redis-server that can be stopped, and a real RQ worker."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import sys
import threading
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
    an empty MODEL_STORE under tmp_path, ADMIN_TOKEN `ADMIN_TOKEN`.
    """
    stack = contextlib.ExitStack()

    def make(model_loader=None, **overrides) -> TestClient:
        values = {"database_url": pg_url, "redis_url": None, "spool_dir": tmp_path / "spool",
                  "spool_retry_s": 0.2, "model_store": tmp_path / "model_store",
                  "admin_token": ADMIN_TOKEN, **overrides}
        app = create_app(Settings(**values), model_loader=model_loader)
        client = TestClient(app, raise_server_exceptions=False)
        return stack.enter_context(client)

    with stack:
        yield make


@pytest.fixture()
def client(make_client) -> TestClient:
    return make_client()


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
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
         "no", "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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


@pytest.fixture()
def rq_worker(redis_url, redis_conn) -> Iterator[subprocess.Popen]:
    """A real ``tasmopt worker`` process on the session's Redis db, up when yielded."""
    from rq import Worker

    proc = subprocess.Popen([sys.executable, "-m", "tasmopt.cli", "worker", "--url", redis_url,
                             "--metrics-port", "0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
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
