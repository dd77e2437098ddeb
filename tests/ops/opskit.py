"""Ops test kit: the production processes (migration, uvicorn API, RQ workers, scheduler)
started natively against the machine's PostgreSQL and Redis, as docker-compose.yml starts
them in containers (loopback only), and the dashboard's PromQL."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "ops-admin-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout_s: float = 30.0, every_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except Exception:
            pass
        time.sleep(every_s)
    return bool(predicate())


@dataclass
class Stack:
    """Processes of one test; `env` is what every process gets."""

    env: dict[str, str]
    logs: Path
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    api_url: str | None = None
    worker_ports: dict[str, int] = field(default_factory=dict)

    def _spawn(
        self, name: str, args: list[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            args,
            cwd=REPO,
            env={**self.env, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def migrate(self) -> None:
        """``alembic upgrade head`` (the compose `migrate` service)."""
        subprocess.run(
            [sys.executable, "-m", "alembic", "upgrade", "head"],
            cwd=REPO,
            env=self.env,
            check=True,
            capture_output=True,
            timeout=120,
        )

    def start_api(self, **env: str) -> str:
        """uvicorn with the app factory (the compose `api` command); waits for /healthz."""
        port = free_port()
        self._spawn(
            "api",
            [
                sys.executable,
                "-m",
                "uvicorn",
                "service.main:create_app",
                "--factory",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            env,
        )
        self.api_url = f"http://127.0.0.1:{port}"
        if not wait_for(
            lambda: httpx.get(f"{self.api_url}/healthz", timeout=1).status_code == 200, timeout_s=60
        ):
            pytest.fail(f"api did not start:\n{self.log('api')}")
        return self.api_url

    def start_worker(self, name: str, *args: str, **env: str) -> int:
        """``tasmopt worker`` with its own metrics port; waits for /metrics."""
        port = free_port()
        self._spawn(
            name,
            [sys.executable, "-m", "tasmopt.cli", "worker", "--metrics-port", str(port), *args],
            env,
        )
        self.worker_ports[name] = port
        if not wait_for(
            lambda: httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=1).status_code == 200,
            timeout_s=60,
        ):
            pytest.fail(f"{name} did not start:\n{self.log(name)}")
        return port

    def start_scheduler(self, interval_s: int = 1) -> None:
        self._spawn(
            "scheduler",
            [sys.executable, "-m", "tasmopt.cli", "scheduler", "--interval", str(interval_s)],
        )

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs[name]
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)
        proc.wait(15)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait(5)


# -- the dashboard's PromQL -------------------------------------------------------------------

DASHBOARD = REPO / "deploy" / "grafana" / "dashboards" / "tasmopt.json"

_PROMQL_WORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "inf",
    "nan",
    # aggregation operators (may be followed by `by (...)` before their `(`)
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
}


def promql_metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects: identifiers that are neither functions nor
    aggregations (followed by ``(``), keywords, label names (inside ``{}`` or a ``by (...)``
    list), durations or numbers."""
    import re

    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors
    text = re.sub(
        r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r"\1", text
    )  # label lists
    names = set()
    for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)\b(\s*\()?", text):
        word, call = m.group(1), m.group(2)
        if call or word.lower() in _PROMQL_WORDS:
            continue
        names.add(word)
    return names


def dashboard_exprs() -> list[str]:
    import json

    dash = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]


def exposition_names(text: str) -> set[str]:
    """Sample names (``_bucket``, ``_total``, ...) in a Prometheus text exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


# -- traffic ------------------------------------------------------------------------------------


class Traffic:
    """Compiles sent by `threads` threads until `stop` (at most `max_requests`): every answer
    is recorded (status, `stored`, build_result_ids), transport errors too."""

    def __init__(
        self,
        url: str,
        bodies: list[dict],
        *,
        threads: int = 3,
        max_requests: int = 2000,
        timeout_s: float = 60.0,
    ) -> None:
        import threading

        self.url, self.bodies, self.timeout_s = url, bodies, timeout_s
        self.max_requests = max_requests
        self.statuses: list[int] = []
        self.stored: list[str] = []
        self.ids: list[str] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._n = 0
        self._threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(threads)]

    def _next(self) -> int | None:
        with self._lock:
            if self._stop.is_set() or self._n >= self.max_requests:
                return None
            self._n += 1
            return self._n

    def _loop(self) -> None:
        with httpx.Client(base_url=self.url, timeout=self.timeout_s) as client:
            while (i := self._next()) is not None:
                try:
                    r = client.post("/compile", json=self.bodies[i % len(self.bodies)])
                except httpx.HTTPError as exc:
                    with self._lock:
                        self.errors.append(repr(exc))
                    continue
                with self._lock:
                    self.statuses.append(r.status_code)
                    if r.status_code == 200:
                        out = r.json()
                        self.stored.append(out["stored"])
                        self.ids.extend(out["build_result_ids"])

    def start(self) -> Traffic:
        for t in self._threads:
            t.start()
        return self

    def answered(self) -> int:
        with self._lock:
            return len(self.statuses)

    def wait_answered(self, n: int, timeout_s: float = 120.0) -> None:
        wait_for(lambda: self.answered() >= n, timeout_s=timeout_s, every_s=0.02)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(self.timeout_s + 10)


def count_persisted(database_url: str, ids: list[str]) -> int:
    """How many of the BuildResult `ids` are in the database."""
    import uuid

    from tasmopt.store import make_engine, make_sessionmaker
    from tasmopt.store.queries import existing_ids

    engine = make_engine(database_url)
    try:
        with make_sessionmaker(engine)() as session:
            return len(existing_ids(session, ids=[uuid.UUID(i) for i in ids]))
    finally:
        engine.dispose()


def report_fault(name: str, traffic: Traffic, persisted: int, **extra) -> dict:
    """Print the counts of a fault run and add them to var/faults.json."""
    import json

    out = {
        "fault": name,
        "requests": traffic.answered(),
        "status_counts": {str(s): traffic.statuses.count(s) for s in set(traffic.statuses)},
        "transport_errors": len(traffic.errors),
        "stored": {s: traffic.stored.count(s) for s in set(traffic.stored)},
        "rows_served": len(traffic.ids),
        "rows_persisted": persisted,
        "rows_lost": len(traffic.ids) - persisted,
        **extra,
    }
    print(f"\n[fault] {json.dumps(out)}")
    path = REPO / "var" / "faults.json"
    path.parent.mkdir(exist_ok=True)
    runs = json.loads(path.read_text()) if path.exists() else {}
    runs[name] = out
    path.write_text(json.dumps(runs, indent=2) + "\n")
    return out
