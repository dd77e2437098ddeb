"""Failures around the optimizer never block a compile: Redis stopped, database unreachable
(rows spooled, then drained into the database when it is back), and what /readyz reports."""

from __future__ import annotations

import subprocess
import time
import uuid

from sqlalchemy import select

from tasmopt.store import BuildResult


def _wait_for(predicate, timeout_s: float = 15.0, every_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every_s)
    return predicate()


def test_redis_stopped_verification_runs_in_process(
    make_client, client, private_redis, timelock_request
):
    url, proc = private_redis
    c = make_client(redis_url=url, verify_deadline_s=20, verify_hard_deadline_s=30)
    assert c.get("/readyz").json()["redis"]["ok"]
    subprocess.run(
        ["redis-cli", "-u", url, "shutdown", "nosave"], check=False, capture_output=True, timeout=10
    )
    proc.wait(10)
    start = time.monotonic()
    r = c.post("/compile", json=timelock_request)
    elapsed = time.monotonic() - start
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["cycles"] < out["baseline_cycles"]  # verified after all: in-process
    assert out["tasm"] == client.post("/compile", json=timelock_request).json()["tasm"]
    assert elapsed < 5  # no waiting for the deadline when Redis refuses connections
    ready = c.get("/readyz")
    assert ready.status_code == 503 and not ready.json()["redis"]["ok"]
    assert ready.json()["database"]["ok"]


def test_database_down_rows_are_spooled_then_drained(
    make_client, pg_proxy, pg_session, timelock_request, example_request
):
    proxy, url = pg_proxy
    c = make_client(database_url=url, spool_retry_s=1.0)
    assert c.get("/readyz").json()["ready"]
    proxy.stop()

    served = []
    for req in (timelock_request, example_request, timelock_request):
        r = c.post("/compile", json=req)
        assert r.status_code == 200, r.text
        assert r.json()["stored"] == "spool"
        served.append(r.json())
    ids = {i for out in served for i in out["build_result_ids"]}
    assert not c.app.state.db_breaker.allow()  # later requests skip the connect attempt
    spool = c.app.state.spool
    assert spool.pending_rows() == len(ids) > 3
    ready = c.get("/readyz")
    assert ready.status_code == 503 and not ready.json()["database"]["ok"]
    assert ready.json()["spooled_rows"] == len(ids)

    proxy.start()
    assert _wait_for(lambda: spool.pending_rows() == 0), "spool not drained"
    stored = set(
        pg_session.scalars(
            select(BuildResult.id).where(BuildResult.id.in_([uuid.UUID(i) for i in ids]))
        )
    )
    assert {str(i) for i in stored} == ids
    assert spool.files() == []
    assert spool.drain(c.app.state.session_factory) == 0  # idempotent: nothing left to write
    assert c.get("/readyz").json()["ready"]


def test_unanswering_database_costs_one_connect_timeout(make_client, pg_proxy, add_mul_tir):
    proxy, url = pg_proxy
    c = make_client(database_url=url, db_connect_timeout_s=1, spool_retry_s=30)
    assert c.get("/readyz").json()["ready"]
    proxy.stop()
    proxy.blackhole = True  # a host that swallows packets: connects hang until the timeout
    proxy.start()
    times = []
    for _ in range(3):
        start = time.monotonic()
        r = c.post("/compile", json={"tir": add_mul_tir})
        times.append(time.monotonic() - start)
        assert r.status_code == 200 and r.json()["stored"] == "spool"
    assert times[0] >= 0.9  # the first request waits for the connect timeout...
    assert max(times[1:]) < 0.5  # ...the next ones go straight to the spool


def test_spool_drain_skips_rows_already_stored(make_client, pg_proxy, timelock_request):
    proxy, url = pg_proxy
    c = make_client(database_url=url, spool_retry_s=60)  # no background drain in this test
    proxy.stop()
    out = c.post("/compile", json=timelock_request).json()
    spool = c.app.state.spool
    proxy.start()
    lines = spool.files()[0].read_text()
    # A drainer that died after its commit leaves its file behind: the rows must not double.
    assert spool.drain(c.app.state.session_factory) == len(out["build_result_ids"])
    (spool.directory / "draining-crashed.jsonl").write_text(lines)
    assert spool.drain(c.app.state.session_factory) == 0
    assert spool.files() == []


def test_service_starts_with_the_database_down(make_client, pg_proxy, add_mul_tir):
    proxy, url = pg_proxy
    proxy.stop()
    c = make_client(database_url=url, spool_retry_s=0.2)
    assert c.get("/healthz").json() == {"status": "ok"}
    assert c.get("/readyz").status_code == 503
    r = c.post("/compile", json={"tir": add_mul_tir})
    assert r.status_code == 200 and r.json()["stored"] == "spool"
    proxy.start()
    assert _wait_for(lambda: c.app.state.spool.pending_rows() == 0)
    assert c.get("/readyz").json()["ready"]
