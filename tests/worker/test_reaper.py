"""Fast recovery of the jobs of killed workers (`worker.reaper`), on a real Redis: a started
job whose worker keeps a liveness key that has expired goes back to its queue at once; the jobs
of live workers, and of workers that keep no liveness key, are left alone."""

from __future__ import annotations

import time

from rq import Queue, Retry
from rq.executions import Execution
from rq.job import JobStatus
from rq.registry import StartedJobRegistry
from rq.serializers import JSONSerializer

from worker.reaper import ALIVE_TTL_S, Liveness, reap


def _started(queue: Queue, worker: str, retries: int = 1):
    job = queue.enqueue(
        "worker.jobs.check_blocks_job", [], retry=Retry(max=retries) if retries else None
    )
    queue.remove(job)  # a worker took it
    registry = StartedJobRegistry(queue=queue)
    with queue.connection.pipeline() as p:
        execution = Execution.create(job, 600, p, worker_name=worker)
        job.set_status(JobStatus.STARTED, pipeline=p)
        job.worker_name = worker
        job.save(pipeline=p)
        registry.add_execution(execution, p, ttl=600)  # RQ would wait 600 s
        p.execute()
    return job


def test_jobs_of_dead_workers_are_requeued_at_once(redis_conn):
    queue = Queue("compile", connection=redis_conn, serializer=JSONSerializer)
    registry = StartedJobRegistry(queue=queue)
    live = Liveness(redis_conn, "w-live")
    live.start()
    dead = Liveness(redis_conn, "w-dead")
    dead.start()
    dead.stop()  # what a kill -9 leaves, once the key has expired
    try:
        a = _started(queue, "w-dead")
        b = _started(queue, "w-live")
        c = _started(queue, "someone-else")  # keeps no liveness key: RQ's timeout applies
        assert reap(redis_conn, ["compile"]) == [a.id]
        assert queue.job_ids == [a.id] and a.get_status(refresh=True) == JobStatus.QUEUED
        assert sorted(registry.get_job_ids()) == sorted([b.id, c.id])
        assert reap(redis_conn, ["compile"]) == []  # idempotent
    finally:
        live.stop()


def test_a_job_without_retries_left_fails_instead(redis_conn):
    queue = Queue("compile", connection=redis_conn, serializer=JSONSerializer)
    Liveness(redis_conn, "w-gone").start()
    redis_conn.delete("tasmopt:alive:w-gone")
    job = _started(queue, "w-gone", retries=0)
    assert reap(redis_conn, ["compile"]) == [job.id]
    assert job.get_status(refresh=True) == JobStatus.FAILED and queue.job_ids == []


def test_the_liveness_key_is_refreshed_while_the_worker_lives(redis_conn, monkeypatch):
    import worker.reaper as R

    monkeypatch.setattr(R, "ALIVE_EVERY_S", 0.05)
    keeper = Liveness(redis_conn, "w-beat")
    keeper.start()
    try:
        time.sleep(0.3)
        ttl = redis_conn.ttl("tasmopt:alive:w-beat")
        assert 0 < ttl <= ALIVE_TTL_S
    finally:
        keeper.stop()
    assert not redis_conn.exists("tasmopt:alive:w-beat")
