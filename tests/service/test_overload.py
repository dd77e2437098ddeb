"""Overload and abandoned requests (issue 15): a bounded number of compiles per process (503
with Retry-After beyond it), a deadline per compile, cancellation when the client leaves, and a
control plane (/healthz, /readyz, /metrics) that answers while every compile slot is taken."""

from __future__ import annotations

import threading
import time

import anyio
import pytest

from service.api.deps import get_compiler
from service.core.admission import Admission, run_watched
from service.core.errors import Overloaded
from tasmopt.deadline import Deadline
from tasmopt.optimizer import compile as compile_tir

FN = [{"Entry": "main"}, {"FnStart": "main"}, {"Push": 1}, {"Pop": 1}, "Return", "FnEnd"]


def test_admission_counts_running_and_waiting_compiles():
    a = Admission(slots=1, queue=1, retry_after_s=3)
    a.enter()
    a.enter()
    with pytest.raises(Overloaded) as info:
        a.enter()
    assert info.value.status == 503 and info.value.headers == {"Retry-After": "3"}
    assert "COMPILE_SLOTS=1" in info.value.message and a.refused == 1
    a.leave()
    a.enter()  # a place is free again


def test_one_client_cannot_take_every_place():
    from service.core.errors import TooManyRequests

    a = Admission(slots=2, queue=8, retry_after_s=1, per_client=2)
    a.enter("10.0.0.1")
    a.enter("10.0.0.1")
    with pytest.raises(TooManyRequests) as info:
        a.enter("10.0.0.1")
    assert info.value.status == 429 and "COMPILE_PER_CLIENT=2" in info.value.message
    a.enter("10.0.0.2")  # another client still gets in
    a.leave("10.0.0.1")
    a.enter("10.0.0.1")
    assert a.held == 3


def test_a_disconnected_client_cancels_its_compile():
    deadline = Deadline(60)
    looked = threading.Event()

    def work() -> str:
        t = time.monotonic()
        while not deadline.expired and time.monotonic() - t < 10:
            looked.set()
            time.sleep(0.01)
        return deadline.why() if deadline.expired else "ran to the end"

    async def gone() -> bool:
        return looked.is_set()  # the client leaves once the compile has started

    async def main() -> str:
        return await run_watched(
            work, deadline=deadline, disconnected=gone, limiter=anyio.CapacityLimiter(1)
        )

    t = time.monotonic()
    assert anyio.run(main) == "client disconnected"
    assert time.monotonic() - t < 3


def test_errors_of_the_compile_thread_keep_their_type():
    async def main() -> None:
        await run_watched(
            lambda: (_ for _ in ()).throw(KeyError("x")),
            deadline=Deadline(5),
            disconnected=_never,
            limiter=anyio.CapacityLimiter(1),
        )

    with pytest.raises(KeyError):
        anyio.run(main)


async def _never() -> bool:
    return False


def test_overload_is_503_with_retry_after_and_health_still_answers(make_client):
    started, release = threading.Event(), threading.Event()

    def slow(tir, baseline_tasm=None, *, options, verify=None):
        started.set()
        release.wait(20)
        return compile_tir(tir, baseline_tasm, options=options, verify=verify)

    http = make_client(compile_slots=1, compile_queue=0, retry_after_s=7)
    http.app.dependency_overrides[get_compiler] = lambda: slow
    first: dict = {}
    t = threading.Thread(target=lambda: first.update(r=http.post("/compile", json={"tir": FN})))
    t.start()
    try:
        assert started.wait(20)
        r = http.post("/compile", json={"tir": FN})
        assert r.status_code == 503, r.text
        assert r.json()["code"] == "overloaded" and r.headers["retry-after"] == "7"
        for path in ("/healthz", "/readyz", "/metrics"):  # the control plane is not queued
            assert http.get(path).status_code == 200, path
    finally:
        release.set()
        t.join(30)
        http.app.dependency_overrides.clear()
    assert first["r"].status_code == 200, first["r"].text
    assert http.post("/compile", json={"tir": FN}).status_code == 200  # the slot is free


def test_the_compile_deadline_comes_from_the_settings_or_the_request(make_client):
    seen: list[Deadline] = []

    def spy(tir, baseline_tasm=None, *, options, verify=None):
        seen.append(options.deadline)
        return compile_tir(tir, baseline_tasm, options=options, verify=verify)

    http = make_client(compile_deadline_s=20, default_deadline_ms=12_500)
    http.app.dependency_overrides[get_compiler] = lambda: spy
    try:
        assert http.post("/compile", json={"tir": FN}).status_code == 200
        opts = {"deadline_ms": 3000}
        assert http.post("/compile", json={"tir": FN, "options": opts}).status_code == 200
        too_long = {"tir": FN, "options": {"deadline_ms": 20_001}}
        r = http.post("/compile", json=too_long)
    finally:
        http.app.dependency_overrides.clear()
    assert len(seen) == 2
    assert 10 < seen[0].remaining() <= 12.5  # DEFAULT_DEADLINE_MS
    assert 1 < seen[1].remaining() <= 3.0  # options.deadline_ms
    assert r.status_code == 422 and "COMPILE_DEADLINE_S" in r.json()["message"]


def test_a_disconnect_reaches_the_route_through_the_middleware_stack(pg_url, tmp_path):
    """The whole app (middlewares included) over raw ASGI: the client sends its body, then
    disconnects; the running compile sees its deadline cancelled within a second. (Starlette's
    BaseHTTPMiddleware used to hide the disconnect from the route.)"""
    import asyncio
    import json

    from service.core.config import Settings
    from service.main import create_app

    ended: dict[str, float] = {}

    def spin(tir, baseline_tasm=None, *, options, verify=None):
        t = time.monotonic()
        while not options.deadline.expired and time.monotonic() - t < 20:
            time.sleep(0.01)
        ended["at"] = time.monotonic()
        ended["why"] = options.deadline.why()
        return compile_tir(tir, baseline_tasm, options=options, verify=verify)

    app = create_app(
        Settings(
            database_url=pg_url,
            spool_dir=tmp_path,
            admin_token="x-admin-token-0123456789",
            default_deadline_ms=30_000,
            deepen=False,
            compile_processes=0,
        )
    )
    app.dependency_overrides[get_compiler] = lambda: spin
    body = json.dumps({"tir": FN}).encode()

    async def main() -> float:
        async with app.router.lifespan_context(app):
            gone = asyncio.Event()
            calls = {"n": 0}

            async def receive():
                calls["n"] += 1
                if calls["n"] == 1:
                    return {"type": "http.request", "body": body, "more_body": False}
                await gone.wait()
                return {"type": "http.disconnect"}

            async def send(message):
                pass

            scope = {
                "type": "http",
                "method": "POST",
                "path": "/compile",
                "query_string": b"",
                "headers": [(b"content-type", b"application/json")],
                "http_version": "1.1",
                "scheme": "http",
                "server": ("test", 80),
                "client": ("test", 1),
                "root_path": "",
                "app": app,
            }
            task = asyncio.create_task(app(scope, receive, send))
            await asyncio.sleep(0.5)
            gone.set()
            left = time.monotonic()
            await asyncio.wait_for(task, 30)
            return left

    left = anyio.run(main)
    assert ended["why"] == "client disconnected"
    assert ended["at"] - left < 1.0
