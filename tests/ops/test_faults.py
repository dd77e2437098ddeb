"""Faults on the native stack (uvicorn + real RQ workers): a worker SIGKILLed while it holds
a job, Redis stopped, PostgreSQL unreachable. In each case every compile answers 200 (the
baseline or an in-process check where needed) and every BuildResult served is in the database
once the fault clears: served = persisted, lost = 0 (printed, and kept in var/faults.json).
Loopback only; bounded in time and request count."""

from __future__ import annotations

import shutil
import subprocess
import time

import httpx
import pytest
from opskit import Traffic, count_persisted, report_fault, wait_for
from rq.job import Job
from rq.registry import StartedJobRegistry

from worker.queue import COMPILE_QUEUE, SERIALIZER, VERIFY_QUEUE, named_queue

pytestmark = pytest.mark.slow

SMALL = [
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


def _bodies(timelock_request: dict) -> list[dict]:
    heavy = {**timelock_request, "options": {"witnesses": 512}}  # verify jobs that last
    return [heavy, {"tir": SMALL}, {"tir": SMALL, "options": {"seed": 3}}]


def _holder(conn, queue_name: str) -> tuple[str, str] | None:
    """(job id, worker name) of a job a worker holds now, if any."""
    for job_id in StartedJobRegistry(queue=named_queue(conn, queue_name)).get_job_ids():
        try:
            job = Job.fetch(job_id, connection=conn, serializer=SERIALIZER)
        except Exception:
            continue
        if job.worker_name:
            return job.id, job.worker_name
    return None


def test_worker_killed_while_holding_a_job(
    make_stack, pg_database_factory, redis_url, redis_conn, timelock_request
):
    db = pg_database_factory()
    stack = make_stack(
        db,
        redis_url,
        VERIFY_DEADLINE_S="3",
        VERIFY_HARD_DEADLINE_S="20",
        VERIFY_MAX_JOBS="2",
        VERIFY_HELP="false",  # every check through the workers: one of them is killed
    )  # the default job timeout (300 s): recovery must not wait for it
    for name in ("w1", "w2"):
        stack.start_worker(name, "--name", name)
    api = stack.start_api()
    traffic = Traffic(api, _bodies(timelock_request), threads=3, max_requests=400).start()

    # 1. a verify job: SIGKILL the worker that holds it
    killed = []
    assert wait_for(
        lambda: (h := _holder(redis_conn, VERIFY_QUEUE)) is not None and not killed.append(h),
        timeout_s=60,
        every_s=0.002,
    ), "no job seen"
    job_id, worker = killed[0]
    stack.kill(worker)
    stack.start_worker(f"{worker}b", "--name", f"{worker}b")

    # 2. an async compile: SIGKILL its worker; the job is retried on another one
    http = httpx.Client(base_url=api, timeout=30)
    accepted = http.post("/compile/jobs", json={"tir": SMALL, "options": {"witnesses": 1024}})
    assert accepted.status_code == 202
    jid = accepted.json()["id"]
    holder = []
    assert wait_for(
        lambda: (
            (h := _holder(redis_conn, COMPILE_QUEUE)) is not None
            and h[0] == jid
            and not holder.append(h)
        ),
        timeout_s=60,
        every_s=0.002,
    )
    stack.kill(holder[0][1])
    killed_at = time.monotonic()
    stack.start_worker("w3", "--name", "w3")

    def requeued() -> bool:
        job = Job.fetch(jid, connection=redis_conn, serializer=SERIALIZER)
        return job.worker_name != holder[0][1] or job.get_status() != "started"

    # the API's reaper sees the dead worker's liveness key expire (10 s) and re-queues it
    assert wait_for(requeued, timeout_s=30, every_s=0.5), "not re-queued within 30 s"
    requeue_s = time.monotonic() - killed_at
    print(f"\n[faults] async compile re-queued {requeue_s:.1f} s after its worker's SIGKILL")

    traffic.wait_answered(traffic.answered() + 30)
    traffic.stop()
    assert wait_for(
        lambda: http.get(f"/compile/jobs/{jid}").json()["status"] == "finished",
        timeout_s=120,
        every_s=1,
    ), http.get(f"/compile/jobs/{jid}").text

    assert traffic.errors == [] and set(traffic.statuses) == {200}
    persisted = count_persisted(db, traffic.ids)
    out = report_fault(
        "worker_sigkill",
        traffic,
        persisted,
        killed_jobs=[job_id, jid],
        async_job=f"finished after retry (re-queued {requeue_s:.1f} s after the kill)",
    )
    assert out["rows_lost"] == 0


def test_redis_stopped(make_stack, pg_database_factory, private_redis, timelock_request, tmp_path):
    url, proc = private_redis
    db = pg_database_factory()
    stack = make_stack(db, url, VERIFY_DEADLINE_S="3", VERIFY_HARD_DEADLINE_S="20")
    stack.start_worker("w1")
    api = stack.start_api()
    traffic = Traffic(api, _bodies(timelock_request), threads=3, max_requests=400).start()
    traffic.wait_answered(20)
    subprocess.run(["redis-cli", "-u", url, "shutdown", "nosave"], capture_output=True, timeout=10)
    proc.wait(10)
    down_at = traffic.answered()
    http = httpx.Client(base_url=api, timeout=30)
    accepted = http.post("/compile/jobs", json={"tir": SMALL}).json()
    assert accepted["backend"] == "thread"  # Redis refused it: the API runs it
    traffic.wait_answered(down_at + 40)
    assert http.get("/readyz").json()["redis"]["ok"] is False

    port = url.rsplit(":", 1)[1].split("/")[0]
    again = subprocess.Popen(
        [
            shutil.which("redis-server"),
            "--port",
            port,
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
    try:
        assert wait_for(lambda: http.get("/readyz").json()["redis"]["ok"], timeout_s=30)
        if stack.procs["w1"].poll() is not None:  # compose restarts it; so do we
            stack.start_worker("w1b")
        back_at = traffic.answered()
        traffic.wait_answered(back_at + 20)
        traffic.stop()
        assert wait_for(
            lambda: http.get(accepted["status_url"]).json()["status"] == "finished", timeout_s=60
        )
        assert traffic.errors == [] and set(traffic.statuses) == {200}
        persisted = count_persisted(db, traffic.ids)
        out = report_fault(
            "redis_stopped", traffic, persisted, answered_while_down=back_at - down_at
        )
        assert out["rows_lost"] == 0
    finally:
        again.terminate()
        again.wait(10)


def test_postgres_unreachable(make_stack, pg_proxy, pg_url, redis_url, timelock_request):
    proxy, proxied = pg_proxy
    stack = make_stack(
        proxied,
        redis_url,
        VERIFY_DEADLINE_S="3",
        VERIFY_HARD_DEADLINE_S="20",
        DB_CONNECT_TIMEOUT_S="1",
    )
    stack.start_worker("w1")
    api = stack.start_api()
    http = httpx.Client(base_url=api, timeout=30)
    traffic = Traffic(api, _bodies(timelock_request), threads=3, max_requests=400).start()
    traffic.wait_answered(20)
    proxy.stop()
    down_at = traffic.answered()
    accepted = http.post("/compile/jobs", json={"tir": SMALL}).json()  # runs on the worker
    traffic.wait_answered(down_at + 40)
    assert "spool" in traffic.stored
    assert http.get("/readyz").status_code == 503
    time.sleep(1)
    proxy.start()
    back_at = traffic.answered()
    traffic.wait_answered(back_at + 20)
    traffic.stop()
    assert wait_for(
        lambda: (
            http.get("/readyz").json()["spooled_rows"] == 0 and http.get("/readyz").json()["ready"]
        ),
        timeout_s=60,
    )
    assert wait_for(
        lambda: http.get(accepted["status_url"]).json()["status"] == "finished", timeout_s=60
    )
    job = http.get(accepted["status_url"]).json()
    assert traffic.errors == [] and set(traffic.statuses) == {200}
    persisted = count_persisted(pg_url, traffic.ids + job["result"]["build_result_ids"])
    out = report_fault(
        "postgres_unreachable",
        traffic,
        persisted - len(job["result"]["build_result_ids"]),
        spooled_requests=traffic.stored.count("spool"),
        async_job_rows=len(job["result"]["build_result_ids"]),
    )
    assert out["rows_lost"] == 0
    assert persisted == len(traffic.ids) + len(job["result"]["build_result_ids"])
