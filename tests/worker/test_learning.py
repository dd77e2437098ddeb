"""The learning-loop jobs: the finetune check (trigger rules, watermark, recorded runs and
metrics), scheduled by a real RQ cron scheduler with the JSON serializer, and run by a
metered worker that exports job durations and failures."""

from __future__ import annotations

import uuid
import zlib
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import delete

from tasmopt.store import (
    BuildResult,
    FinetuneRun,
    insert_build_results,
    list_finetune_runs,
    make_sessionmaker,
)
from worker import context
from worker.cron import FINETUNE_CRON_NAME, build_scheduler
from worker.jobs import finetune_job
from worker.metrics import FINETUNE_RUNS, JOB_FAILURES, JOB_SECONDS, MeteredSimpleWorker
from worker.queue import LEARN_QUEUE, SERIALIZER, VERIFY_QUEUE, named_queue


@pytest.fixture()
def factory(pg_engine):
    f = make_sessionmaker(pg_engine)
    with f() as s, s.begin():
        s.execute(delete(FinetuneRun))
        s.execute(delete(BuildResult))
    context.configure(session_factory=f)
    yield f
    context.reset()


def _blocks(factory, n: int, *, age: timedelta = timedelta(0)) -> None:
    when = datetime.now(UTC) - age
    rows = [
        {
            "id": uuid.uuid4(),
            "request_id": uuid.uuid4(),
            "tir_hash": "0" * 64,
            "function": "f",
            "block_index": 0,
            "tasm": "push 1",
            "valid": True,
            "clock_cycles": 1,
            "compiler_cycles": 2,
            "table_heights": {},
            "padded_height": None,
            "fallback_used": False,
            "source": "rules",
            "model_version": None,
            "created_at": when,
            "latency_ms": 1.0,
        }
        for _ in range(n)
    ]
    with factory() as s, s.begin():
        insert_build_results(s, rows=rows)


def _count(outcome: str) -> float:
    return FINETUNE_RUNS.labels(outcome)._value.get()


def test_finetune_trigger_rules(factory):
    before = _count("no_new_results")
    assert finetune_job(min_results=50)["outcome"] == "no_new_results"
    assert _count("no_new_results") == before + 1
    _blocks(factory, 10)
    out = finetune_job(min_results=50)
    assert out["outcome"] == "waiting" and out["new_results"] == 10
    _blocks(factory, 40)
    out = finetune_job(min_results=50)  # the watermark did not move: 50 new now
    assert out["outcome"] == "learning_unavailable" and out["new_results"] == 50
    assert (
        finetune_job(min_results=1000, force=True, trigger="admin")["outcome"]
        == "learning_unavailable"
    )
    with factory() as s:
        runs = list_finetune_runs(s)
    assert [r.outcome for r in runs] == [
        "learning_unavailable",
        "learning_unavailable",
        "waiting",
        "no_new_results",
    ]
    assert runs[0].trigger == "admin" and runs[1].trigger == "cron"
    assert runs[0].detail["force"] and runs[0].finished_at >= runs[0].started_at


def test_old_results_trigger_after_max_age(factory):
    _blocks(factory, 3, age=timedelta(hours=25))
    assert finetune_job(min_results=50, max_age_h=24)["outcome"] == "learning_unavailable"


def test_finetune_is_cron_scheduled_and_run_by_a_worker(factory, redis_conn):
    scheduler = build_scheduler(redis_conn, interval_s=3600, min_results=50, max_age_h=24)
    [cron] = scheduler.get_jobs()
    assert cron.name == FINETUNE_CRON_NAME and cron.func is finetune_job
    assert [c.name for c in scheduler.enqueue_jobs()] == [FINETUNE_CRON_NAME]  # due at once
    assert scheduler.enqueue_jobs() == []  # next one in an hour
    queue = named_queue(redis_conn, LEARN_QUEUE)
    [job] = queue.get_jobs()
    assert job.func_name == "worker.jobs.finetune_job"
    assert job.kwargs == {"trigger": "cron", "min_results": 50, "max_age_h": 24}
    data = zlib.decompress(redis_conn.hget(job.key, "data"))
    assert data[:1] in (b"{", b"[")  # JSON, not pickle
    assert cron.get_job_ids(redis_conn) == [job.id]

    before = JOB_SECONDS.labels(LEARN_QUEUE)._sum.get()
    MeteredSimpleWorker([queue], connection=redis_conn, serializer=SERIALIZER).work(
        burst=True, logging_level="WARNING"
    )
    with factory() as s:
        [run] = list_finetune_runs(s)
    assert (run.trigger, run.outcome, run.job_id) == ("cron", "no_new_results", job.id)
    assert JOB_SECONDS.labels(LEARN_QUEUE)._sum.get() > before


def test_cron_expression(redis_conn):
    scheduler = build_scheduler(redis_conn, cron="*/15 * * * *", min_results=50, max_age_h=24)
    [cron] = scheduler.get_jobs()
    assert cron.cron == "*/15 * * * *" and cron.next_enqueue_time is not None


def test_metered_worker_counts_failures(redis_conn):
    queue = named_queue(redis_conn, VERIFY_QUEUE)
    queue.enqueue("worker.jobs.check_blocks_job", args=([{"bogus": 1}],))
    before = JOB_FAILURES.labels(VERIFY_QUEUE)._value.get()
    MeteredSimpleWorker([queue], connection=redis_conn, serializer=SERIALIZER).work(
        burst=True, logging_level="ERROR"
    )
    assert JOB_FAILURES.labels(VERIFY_QUEUE)._value.get() == before + 1
