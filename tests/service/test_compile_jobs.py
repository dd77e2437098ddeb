"""Async compiles: 202 + id, status until finished, the same result as POST /compile, rows
and result in the database (surviving the loss of Redis), client errors at once or as a
failed job, in-process without Redis and on real RQ workers with it."""

from __future__ import annotations

import time
import uuid

import pytest

from tasmopt.store import CompileJob, count_build_results, get_compile_job

pytestmark = pytest.mark.usefixtures("clean_registry")


def _poll(client, url: str, timeout_s: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        r = client.get(url)
        assert r.status_code == 200, r.text
        body = r.json()
        if body["status"] in ("finished", "failed") or time.monotonic() > deadline:
            return body
        time.sleep(0.05)


def test_in_process_job_matches_the_sync_compile(client, timelock_request, pg_session):
    r = client.post("/compile/jobs", json=timelock_request)
    assert r.status_code == 202, r.text
    accepted = r.json()
    assert accepted["backend"] == "thread" and accepted["status"] == "queued"
    assert accepted["id"] == r.headers["x-request-id"]
    assert r.headers["location"] == accepted["status_url"] == f"/compile/jobs/{accepted['id']}"
    out = _poll(client, accepted["status_url"])
    assert out["status"] == "finished", out
    result = out["result"]
    sync = client.post("/compile", json=timelock_request).json()
    assert result["tasm"] == sync["tasm"] and result["cycles"] == sync["cycles"]
    assert result["request_id"] == accepted["id"] and result["stored"] == "database"
    jid = uuid.UUID(accepted["id"])
    assert count_build_results(pg_session, request_id=jid) == len(result["build_result_ids"])
    row = get_compile_job(pg_session, id=jid)
    assert row.status == "finished" and row.response["tasm"] == result["tasm"]
    assert row.request["tir"] == timelock_request["tir"]
    assert out["started_at"] is not None and out["finished_at"] is not None


def test_client_errors(client, add_mul_tir):
    r = client.post("/compile/jobs", json={"tir": [{"FnStart": "f"}, {"Nope": 1}]})
    assert r.status_code == 422 and r.json()["code"] == "invalid_tir"
    r = client.post("/compile/jobs", data=b"{", headers={"content-type": "application/json"})
    assert r.status_code == 400
    r = client.post(
        "/compile/jobs", json={"tir": add_mul_tir, "baseline_tasm": "__add_mul:\n    push\n"}
    )
    assert r.status_code == 202
    out = _poll(client, r.json()["status_url"])
    assert out["status"] == "failed" and out["error"].startswith("invalid_baseline_tasm:")
    assert out["result"] is None
    assert client.get(f"/compile/jobs/{uuid.uuid4()}").status_code == 404
    assert client.get("/compile/jobs/not-a-uuid").status_code == 422


def test_database_down_job_result_is_spooled_then_stored(
    make_client, pg_proxy, pg_session, add_mul_tir
):
    proxy, url = pg_proxy
    c = make_client(database_url=url, spool_retry_s=0.3)
    assert c.get("/readyz").json()["ready"]
    proxy.stop()
    r = c.post("/compile/jobs", json={"tir": add_mul_tir})
    assert r.status_code == 202
    out = _poll(c, r.json()["status_url"])  # answered from memory while the database is down
    assert out["status"] == "finished" and out["result"]["stored"] == "spool"
    proxy.start()
    jid = uuid.UUID(r.json()["id"])
    deadline = time.monotonic() + 15
    while c.app.state.spool.pending_rows() and time.monotonic() < deadline:
        time.sleep(0.05)
    pg_session.expire_all()
    row = pg_session.get(CompileJob, jid)
    assert row is not None and row.status == "finished"
    assert row.response["build_result_ids"] == out["result"]["build_result_ids"]
    assert count_build_results(pg_session, request_id=jid) == len(out["result"]["build_result_ids"])


def test_jobs_run_on_rq_workers_and_survive_redis_loss(
    make_client, redis_url, redis_conn, spawn_worker, timelock_request, pg_session
):
    from rq.job import Job

    from worker.queue import SERIALIZER

    spawn_worker()
    c = make_client(redis_url=redis_url)
    r = c.post("/compile/jobs", json=timelock_request)
    assert r.status_code == 202 and r.json()["backend"] == "rq"
    out = _poll(c, r.json()["status_url"])
    assert out["status"] == "finished" and out["backend"] == "rq", out
    assert out["result"]["cycles"] < out["result"]["baseline_cycles"]
    # the status is answered from the database, which the worker writes before it returns:
    # RQ stores the job's return value a moment later
    job = Job.fetch(r.json()["id"], connection=redis_conn, serializer=SERIALIZER)
    deadline = time.monotonic() + 15
    while job.return_value(refresh=True) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert job.return_value()["tasm"] == out["result"]["tasm"]
    jid = uuid.UUID(r.json()["id"])
    assert count_build_results(pg_session, request_id=jid) == len(out["result"]["build_result_ids"])

    for key in redis_conn.scan_iter("rq:*"):  # Redis loses everything
        redis_conn.delete(key)
    again = c.get(r.json()["status_url"]).json()
    assert again["status"] == "finished" and again["result"]["tasm"] == out["result"]["tasm"]


def test_redis_down_at_submit_runs_in_process(make_client, private_redis, add_mul_tir):
    import subprocess

    url, proc = private_redis
    c = make_client(redis_url=url, verify_deadline_s=1, verify_hard_deadline_s=2)
    subprocess.run(["redis-cli", "-u", url, "shutdown", "nosave"], capture_output=True, timeout=10)
    proc.wait(10)
    r = c.post("/compile/jobs", json={"tir": add_mul_tir})
    assert r.status_code == 202 and r.json()["backend"] == "thread"
    assert _poll(c, r.json()["status_url"])["status"] == "finished"
